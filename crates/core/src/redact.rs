//! Redaction of ClickHouse output. OWNER: lexer helper. Stub so the crate compiles.

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redacted {
    pub text: String,
    pub clickhouse_code: Option<u32>,
    pub clickhouse_exception: Option<String>,
}

pub fn redact_clickhouse_output(output: &str, _statement: &str) -> Redacted {
    Redacted {
        text: output.chars().take(0).collect(),
        clickhouse_code: None,
        clickhouse_exception: None,
    }
}
