//! Server-side printing (`meta.k8s.io/v1` Table): what kubectl asks for with
//! `Accept: application/json;as=Table;...` and prints as columns. One renderer for every resource, so
//! pods and leases cannot drift apart in shape.

use serde_json::{Value, json};

/// A column: its name, its OpenAPI format (`name` for the NAME column, else empty) and description.
pub(crate) struct Column {
    pub(crate) name: &'static str,
    pub(crate) format: &'static str,
    pub(crate) description: &'static str,
}

/// One row: the cells under `columns`, and the object as `includeObject` asks (`None`, `Object`, or
/// by default only its metadata).
pub(crate) fn row(cells: Value, object: &Value, include_object: &str) -> Value {
    let object = match include_object {
        "None" => Value::Null,
        "Object" => object.clone(),
        _ => json!({
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": object["metadata"].clone(),
        }),
    };
    json!({"cells": cells, "object": object})
}

/// The Table of `rows` under `columns` (every cell printed as a string column, as kubectl shows it).
pub(crate) fn render(columns: &[Column], rows: Vec<Value>, resource_version: u64) -> Value {
    let columns: Vec<Value> = columns
        .iter()
        .map(|c| {
            json!({"name": c.name, "type": "string", "format": c.format, "description": c.description, "priority": 0})
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version.to_string()},
        "columnDefinitions": columns,
        "rows": rows,
    })
}

/// The NAME and AGE columns every resource has.
pub(crate) const NAME: Column = Column {
    name: "Name",
    format: "name",
    description: "Name must be unique within a namespace.",
};
pub(crate) const AGE: Column = Column {
    name: "Age",
    format: "",
    description: "CreationTimestamp is a timestamp representing the server time when this object was created.",
};
