//! JavaScript values to JSON, for props and recorded state.
//!
//! napi's own serde conversion fails on the first value JSON cannot hold
//! (`NaN`, `Infinity`, a function, a Symbol, a BigInt) with a bare
//! `InvalidArg` that names neither the field nor the resource. Props are user
//! input, so this walk reports every such value by its path, as the core's
//! validation does, and the caller turns them into `E_INVALID_CONFIG`.
//! Otherwise it follows `JSON.stringify`: `undefined` properties are left
//! out, integral numbers stay integers.

use clickhouse_schema_core::ConfigIssue;
use napi::ValueType;
use napi::bindgen_prelude::{JsObjectValue, JsValue, Object, Unknown};
use serde_json::{Map, Number, Value};

/// Deeper than any props; a cycle reaches it instead of overflowing the stack.
const MAX_DEPTH: usize = 64;

/// `value` as JSON, or every path holding a value JSON cannot represent.
pub(crate) fn to_json(value: Unknown<'_>) -> Result<Value, Vec<ConfigIssue>> {
    let mut issues = Vec::new();
    let json = walk(value, "", 0, &mut issues);
    if issues.is_empty() {
        Ok(json.unwrap_or(Value::Null))
    } else {
        Err(issues)
    }
}

fn walk(value: Unknown<'_>, path: &str, depth: usize, issues: &mut Vec<ConfigIssue>) -> Option<Value> {
    let mut problem = |reason: &str| {
        issues.push(ConfigIssue {
            path: path.to_owned(),
            reason: reason.to_owned(),
        });
        None
    };
    let Ok(kind) = value.get_type() else {
        return problem("could not be read");
    };
    match kind {
        ValueType::Undefined => None,
        ValueType::Null => Some(Value::Null),
        // SAFETY (every cast below): `get_type` just reported this type.
        ValueType::Boolean => unsafe { value.cast::<bool>() }.ok().map(Value::Bool),
        ValueType::String => unsafe { value.cast::<String>() }.ok().map(Value::String),
        ValueType::Number => {
            let Ok(n) = (unsafe { value.cast::<f64>() }) else {
                return problem("could not be read as a number");
            };
            if n.is_nan() {
                return problem("is NaN, which is not a number JSON (or ClickHouse) can take");
            }
            if n.is_infinite() {
                return problem("is Infinity, which is not a finite number");
            }
            // Integral values stay integers, as JSON.parse would give them.
            if n.fract() == 0.0 && n.abs() < 9_007_199_254_740_992.0 {
                Some(Value::Number(Number::from(n as i64)))
            } else {
                Number::from_f64(n).map(Value::Number)
            }
        }
        ValueType::Function if path == "executor" || path.starts_with("executor.") => problem(
            "is part of an executor, which is not a prop: pass it in the options argument, \
             apply(id, props, previousState, { executor }) (likewise plan and destroy), or to the Alchemy \
             provider as a Layer, clickHouseSchemaExecutor(executor)",
        ),
        ValueType::Function => problem("is a function, but props hold only data (JSON)"),
        ValueType::Symbol => problem("is a Symbol, which props cannot hold"),
        ValueType::BigInt => problem("is a BigInt: write it as a number"),
        ValueType::External | ValueType::Unknown => problem("is not a plain value"),
        ValueType::Object => {
            if depth >= MAX_DEPTH {
                return problem("is nested too deeply (does it refer to itself?)");
            }
            let Ok(object) = (unsafe { value.cast::<Object>() }) else {
                return problem("could not be read as an object");
            };
            if object.is_array().unwrap_or(false) {
                let len = object.get_array_length().unwrap_or(0);
                let mut items = Vec::with_capacity(len as usize);
                for i in 0..len {
                    let item_path = format!("{path}[{i}]");
                    match object.get_element::<Unknown>(i) {
                        // JSON.stringify writes a hole or `undefined` in an array as null.
                        Ok(item) => {
                            items.push(walk(item, &item_path, depth + 1, issues).unwrap_or(Value::Null))
                        }
                        Err(_) => items.push(Value::Null),
                    }
                }
                Some(Value::Array(items))
            } else {
                let keys = Object::keys(&object).unwrap_or_default();
                let mut map = Map::new();
                for key in keys {
                    let key_path = child_path(path, &key);
                    if let Ok(child) = object.get_named_property::<Unknown>(&key)
                        && let Some(v) = walk(child, &key_path, depth + 1, issues)
                    {
                        map.insert(key, v);
                    }
                }
                Some(Value::Object(map))
            }
        }
    }
}

/// `a.b`, or `a["not an identifier"]`, as the core's validation writes paths.
fn child_path(parent: &str, key: &str) -> String {
    let identifier = key
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '$')
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$');
    match (parent.is_empty(), identifier) {
        (true, true) => key.to_owned(),
        (false, true) => format!("{parent}.{key}"),
        (_, false) => format!(
            "{parent}[{}]",
            serde_json::to_string(key).unwrap_or_else(|_| format!("\"{key}\""))
        ),
    }
}
