//! The project's own build and test driver, behind the README's two commands:
//!
//! * `cargo xtask serve` — install what the build needs, build the site (WASM +
//!   CSS + static files) and the server in release mode, run it on the
//!   simulated cluster;
//! * `cargo xtask test` — install what the tests need, then format check,
//!   clippy, unit and integration tests per package, the WASM build and the
//!   browser tests against the release server.
//!
//! Every install step checks first, so a second run installs nothing.

mod e2e;
mod run;
mod setup;
mod site;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use run::{Failed, cargo};

const USAGE: &str = "usage: cargo xtask <serve|test|site>
  serve  set up, build (release) and run the server on the simulated cluster
  test   set up and run every check and test (what CI runs)
  site   build only the browser bundle into target/site";

fn root() -> PathBuf {
    // xtask/ lives directly under the workspace root.
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = root();
    let started = Instant::now();
    let result = match args.first().map(String::as_str) {
        Some("serve") => serve(&root),
        Some("test") => test(&root),
        Some("site") => setup::build_tools(&root).and_then(|()| site::build(&root)),
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failed(why)) => {
            eprintln!("\nxtask: FAILED after {:.0?}: {why}", started.elapsed());
            ExitCode::FAILURE
        }
    }
}

fn serve(root: &Path) -> Result<(), Failed> {
    setup::build_tools(root)?;
    site::build(root)?;
    run::step("build the server (release)", || {
        cargo(root, &["build", "--release", "--package", "pvedeck"])
    })?;
    println!("\nxtask: starting the server; stop it with Ctrl-C");
    // The server prints its URL ("pvedeck listening on http://…") once it listens.
    run::exec(root, &root.join("target/release/pvedeck"))
}

fn test(root: &Path) -> Result<(), Failed> {
    let started = Instant::now();
    setup::build_tools(root)?;
    setup::test_tools(root)?;
    run::step("format check", || {
        cargo(root, &["fmt", "--all", "--", "--check"])
    })?;
    // Host packages in one invocation so that they share one dependency build;
    // `--release` so that build scripts and proc macros are shared with the
    // release test build below.
    let host = [
        "--package",
        "pvedeck",
        "--package",
        "app",
        "--package",
        "xtask",
    ];
    run::step("clippy (server, app with ssr, xtask)", || {
        let mut args = vec!["clippy", "--release", "--all-targets"];
        args.extend(host);
        args.extend(["--", "-D", "warnings"]);
        cargo(root, &args)
    })?;
    run::step("clippy (browser: frontend, app with hydrate)", || {
        cargo(
            root,
            &[
                "clippy",
                "--profile",
                site::WASM_PROFILE,
                "--target",
                site::WASM_TARGET,
                "--package",
                "frontend",
                "--package",
                "app",
                "--",
                "-D",
                "warnings",
            ],
        )
    })?;
    run::step("unit and integration tests (release)", || {
        let mut args = vec!["test", "--release"];
        args.extend(host);
        cargo(root, &args)
    })?;
    site::build(root)?;
    run::step("build the server (release)", || {
        cargo(root, &["build", "--release", "--package", "pvedeck"])
    })?;
    e2e::run(root)?;
    println!(
        "\nxtask: all checks and tests passed in {:.0?}",
        started.elapsed()
    );
    Ok(())
}
