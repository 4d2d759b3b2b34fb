fn main() -> std::process::ExitCode {
    sandbox::cli::main()
}
