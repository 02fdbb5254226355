fn main() -> std::process::ExitCode {
    eddy::daemon::main()
}
