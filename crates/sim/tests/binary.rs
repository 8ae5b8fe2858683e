//! The `pvedeck-sim` binary as the server's tests and the `cli` backend
//! meet it: called by a tool's name (a link named `qm`) or as
//! `pvedeck-sim qm …`, on the demo cluster of a fresh data directory.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_pvedeck-sim");

fn fresh_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pvedeck-sim-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn run(program: &Path, data: &Path, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .env_clear()
        .env("DATA_DIR", data)
        .current_dir(data)
        .output()
        .expect("pvedeck-sim runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn qm_answers_as_proxmox_does_by_either_name() {
    let data = fresh_dir("qm");
    let out = run(Path::new(BIN), &data, &["qm", "status", "101"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(text(&out.stdout), "status: running\n");

    // A VM of another node: qm only acts on its own node's VMs.
    let out = run(Path::new(BIN), &data, &["qm", "status", "103"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        text(&out.stderr)
            .contains("Configuration file 'nodes/pve1/qemu-server/103.conf' does not exist"),
        "{out:?}"
    );

    let bin = data.join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    std::os::unix::fs::symlink(BIN, bin.join("qm")).expect("link");
    let out = run(&bin.join("qm"), &data, &["status", "101"]);
    assert_eq!(text(&out.stdout), "status: running\n", "{out:?}");
    // Both calls ran against the one cluster of the data directory.
    assert!(data.join("sim/cluster.json").is_file());
}

#[test]
fn without_a_command_it_says_how_to_call_it() {
    let data = fresh_dir("usage");
    let out = run(Path::new(BIN), &data, &[]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let usage = text(&out.stderr);
    assert!(
        usage.contains("usage: pvedeck-sim qm|pvesh|pvesm|ssh"),
        "{usage}"
    );
    assert!(usage.contains("pvedeck-sim api"), "{usage}");
}
