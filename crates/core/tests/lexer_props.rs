//! Whatever the input, lexing terminates without panicking and its tokens tile
//! the input exactly: contiguous, non-empty, on char boundaries.

use clickhouse_schema_core::sql::lexer::{Token, tokenize};
use proptest::prelude::*;

fn assert_tiles(src: &str, tokens: &[Token]) {
    let mut at = 0;
    for token in tokens {
        assert_eq!(token.start, at, "gap or overlap before {token:?} in {src:?}");
        assert!(token.end > token.start, "empty token {token:?} in {src:?}");
        assert!(src.is_char_boundary(token.start) && src.is_char_boundary(token.end));
        if token.unterminated {
            assert_eq!(
                token.end,
                src.len(),
                "unterminated token must run to the end: {token:?}"
            );
        }
        at = token.end;
    }
    assert_eq!(at, src.len(), "tokens stop short of the end of {src:?}");
}

/// Inputs dense in the characters that switch lexer states.
fn sql_like() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("'".to_string()),
        Just("\"".to_string()),
        Just("`".to_string()),
        Just("\\".to_string()),
        Just("$".to_string()),
        Just("$t$".to_string()),
        Just("/*".to_string()),
        Just("*/".to_string()),
        Just("--".to_string()),
        Just("# ".to_string()),
        Just("//".to_string()),
        Just("\n".to_string()),
        Just("0x".to_string()),
        Just(".".to_string()),
        Just("1e".to_string()),
        Just("ON CLUSTER".to_string()),
        "[a-z0-9_ ]{0,4}",
        any::<char>().prop_map(String::from),
    ];
    prop::collection::vec(piece, 0..40).prop_map(|parts| parts.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn any_string_lexes_into_tiles(src in any::<String>()) {
        assert_tiles(&src, &tokenize(&src));
    }

    #[test]
    fn arbitrary_bytes_lex_into_tiles(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let src = String::from_utf8_lossy(&bytes);
        assert_tiles(&src, &tokenize(&src));
    }

    #[test]
    fn sql_like_input_lexes_into_tiles(src in sql_like()) {
        let tokens = tokenize(&src);
        assert_tiles(&src, &tokens);
        for token in &tokens {
            // Bodies and values must be computable for every token.
            let _ = token.body(&src);
            let _ = token.value(&src);
        }
    }
}
