//! Browser tests: the release server on the simulated cluster, driven by
//! playwright-core in Debian's headless Chromium (`end2end/`), twice: with
//! the sim backend, then with the api backend over the simulator's REST
//! face (`api.rs`).

mod api;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::run::{Failed, status, step};

pub const CHROMIUM: &str = "/usr/bin/chromium";
/// Ample for a release server to bind; it prints its URL the moment it listens.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// Kills the server however the tests (or the benchmark) end.
pub struct Server(pub Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn io(what: &str) -> impl Fn(std::io::Error) -> Failed + '_ {
    move |e| Failed(format!("{what}: {e}"))
}

pub fn run(root: &Path) -> Result<(), Failed> {
    step("browser tests (headless Chromium, release server)", || {
        let out = root.join("target/e2e");
        fresh_dir(&out.join("data"))?;
        let env = [
            ("PVE_BACKEND", "sim"),
            ("SIM_SPEED", "50"),
            ("RUST_LOG", "info"),
        ];
        let (server, url) = start_server(root, &out, &env)?;
        println!("    server at {url}, log in target/e2e/server.log");
        let mut tests = browser_tests(root, &url, &out);
        // The sign-in suite starts a server of its own, with an OpenID
        // provider: once is enough, here.
        tests
            .env("PVEDECK_BIN", root.join(SERVER))
            .env("LEPTOS_SITE_ROOT", root.join("target/site"));
        let result = status(&mut tests);
        drop(server);
        result?;
        if std::env::var_os("UPDATE_DOCS").is_some() {
            readme_pictures(root, &out.join("screenshots"))?;
        }
        Ok(())
    })?;
    step(
        "browser tests again with PVE_BACKEND=api (the simulator's REST face)",
        || api::run(root),
    )
}

/// The README's pictures are two of the browser tests' screenshots:
/// `UPDATE_DOCS=1 cargo xtask e2e` puts the fresh ones in `docs/images/`.
const README_PICTURES: [(&str, &str); 2] = [
    ("overview.png", "overview.png"),
    ("install-live.png", "install.png"),
];

fn readme_pictures(root: &Path, screenshots: &Path) -> Result<(), Failed> {
    let images = root.join("docs/images");
    std::fs::create_dir_all(&images).map_err(io("docs/images"))?;
    for (shot, picture) in README_PICTURES {
        std::fs::copy(screenshots.join(shot), images.join(picture))
            .map_err(io(&format!("docs/images/{picture}")))?;
        println!("    docs/images/{picture} from the browser tests' {shot}");
    }
    Ok(())
}

/// Empties `dir` (what a previous run left) and makes it.
fn fresh_dir(dir: &Path) -> Result<(), Failed> {
    let shown = dir.display().to_string();
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(io(&shown))?;
    }
    std::fs::create_dir_all(dir).map_err(io(&shown))
}

/// The browser suites (`end2end/tests/`) against the server at `url`,
/// screenshots in `out/screenshots`.
fn browser_tests(root: &Path, url: &str, out: &Path) -> Command {
    let mut command = Command::new("node");
    command
        .args(["--test", "--test-concurrency=1", "tests/"])
        .current_dir(root.join("end2end"))
        .env("BASE_URL", url)
        .env("CHROMIUM", CHROMIUM)
        .env("SCREENSHOT_DIR", out.join("screenshots"));
    command
}

/// A loopback port where nothing listens (the VMID probe's port).
pub fn closed_port() -> Result<u16, Failed> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .map_err(io("a loopback port"))
}

/// Environment variables a server is started with.
pub type Settings = Vec<(&'static str, String)>;

/// Starts `pvedeck-sim api` on `out/data`'s cluster with `env`; the
/// settings a `PVE_BACKEND=api` server needs to reach it (from
/// `sim/api.json`).
pub fn start_sim_api(
    root: &Path,
    out: &Path,
    env: &[(&str, &str)],
) -> Result<(Server, Settings), Failed> {
    let mut command = binary(root, SIM, out);
    command.arg("api").envs(env.iter().copied());
    let (server, _) = start(command, out, "sim-api.log", "https://")?;
    let about = out.join("data/sim/api.json");
    let shown = about.display().to_string();
    let about: serde_json::Value = std::fs::read(&about)
        .map_err(io(&shown))
        .and_then(|bytes| {
            serde_json::from_slice(&bytes).map_err(|e| Failed(format!("{shown}: {e}")))
        })?;
    let field = |key: &str| {
        about[key]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| Failed(format!("{shown} has no {key}")))
    };
    let settings = vec![
        ("PVE_BACKEND", "api".to_string()),
        ("PVE_API_URL", field("url")?),
        ("PVE_API_TOKEN", field("token")?),
        ("PVE_API_FINGERPRINT", field("fingerprint")?),
    ];
    Ok((server, settings))
}

/// Starts `target/release/pvedeck` on a free loopback port, in an empty
/// environment and working directory `out` (no developer's `.env` or
/// exported settings leak in) with `env` on top, its data in `out/data`, and
/// waits for the line that says where it listens.
pub fn start_server(
    root: &Path,
    out: &Path,
    env: &[(&str, &str)],
) -> Result<(Server, String), Failed> {
    let mut command = binary(root, SERVER, out);
    command
        .env("PORT", "0")
        .env("BIND_ADDR", "127.0.0.1")
        .env("LEPTOS_SITE_ROOT", root.join("target/site"))
        .envs(env.iter().copied());
    start(command, out, "server.log", "http://")
}

/// The server binary, as `cargo xtask` builds it.
pub const SERVER: &str = "target/release/pvedeck";
/// The simulator's faces: the [`STAND_INS`] (links of those names to it),
/// `pvedeck-sim api`, `pvedeck-sim mirror`.
pub const SIM: &str = "target/release/pvedeck-sim";
/// What the `cli` backend runs, each a link to [`SIM`] on the server's
/// `PATH` (the simulator's own list is its `cli.rs`'s `TOOLS`).
pub const STAND_INS: [&str; 5] = ["qm", "pvesh", "pvesm", "socat", "ssh"];

/// `bin` (one of [`SERVER`], [`SIM`]) in an empty environment but for
/// `PATH`, with `HOME` and working directory `out` and its data in
/// `out/data`.
pub fn binary(root: &Path, bin: &str, out: &Path) -> Command {
    let mut command = Command::new(root.join(bin));
    command
        .current_dir(out)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", out)
        .env("DATA_DIR", out.join("data"));
    command
}

/// [`start`] for another lane's processes (the guest lane's mirror).
pub fn start_logged(
    command: Command,
    out: &Path,
    log: &str,
    scheme: &'static str,
) -> Result<(Server, String), Failed> {
    start(command, out, log, scheme)
}

/// Starts `command` (a pvedeck server of some kind), its output in
/// `out/<log>`, and waits for the first word on its standard output that
/// begins with `scheme`: the URL it prints once it listens.
fn start(
    mut command: Command,
    out: &Path,
    log: &str,
    scheme: &'static str,
) -> Result<(Server, String), Failed> {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(io(&format!("{command:?}")))?;
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(Failed("server output was not captured".to_string()));
    };
    let server = Server(child);
    let log_path = out.join(log);
    let log = std::fs::File::create(&log_path).map_err(io(log))?;

    let (tx, rx) = mpsc::channel();
    let stdout_log = log.try_clone().map_err(io("log"))?;
    std::thread::spawn(move || {
        let mut log = stdout_log;
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = writeln!(log, "{line}");
            if let Some(url) = line.split_whitespace().find(|w| w.starts_with(scheme)) {
                let _ = tx.send(url.to_string());
            }
        }
    });
    std::thread::spawn(move || {
        let mut log = log;
        let mut stderr = stderr;
        let mut buf = [0u8; 8192];
        while let Ok(n) = stderr.read(&mut buf) {
            if n == 0 || log.write_all(&buf[..n]).is_err() {
                break;
            }
        }
    });
    let url = rx.recv_timeout(START_TIMEOUT).map_err(|_| {
        Failed(format!(
            "the server did not report a URL (see {})",
            log_path.display()
        ))
    })?;
    Ok((server, url))
}
