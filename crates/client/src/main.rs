//! `pvedeck-cli`: see the `pvedeck_client` library.

fn main() -> std::process::ExitCode {
    pvedeck_client::main()
}
