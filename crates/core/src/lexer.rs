//! ClickHouse-aware lexer. OWNER: lexer helper. Stub so the crate compiles.
