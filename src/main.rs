use std::process::ExitCode;

use pvedeck::config::Config;

/// Exit code for a configuration the server refuses to start with.
const BAD_CONFIG: u8 = 2;

const USAGE: &str = "\
usage: pvedeck            serve, configured by the environment and ./.env (see .env.example)
       pvedeck sim …      the simulated cluster's command-line face
       pvedeck --version
the command-line client is pvedeck-cli (pvedeck-cli --help)";

fn main() -> ExitCode {
    // Called as `qm`, `pvesh`, `pvesm`, `ssh` or `pvedeck sim …`: the
    // simulated cluster's command-line face, not the server.
    let args: Vec<String> = std::env::args().collect();
    if let Some(code) = pvedeck::sim::cli::dispatch(&args) {
        return ExitCode::from(u8::try_from(code).unwrap_or(255));
    }
    // The server is configured by its environment, not by arguments: one
    // it does not know must not start a server by surprise.
    match args.get(1).map(String::as_str) {
        None => {}
        Some("--version" | "-V") => {
            println!("pvedeck {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        Some("--help" | "-h") => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Some(other) => {
            eprintln!("pvedeck: unknown argument '{other}'\n\n{USAGE}");
            return ExitCode::from(BAD_CONFIG);
        }
    }
    if let Err(e) = dotenvy::dotenv()
        && !e.not_found()
    {
        eprintln!(".env cannot be read: {e}");
        return ExitCode::from(BAD_CONFIG);
    }
    let config = match Config::from_env() {
        Ok(config) => config,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(BAD_CONFIG);
        }
    };
    if let Err(e) = pvedeck::server::init_tracing(&config.log_filter) {
        eprintln!(
            "RUST_LOG={} is not a tracing filter: {e}",
            config.log_filter
        );
        return ExitCode::from(BAD_CONFIG);
    }

    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(pvedeck::server::serve(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
