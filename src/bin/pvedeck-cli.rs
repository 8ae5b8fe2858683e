//! The command-line client: see `pvedeck::client`.

fn main() -> std::process::ExitCode {
    pvedeck::client::main()
}
