//! The `sandbox` command (`start|serve|stop|status`); all of it is the library's `cli` module.

fn main() -> std::process::ExitCode {
    clickhouse_schema_sandbox::cli::main()
}
