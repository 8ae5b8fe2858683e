//! Installs what the build and the tests need, only when it is missing.

use std::path::Path;
use std::process::Command;

use crate::run::{Failed, output, status, step};
use crate::site::WASM_TARGET;

/// What `serve` needs: the WASM target, rustfmt/clippy come with `test`, and
/// the npm packages of `frontend/` (binaryen's `wasm-opt`).
pub fn build_tools(root: &Path) -> Result<(), Failed> {
    let installed =
        output(Command::new("rustup").args(["target", "list", "--installed"])).unwrap_or_default();
    if !installed.lines().any(|t| t.trim() == WASM_TARGET) {
        step("install the Rust target wasm32-unknown-unknown", || {
            status(Command::new("rustup").args(["target", "add", WASM_TARGET]))
        })?;
    }
    ensure_node()?;
    npm_ci(root, "frontend")
}

/// What `test` needs on top: rustfmt and clippy, Chromium, playwright-core.
pub fn test_tools(root: &Path) -> Result<(), Failed> {
    let has = |args: &[&str]| output(Command::new("cargo").args(args)).is_some();
    if !has(&["fmt", "--version"]) || !has(&["clippy", "--version"]) {
        step("install rustfmt and clippy", || {
            status(Command::new("rustup").args(["component", "add", "rustfmt", "clippy"]))
        })?;
    }
    // Debian packages the tests need, by a file each one ships: Chromium for
    // the browser tests; sshd, ssh and curl for the real-SSH lane;
    // qemu-img and genisoimage for the real-guest module's disk and
    // cloud-init drive tests (`crates/sim/src/machine`).
    let wanted = [
        (crate::e2e::CHROMIUM, "chromium"),
        ("/usr/bin/chromedriver", "chromium-driver"),
        ("/usr/sbin/sshd", "openssh-server"),
        ("/usr/bin/ssh", "openssh-client"),
        ("/usr/bin/curl", "curl"),
        ("/usr/bin/qemu-img", "qemu-utils"),
        ("/usr/bin/genisoimage", "genisoimage"),
    ];
    let missing: Vec<&str> = wanted
        .iter()
        .filter(|(file, _)| !Path::new(file).exists())
        .map(|(_, package)| *package)
        .collect();
    let mut missing = missing;
    // PostgreSQL for the shared store's tests: Debian keeps its programs
    // under /usr/lib/postgresql/<version>/bin, whatever the version.
    if !has_postgres() {
        missing.push("postgresql");
    }
    if !missing.is_empty() {
        apt_install(&missing)?;
    }
    npm_ci(root, "end2end")
}

/// Whether some `/usr/lib/postgresql/*/bin/initdb` is there (or `PG_BIN`
/// names where it is).
pub fn has_postgres() -> bool {
    if let Some(dir) = std::env::var_os("PG_BIN") {
        return Path::new(&dir).join("initdb").exists();
    }
    std::fs::read_dir("/usr/lib/postgresql")
        .map(|versions| {
            versions
                .filter_map(Result::ok)
                .any(|v| v.path().join("bin/initdb").exists())
        })
        .unwrap_or(false)
}

fn ensure_node() -> Result<(), Failed> {
    if output(Command::new("npm").arg("--version")).is_none() {
        apt_install(&["nodejs", "npm"])?;
    }
    Ok(())
}

pub fn apt_install(packages: &[&str]) -> Result<(), Failed> {
    step(&format!("install {} (apt)", packages.join(" ")), || {
        let root_user = output(Command::new("id").arg("-u")).is_some_and(|id| id.trim() == "0");
        let apt = |args: &[&str]| {
            let mut cmd = if root_user {
                Command::new("apt-get")
            } else {
                let mut sudo = Command::new("sudo");
                sudo.args(["-n", "apt-get"]);
                sudo
            };
            cmd.args(args).env("DEBIAN_FRONTEND", "noninteractive");
            status(&mut cmd)
        };
        apt(&["update", "-q"])?;
        let mut args = vec!["install", "-y", "-q", "--no-install-recommends"];
        args.extend(packages);
        apt(&args)
    })
}

/// `npm ci` in `dir` unless its `node_modules` was installed from the very
/// same lock file.
fn npm_ci(root: &Path, dir: &str) -> Result<(), Failed> {
    let dir = root.join(dir);
    let lock = std::fs::read(dir.join("package-lock.json"))
        .map_err(|e| Failed(format!("{}/package-lock.json: {e}", dir.display())))?;
    let stamp = dir.join("node_modules/.installed-lock.json");
    if std::fs::read(&stamp).is_ok_and(|installed| installed == lock) {
        return Ok(());
    }
    step(&format!("npm ci in {}", dir.display()), || {
        status(
            Command::new("npm")
                .args(["ci", "--no-audit", "--no-fund"])
                .current_dir(&dir),
        )?;
        std::fs::write(&stamp, &lock).map_err(|e| Failed(format!("{}: {e}", stamp.display())))
    })
}
