//! Label and field selectors with the grammar and validation of k8s.io/apimachinery
//! (`labels.Parse`, `fields.ParseSelector`), so a selector the product sends is accepted or
//! rejected here as a real apiserver would.

use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Op {
    Equals,
    NotEquals,
    In,
    NotIn,
    Exists,
    DoesNotExist,
    GreaterThan,
    LessThan,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Requirement {
    pub(crate) key: String,
    pub(crate) op: Op,
    pub(crate) values: Vec<String>,
}

/// Requirements are ANDed; an empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LabelSelector {
    pub(crate) requirements: Vec<Requirement>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct SelectorError(pub(crate) String);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Ident(String),
    Not,
    Eq,
    DoubleEq,
    NotEq,
    Gt,
    Lt,
    In,
    NotIn,
    Open,
    Close,
    Comma,
}

fn is_special(c: char) -> bool {
    matches!(c, '=' | '!' | '(' | ')' | ',' | '>' | '<')
}

fn lex(input: &str) -> Vec<Token> {
    let chars: Vec<char> = input.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if is_special(c) {
            let next = chars.get(i + 1).copied();
            let (tok, len) = match (c, next) {
                ('=', Some('=')) => (Token::DoubleEq, 2),
                ('!', Some('=')) => (Token::NotEq, 2),
                ('=', _) => (Token::Eq, 1),
                ('!', _) => (Token::Not, 1),
                ('(', _) => (Token::Open, 1),
                (')', _) => (Token::Close, 1),
                (',', _) => (Token::Comma, 1),
                ('>', _) => (Token::Gt, 1),
                _ => (Token::Lt, 1),
            };
            out.push(tok);
            i += len;
        } else {
            let start = i;
            while i < chars.len() && !chars[i].is_whitespace() && !is_special(chars[i]) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            out.push(match word.as_str() {
                "in" => Token::In,
                "notin" => Token::NotIn,
                _ => Token::Ident(word),
            });
        }
    }
    out
}

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }
    fn next(&mut self) -> Option<Token> {
        let t = self.tokens.get(self.pos).cloned();
        self.pos += 1;
        t
    }

    fn requirement(&mut self) -> Result<Requirement, SelectorError> {
        let negated = if self.peek() == Some(&Token::Not) {
            self.pos += 1;
            true
        } else {
            false
        };
        let key = match self.next() {
            Some(Token::Ident(k)) => k,
            other => {
                return Err(SelectorError(format!(
                    "found '{}', expected: identifier",
                    show(&other)
                )));
            }
        };
        validate_key(&key)?;
        if negated {
            return match self.peek() {
                None | Some(Token::Comma) => Ok(Requirement {
                    key,
                    op: Op::DoesNotExist,
                    values: vec![],
                }),
                other => Err(SelectorError(format!(
                    "found '{}', expected: ',' or 'end of string'",
                    show(&other.cloned())
                ))),
            };
        }
        let op = match self.peek() {
            None | Some(Token::Comma) => {
                return Ok(Requirement {
                    key,
                    op: Op::Exists,
                    values: vec![],
                });
            }
            Some(Token::Eq) | Some(Token::DoubleEq) => Op::Equals,
            Some(Token::NotEq) => Op::NotEquals,
            Some(Token::In) => Op::In,
            Some(Token::NotIn) => Op::NotIn,
            Some(Token::Gt) => Op::GreaterThan,
            Some(Token::Lt) => Op::LessThan,
            other => {
                return Err(SelectorError(format!(
                    "found '{}', expected: in, notin, =, ==, !=, gt, lt",
                    show(&other.cloned())
                )));
            }
        };
        self.pos += 1;
        let values = match op {
            Op::In | Op::NotIn => self.value_set()?,
            _ => vec![self.single_value()?],
        };
        match op {
            Op::In | Op::NotIn if values.is_empty() => {
                return Err(SelectorError(
                    "for 'in', 'notin' operators, values set can't be empty".to_string(),
                ));
            }
            Op::GreaterThan | Op::LessThan if values[0].parse::<i64>().is_err() => {
                return Err(SelectorError(format!(
                    "for 'Gt', 'Lt' operators, the value must be an integer: {}",
                    values[0]
                )));
            }
            _ => {}
        }
        for v in &values {
            validate_value(v)?;
        }
        Ok(Requirement { key, op, values })
    }

    fn single_value(&mut self) -> Result<String, SelectorError> {
        match self.peek() {
            Some(Token::Ident(_)) => match self.next() {
                Some(Token::Ident(v)) => Ok(v),
                _ => unreachable!(),
            },
            // `key=` means the empty value, as in Kubernetes.
            None | Some(Token::Comma) => Ok(String::new()),
            other => Err(SelectorError(format!(
                "found '{}', expected: identifier",
                show(&other.cloned())
            ))),
        }
    }

    fn value_set(&mut self) -> Result<Vec<String>, SelectorError> {
        match self.next() {
            Some(Token::Open) => {}
            other => return Err(SelectorError(format!("found '{}', expected: '('", show(&other)))),
        }
        let mut values = Vec::new();
        let mut expect_value = true;
        loop {
            match self.next() {
                Some(Token::Close) => {
                    if expect_value && !values.is_empty() {
                        values.push(String::new());
                    }
                    return Ok(values);
                }
                Some(Token::Ident(v)) if expect_value => {
                    values.push(v);
                    expect_value = false;
                }
                Some(Token::Comma) => {
                    if expect_value {
                        values.push(String::new());
                    }
                    expect_value = true;
                }
                other => {
                    return Err(SelectorError(format!(
                        "found '{}', expected: ',', ')' or identifier",
                        show(&other)
                    )));
                }
            }
        }
    }
}

fn show(t: &Option<Token>) -> String {
    match t {
        None => "".to_string(),
        Some(Token::Ident(s)) => s.clone(),
        Some(Token::Not) => "!".into(),
        Some(Token::Eq) => "=".into(),
        Some(Token::DoubleEq) => "==".into(),
        Some(Token::NotEq) => "!=".into(),
        Some(Token::Gt) => ">".into(),
        Some(Token::Lt) => "<".into(),
        Some(Token::In) => "in".into(),
        Some(Token::NotIn) => "notin".into(),
        Some(Token::Open) => "(".into(),
        Some(Token::Close) => ")".into(),
        Some(Token::Comma) => ",".into(),
    }
}

fn is_label_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

pub(crate) fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|part| {
            let b = part.as_bytes();
            !b.is_empty()
                && b.len() <= 63
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        })
}

fn validate_key(key: &str) -> Result<(), SelectorError> {
    let ok = match key.split_once('/') {
        Some((prefix, name)) => is_dns_subdomain(prefix) && is_label_name(name),
        None => is_label_name(key),
    };
    if ok {
        Ok(())
    } else {
        Err(SelectorError(format!(
            "key: Invalid value: \"{key}\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
        )))
    }
}

fn validate_value(v: &str) -> Result<(), SelectorError> {
    if v.is_empty() || is_label_name(v) {
        Ok(())
    } else {
        Err(SelectorError(format!(
            "values[0][{v}]: Invalid value: \"{v}\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
        )))
    }
}

impl LabelSelector {
    pub(crate) fn parse(input: &str) -> Result<Self, SelectorError> {
        let mut p = Parser {
            tokens: lex(input),
            pos: 0,
        };
        let mut requirements = Vec::new();
        if p.tokens.is_empty() {
            return Ok(Self::default());
        }
        loop {
            requirements.push(p.requirement()?);
            match p.next() {
                None => break,
                Some(Token::Comma) => {
                    if p.peek().is_none() {
                        return Err(SelectorError(
                            "found '', expected: identifier after ','".to_string(),
                        ));
                    }
                }
                other => {
                    return Err(SelectorError(format!(
                        "found '{}', expected: ',' or 'end of string'",
                        show(&other)
                    )));
                }
            }
        }
        Ok(Self { requirements })
    }

    pub(crate) fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| {
            let v = labels.get(&r.key);
            match r.op {
                Op::Equals | Op::In => v.is_some_and(|v| r.values.contains(v)),
                Op::NotEquals | Op::NotIn => v.is_none_or(|v| !r.values.contains(v)),
                Op::Exists => v.is_some(),
                Op::DoesNotExist => v.is_none(),
                Op::GreaterThan | Op::LessThan => {
                    let (Some(have), Ok(want)) =
                        (v.and_then(|v| v.parse::<i64>().ok()), r.values[0].parse::<i64>())
                    else {
                        return false;
                    };
                    if r.op == Op::GreaterThan {
                        have > want
                    } else {
                        have < want
                    }
                }
            }
        })
    }
}

/// A field selector term: `field=value`, `field==value` or `field!=value`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FieldTerm {
    pub(crate) field: String,
    pub(crate) value: String,
    pub(crate) negated: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FieldSelector {
    pub(crate) terms: Vec<FieldTerm>,
}

/// Fields a pod list can be filtered by on this server (a subset of the apiserver's).
pub(crate) const POD_FIELDS: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "status.phase",
    "status.podIP",
    "spec.nodeName",
];

/// Fields a lease list can be filtered by: the apiserver's for every object without its own.
pub(crate) const METADATA_FIELDS: &[&str] = &["metadata.name", "metadata.namespace"];

impl FieldSelector {
    /// A selector over pod fields.
    pub(crate) fn parse(input: &str) -> Result<Self, SelectorError> {
        Self::parse_for(input, POD_FIELDS)
    }

    /// A selector over the fields `supported` names; any other is refused as the apiserver does.
    pub(crate) fn parse_for(input: &str, supported: &[&str]) -> Result<Self, SelectorError> {
        let mut terms = Vec::new();
        for part in split_unescaped(input, ',') {
            if part.is_empty() {
                continue;
            }
            let (field, value, negated) = if let Some((f, v)) = part.split_once("!=") {
                (f, v, true)
            } else if let Some((f, v)) = part.split_once("==") {
                (f, v, false)
            } else if let Some((f, v)) = part.split_once('=') {
                (f, v, false)
            } else {
                return Err(SelectorError(format!(
                    "invalid selector: '{input}'; can't understand '{part}'"
                )));
            };
            let field = field.trim().to_string();
            if !supported.contains(&field.as_str()) {
                return Err(SelectorError(format!("field label not supported: {field}")));
            }
            terms.push(FieldTerm {
                field,
                value: unescape(value),
                negated,
            });
        }
        Ok(Self { terms })
    }

    pub(crate) fn matches(&self, lookup: impl Fn(&str) -> String) -> bool {
        self.terms
            .iter()
            .all(|t| (lookup(&t.field) == t.value) != t.negated)
    }
}

fn split_unescaped(s: &str, sep: char) -> Vec<String> {
    let mut parts = vec![String::new()];
    let mut escaped = false;
    for c in s.chars() {
        if escaped {
            parts.last_mut().unwrap().push('\\');
            parts.last_mut().unwrap().push(c);
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == sep {
            parts.push(String::new());
        } else {
            parts.last_mut().unwrap().push(c);
        }
    }
    parts
}

fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut escaped = false;
    for c in s.chars() {
        if escaped || c != '\\' {
            out.push(c);
            escaped = false;
        } else {
            escaped = true;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn parses_all_operators() {
        let s = LabelSelector::parse("a=1, b==2,c!=3,d in (x, y),e notin (z),f,!g").unwrap();
        let ops: Vec<_> = s.requirements.iter().map(|r| r.op.clone()).collect();
        assert_eq!(
            ops,
            vec![
                Op::Equals,
                Op::Equals,
                Op::NotEquals,
                Op::In,
                Op::NotIn,
                Op::Exists,
                Op::DoesNotExist
            ]
        );
        assert_eq!(s.requirements[3].values, vec!["x", "y"]);
    }

    #[test]
    fn matches_like_kubernetes() {
        let l = labels(&[("app", "ch"), ("replica", "1")]);
        let m = |s: &str| LabelSelector::parse(s).unwrap().matches(&l);
        assert!(m(""));
        assert!(m("app=ch"));
        assert!(m("app==ch,replica"));
        assert!(!m("app!=ch"));
        assert!(m("missing!=x"));
        assert!(m("replica in (0,1)"));
        assert!(!m("replica notin (1)"));
        assert!(m("missing notin (1)"));
        assert!(!m("missing in (1)"));
        assert!(m("!missing"));
        assert!(!m("!app"));
        assert!(m("replica>0"));
        assert!(!m("replica<1"));
        assert!(m("clickhouse.altinity.com/x!=y"));
    }

    #[test]
    fn rejects_invalid() {
        for bad in [
            "a in ()", "a in (b", "=a", "a=b c", "a,", "a b", "a>x", "-a=b", "a=-b", "!a=b", "a in b",
        ] {
            assert!(LabelSelector::parse(bad).is_err(), "{bad} should be invalid");
        }
    }

    #[test]
    fn empty_value_is_allowed() {
        let s = LabelSelector::parse("a=").unwrap();
        assert!(s.matches(&labels(&[("a", "")])));
    }

    #[test]
    fn field_selector() {
        let f = FieldSelector::parse("metadata.name=x,status.phase!=Pending").unwrap();
        assert!(f.matches(|k| if k == "metadata.name" {
            "x".into()
        } else {
            "Running".into()
        }));
        assert!(FieldSelector::parse("spec.unknown=1").is_err());
    }
}
