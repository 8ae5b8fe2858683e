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

mod bench;
mod console_page;
mod deb;
mod e2e;
mod guest;
mod http;
mod run;
mod setup;
mod site;
mod soak;
mod tidy;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use run::{Failed, cargo};

const USAGE: &str = "usage: cargo xtask <serve|test|site|e2e|bench|soak|deb|docs|tidy|guest>
  serve  set up, build (release) and run the server on the simulated cluster
  test   set up and run every check and test (what CI runs)
  site   build only the browser bundle into target/site
  e2e    build the site and the server, run only the browser tests
  bench  build everything, measure speed and memory, print the figures
         (or only those named: list-sim list-cli list-api install
         concurrent followers large bundle)
  soak   build the server, load it for 30 min (--minutes N): errors, RSS
  deb    build the site and the server, write and check the Debian package
         (target/debian/pvedeck_<version>_<arch>.deb)
  docs   write docs/configuration.md and docs/openapi.json from the code
  tidy   check the repository's shape: links into docs/, README's size,
         no import cycle between modules
  guest  build a Debian 12 guest image once, run the pipeline against real
         QEMU guests (import install, template, two clones, destroy), with
         each stage's time (minutes: not part of `test`)";

pub(crate) fn root() -> PathBuf {
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
        Some("e2e") => e2e_only(&root),
        Some("bench") => setup::build_tools(&root)
            .and_then(|()| site::build(&root))
            .and_then(|()| build_server(&root))
            .and_then(|()| bench::run(&root, &args[1..])),
        Some("soak") => build_server(&root).and_then(|()| soak::run(&root, &args[1..])),
        Some("deb") => setup::build_tools(&root)
            .and_then(|()| site::build(&root))
            .and_then(|()| build_server(&root))
            .and_then(|()| deb::build(&root))
            .and_then(|deb| deb::check(&root, &deb)),
        Some("docs") => docs(&root),
        Some("tidy") => run::step("repository checks", || tidy::run(&root)),
        Some("guest") => guest::lane::run(&root, build_server),
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

/// Every native package: the server and the app it embeds, the crates it
/// is made of, the simulator (whose `pvedeck-sim` the tests and the
/// browser lanes run) and the client — the workspace but for the browser's
/// entry point (`app` would get `hydrate` beside `ssr`) and this driver, so
/// that a crate added to the workspace is built and tested without a word
/// here. Always built together and with the same options, so that the
/// tests, the browser tests and `serve` share one build (a different
/// package set would unify dependency features differently and build
/// everything again). The xtask is checked on its own for the same reason:
/// its dependencies must not change the server's.
const SERVER: [&str; 5] = ["--workspace", "--exclude", "frontend", "--exclude", "xtask"];

fn build_server(root: &Path) -> Result<(), Failed> {
    run::step("build the server (release)", || {
        let mut args = vec!["build", "--release"];
        args.extend(SERVER);
        cargo(root, &args)
    })
}

/// The documents made from the code: the configuration reference (from
/// `pvedeck_config::reference`) and the OpenAPI document (from the
/// server's `api::openapi`). Their tests compare and, with `UPDATE_DOCS`,
/// write; run with the test command's build, so nothing is built twice.
fn docs(root: &Path) -> Result<(), Failed> {
    run::step("write docs/configuration.md and docs/openapi.json", || {
        let mut args = vec!["test", "--release", "--lib"];
        args.extend(SERVER);
        args.push("generated_docs_are_current");
        run::cargo_env(root, &args, &[("UPDATE_DOCS", "1")])
    })
}

fn serve(root: &Path) -> Result<(), Failed> {
    setup::build_tools(root)?;
    site::build(root)?;
    build_server(root)?;
    println!("\nxtask: starting the server; stop it with Ctrl-C");
    // The server prints its URL ("pvedeck listening on http://…") once it listens.
    run::exec(root, &root.join(e2e::SERVER))
}

/// The browser tests alone, on a fresh build: for working on the UI.
fn e2e_only(root: &Path) -> Result<(), Failed> {
    setup::build_tools(root)?;
    setup::test_tools(root)?;
    site::build(root)?;
    build_server(root)?;
    e2e::run(root)
}

fn test(root: &Path) -> Result<(), Failed> {
    let started = Instant::now();
    setup::build_tools(root)?;
    setup::test_tools(root)?;
    run::step("repository checks (cargo xtask tidy)", || tidy::run(root))?;
    run::step("format check", || {
        cargo(root, &["fmt", "--all", "--", "--check"])
    })?;
    // `--release` everywhere: build scripts and proc macros are then shared
    // between clippy, the tests and the server the browser tests run.
    let clippy = |packages: &[&str], what: &str| {
        run::step(&format!("clippy ({what})"), || {
            let mut args = vec!["clippy", "--release", "--all-targets"];
            args.extend(packages);
            args.extend(["--", "-D", "warnings"]);
            cargo(root, &args)
        })
    };
    clippy(&SERVER, "server, its crates, app with ssr")?;
    clippy(&["--package", "xtask"], "xtask")?;
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
    let tests = |packages: &[&str], what: &str| {
        run::step(
            &format!("unit and integration tests ({what}, release)"),
            || {
                let mut args = vec!["test", "--release"];
                args.extend(packages);
                // `test_tools` installed PostgreSQL: a store test that
                // cannot start it fails here rather than skipping.
                run::cargo_env(root, &args, &[("PVEDECK_REQUIRE_POSTGRES", "1")])
            },
        )
    };
    tests(&SERVER, "server, its crates, app")?;
    // The engine's suites once more, now through the cli backend: a pvedeck
    // process running the simulator's qm/pvesh/pvesm/ssh stand-ins
    // (`pvedeck-sim`).
    // And through the api backend: a pvedeck process talking HTTPS to the
    // simulator's REST face (`pvedeck-sim api`), no qm/pvesh/pvesm at all.
    for backend in ["cli", "api"] {
        run::step(
            &format!("integration tests again with PVE_BACKEND={backend} (release)"),
            || {
                let mut args = vec!["test", "--release"];
                args.extend(SERVER);
                run::cargo_env(
                    root,
                    &args,
                    &[
                        ("PVEDECK_TEST_BACKEND", backend),
                        ("PVEDECK_REQUIRE_POSTGRES", "1"),
                    ],
                )
            },
        )?;
    }
    tests(&["--package", "xtask"], "xtask")?;
    site::build(root)?;
    build_server(root)?;
    let package = deb::build(root)?;
    deb::check(root, &package)?;
    e2e::run(root)?;
    println!(
        "\nxtask: all checks and tests passed in {:.0?}",
        started.elapsed()
    );
    Ok(())
}
