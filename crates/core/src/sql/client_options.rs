//! The names clickhouse-client reads as its own options rather than as
//! ClickHouse settings.
//!
//! Settings are rendered as `--<name>=<value>` on clickhouse-client's command
//! line, the same syntax as the client's own options. A "setting" named
//! `host` would make the client connect elsewhere and send the pod's user and
//! password there; `query` would replace the statement; `server_logs_file`,
//! `history_file` and `client_logs_file` write files in the pod; `config_file`
//! would replace the configuration that carries the password. So validation
//! refuses every name that the client may take as an option.
//!
//! Two client behaviours widen "is an option":
//!
//! - The client's option parser accepts an unambiguous prefix of an option
//!   name (18.16 connects to 127.0.0.2 for `--hos=127.0.0.2`), so a name that
//!   is a prefix of an option is refused too, unless it is itself a setting
//!   (an exact match wins over a prefix).
//! - Current clients accept `-` and `_` interchangeably in some names, and
//!   treat `--param_<name>` as a query parameter, so names are compared with
//!   `-` folded to `_`, and `param_` names are refused.
//!
//! The list is the union of the options of clickhouse-client 18.16 (what the
//! sandbox runs) and of current releases (`ClientBase` and `Client` option
//! descriptions, including the external-table options).

/// clickhouse-client options, `-` written as `_`.
pub(crate) const CLIENT_OPTIONS: &[&str] = &[
    "accept_invalid_certificate",
    "ask_password",
    "buzz_house_config",
    "client_logs_file",
    "compression",
    "config",
    "config_file",
    "connection",
    "create_query_fuzzer_runs",
    "database",
    "disable_suggestion",
    "echo",
    "enable_progress_table_toggle",
    "fake_drop",
    "file",
    "format",
    "hardware_utilization",
    "help",
    "highlight",
    "history_file",
    "history_max_entries",
    "host",
    "hosts",
    "ignore_error",
    "interactive",
    "interleave_queries_file",
    "jwt",
    "log_level",
    "login",
    "max_client_network_bandwidth",
    "max_memory_usage_in_client",
    "memory_usage",
    "multiline",
    "multiquery",
    "name",
    "no_secure",
    "no_warnings",
    "opentelemetry_traceparent",
    "opentelemetry_tracestate",
    "output_format",
    "pager",
    "password",
    "port",
    "print_profile_events",
    "processed_rows",
    "profile_events_delay_ms",
    "progress",
    "progress_table",
    "proto_caps",
    "queries_file",
    "query",
    "query_fuzzer_runs",
    "query_id",
    "query_kind",
    "quota_key",
    "secure",
    "server_logs_file",
    "ssh_key_file",
    "ssh_key_passphrase",
    "stacktrace",
    "stage",
    "structure",
    "suggestion_limit",
    "testmode",
    "time",
    "tls_sni_override",
    "types",
    "user",
    "verbose",
    "version",
    "version_clean",
    "vertical",
    "wait_for_suggestions_to_load",
];

/// ClickHouse settings that are a proper prefix of a client option; the
/// parser matches them exactly, so they stay usable.
const SETTINGS_PREFIXING_AN_OPTION: &[&str] = &["max_memory_usage"];

/// Why `name` cannot be a setting, or `None` when it can.
pub(crate) fn conflict(name: &str) -> Option<String> {
    let folded = name.replace('-', "_");
    if folded.starts_with("param_") {
        return Some(format!(
            "is not a ClickHouse setting: clickhouse-client reads --{name} as a query parameter"
        ));
    }
    if CLIENT_OPTIONS.contains(&folded.as_str()) {
        return Some(format!(
            "is a clickhouse-client option, not a ClickHouse setting: --{name} would change how the client \
             connects or what it runs, so it cannot be set here (the connection comes from client.user, \
             client.database, client.port and client.passwordEnv)"
        ));
    }
    if SETTINGS_PREFIXING_AN_OPTION.contains(&folded.as_str()) {
        return None;
    }
    let options: Vec<&str> = CLIENT_OPTIONS
        .iter()
        .copied()
        .filter(|option| option.starts_with(folded.as_str()))
        .collect();
    if options.is_empty() {
        return None;
    }
    Some(format!(
        "is not a ClickHouse setting, and clickhouse-client would read --{name} as an abbreviation of its \
         own option{} --{}, so it cannot be set here",
        if options.len() == 1 { "" } else { "s" },
        options.join(", --")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_and_their_abbreviations_are_refused() {
        for name in [
            "host",
            "hos",
            "query",
            "quer",
            "server_logs_file",
            "history_file",
            "format",
            "query_id",
            "config_file",
            "user",
            "password",
            "pass",
            "param_x",
        ] {
            assert!(conflict(name).is_some(), "{name} must be refused");
        }
    }

    #[test]
    fn ordinary_settings_pass() {
        for name in [
            "distributed_ddl_task_timeout",
            "max_threads",
            "max_execution_time",
            "max_memory_usage",
            "insert_quorum",
            "allow_experimental_object_type",
            "connect_timeout",
            "interactive_delay",
            "format_csv_delimiter",
            "log_queries",
        ] {
            assert_eq!(conflict(name), None, "{name} is a setting");
        }
    }

    #[test]
    fn the_list_is_sorted_and_folded() {
        let mut sorted = CLIENT_OPTIONS.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted, CLIENT_OPTIONS);
        assert!(CLIENT_OPTIONS.iter().all(|o| !o.contains('-')));
    }
}
