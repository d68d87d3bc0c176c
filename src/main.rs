fn main() -> std::process::ExitCode {
    etl::cli::main()
}
