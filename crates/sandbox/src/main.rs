fn main() -> std::process::ExitCode {
    clickhouse_schema_sandbox::cli::main()
}
