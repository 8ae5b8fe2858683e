use std::process::ExitCode;

use clap::Parser;
use pvedeck_config::Config;

/// Exit code for a configuration the server refuses to start with (and,
/// from clap, for arguments it does not know).
const BAD_CONFIG: u8 = 2;

/// Without a command the binary serves, configured by its environment, so
/// that a systemd unit, a container and a shell start it the same way. An
/// argument it does not know must not start a server by surprise. Its
/// commands are the admin's, on `DATA_DIR` (see `pvedeck::admin`).
#[derive(Parser)]
#[command(
    name = "pvedeck",
    version,
    about = "Serve pvedeck, configured by the environment and ./.env (see .env.example \
             and docs/configuration.md)",
    after_help = "The simulated cluster's command-line and REST faces are pvedeck-sim \
                  (pvedeck-sim --help); the command-line client is pvedeck-cli \
                  (pvedeck-cli --help)."
)]
struct Args {
    #[command(subcommand)]
    admin: Option<pvedeck::admin::Admin>,
}

/// An admin command on `DATABASE_URL` or `DATA_DIR` (default `./data`): what it did, or the
/// reason it refused (exit 2).
fn admin(command: pvedeck::admin::Admin) -> ExitCode {
    let data_dir = std::env::var("DATA_DIR")
        .ok()
        .filter(|d| !d.trim().is_empty())
        .unwrap_or_else(|| "./data".to_string());
    let database_url = match std::env::var("DATABASE_URL")
        .ok()
        .filter(|u| !u.trim().is_empty())
        .map(|u| pvedeck_config::DatabaseUrl::parse(u.trim()).map_err(|why| (u, why)))
        .transpose()
    {
        Ok(url) => url,
        Err((url, why)) => {
            eprintln!(
                "pvedeck: DATABASE_URL={} {why}",
                pvedeck_config::mask_password(&url)
            );
            return ExitCode::from(BAD_CONFIG);
        }
    };
    let sqlite = std::path::Path::new(&data_dir).join("pvedeck.db");
    let location = match &database_url {
        Some(url) => pvedeck::store::Location::Postgres(url.expose()),
        None => pvedeck::store::Location::Sqlite(&sqlite),
    };
    match pvedeck::admin::run(location, command) {
        Ok(printed) => {
            print!("{}", printed.out);
            eprint!("{}", printed.err);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("pvedeck: {e}");
            ExitCode::from(BAD_CONFIG)
        }
    }
}

fn main() -> ExitCode {
    let Args { admin: command } = Args::parse();
    if let Err(e) = dotenvy::dotenv()
        && !e.not_found()
    {
        eprintln!(".env cannot be read: {e}");
        return ExitCode::from(BAD_CONFIG);
    }
    if let Some(command) = command {
        return admin(command);
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
            if e.is_bad_config() {
                ExitCode::from(BAD_CONFIG)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
