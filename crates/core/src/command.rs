//! The one place that renders the exec command.
//!
//! A statement is run as
//!
//! ```text
//! sh -c 'head -c <N> | exec clickhouse-client --password "${<passwordEnv>:-}" --user ... --database ... --port ... --<setting>=...'
//! ```
//!
//! with the statement's `N` UTF-8 bytes on stdin. Why each part:
//!
//! - The statement is on stdin, never in argv: argv is readable from `/proc`
//!   inside the pod and is written to exec audit logs.
//! - The password is expanded by the pod's own shell from the container's
//!   environment, so it never exists outside the pod. `:-` turns an unset
//!   variable into the empty password of a stock `default` user instead of an
//!   error.
//! - `head -c N` ends clickhouse-client's input after exactly the statement,
//!   whether or not the exec protocol can signal end-of-stdin: the v4 channel
//!   protocol has no such signal, and closing the socket there loses the exit
//!   status. With the byte count in the command, v4 and v5 behave alike.
//! - `exec` makes clickhouse-client's exit status the exec's exit status.
//! - Every value interpolated into the script is single-quoted for `sh`, so a
//!   user name, database or setting value cannot change the command.

use std::collections::BTreeMap;

use crate::config::{ClientConfig, SettingValue};

/// argv for running a statement of `statement_bytes` UTF-8 bytes.
pub fn render(
    client: &ClientConfig,
    settings: &BTreeMap<String, SettingValue>,
    statement_bytes: usize,
) -> Vec<String> {
    let mut script = format!(
        "head -c {statement_bytes} | exec clickhouse-client --password \"${{{}:-}}\" --user {} --database {} --port {}",
        // Validation restricts the name to [A-Za-z_][A-Za-z0-9_]*, so it is safe unquoted inside ${...}.
        client.password_env,
        shell_quote(&client.user),
        shell_quote(&client.database),
        client.port,
    );
    for (name, value) in settings {
        // Names are [a-z_][a-z0-9_]* by validation; the value is quoted.
        script.push_str(&format!(" --{name}={}", shell_quote(&value.render())));
    }
    vec!["sh".to_owned(), "-c".to_owned(), script]
}

/// Quotes `value` as one POSIX `sh` word: single quotes, with each embedded
/// single quote written as `'\''`.
pub fn shell_quote(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('\'');
    for ch in value.chars() {
        if ch == '\'' {
            out.push_str("'\\''");
        } else {
            out.push(ch);
        }
    }
    out.push('\'');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Number;

    fn client() -> ClientConfig {
        ClientConfig {
            user: "default".into(),
            database: "default".into(),
            password_env: "CLICKHOUSE_PASSWORD".into(),
            port: 9000,
        }
    }

    #[test]
    fn renders_the_documented_command() {
        let mut settings = BTreeMap::new();
        settings.insert(
            "distributed_ddl_task_timeout".to_owned(),
            SettingValue::Number(Number::from(300)),
        );
        settings.insert("a_mode".to_owned(), SettingValue::String("x y".into()));
        let argv = render(&client(), &settings, 42);
        assert_eq!(argv[0], "sh");
        assert_eq!(argv[1], "-c");
        assert_eq!(
            argv[2],
            "head -c 42 | exec clickhouse-client --password \"${CLICKHOUSE_PASSWORD:-}\" --user 'default' \
             --database 'default' --port 9000 --a_mode='x y' --distributed_ddl_task_timeout='300'"
        );
    }

    #[test]
    fn hostile_values_stay_single_words() {
        let mut c = client();
        c.user = "o'brien; rm -rf /".into();
        c.database = "$(reboot)`x`".into();
        let argv = render(&c, &BTreeMap::new(), 1);
        assert!(argv[2].contains("--user 'o'\\''brien; rm -rf /'"));
        assert!(argv[2].contains("--database '$(reboot)`x`'"));
    }

    #[test]
    fn shell_quote_round_trips_through_sh() {
        // The quoting is only right if a real shell reads back the original word.
        for value in [
            "plain",
            "",
            "it's",
            "a'b'c",
            "$HOME",
            "back\\slash",
            "new\nline",
            "''",
        ] {
            let out = std::process::Command::new("sh")
                .arg("-c")
                .arg(format!("printf %s {}", shell_quote(value)))
                .output()
                .expect("sh runs");
            assert_eq!(String::from_utf8_lossy(&out.stdout), value);
        }
    }
}
