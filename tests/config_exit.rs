//! The server binary refuses bad configuration with exit code 2 and one line
//! naming the variable, the value and what is expected.

use std::path::PathBuf;
use std::process::{Command, Output};

/// An empty directory of its own, so no developer's `.env` is read.
fn workdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pvedeck-config-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn run(dir: &PathBuf, vars: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pvedeck"))
        .current_dir(dir)
        .env_clear()
        .envs(vars.iter().copied())
        .output()
        .expect("run pvedeck")
}

fn refused(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    stderr.trim_end().to_string()
}

#[test]
fn bad_gateway_stops_the_server_with_exit_code_2() {
    let dir = workdir("gateway");
    let out = run(&dir, &[("GATEWAY", "192.168.0")]);
    assert_eq!(refused(&out), "GATEWAY=192.168.0 is not an IPv4 address");
}

#[test]
fn cli_backend_without_its_settings_is_refused() {
    let dir = workdir("cli");
    let out = run(&dir, &[("PVE_BACKEND", "cli")]);
    assert_eq!(
        refused(&out),
        "GATEWAY is not set: required when PVE_BACKEND=cli"
    );
}

#[test]
fn dot_env_is_read_from_the_working_directory() {
    let dir = workdir("dotenv");
    std::fs::write(dir.join(".env"), "PORT=80800\n").expect(".env");
    let out = run(&dir, &[]);
    assert_eq!(
        refused(&out),
        "PORT=80800 is not a port number (0-65535, 0 picks a free port)"
    );
}

#[test]
fn a_bad_log_filter_is_a_configuration_error() {
    let dir = workdir("rustlog");
    let out = run(&dir, &[("RUST_LOG", "info,[")]);
    assert!(refused(&out).starts_with("RUST_LOG=info,[ is not a tracing filter"));
}

#[test]
fn a_database_url_that_is_not_postgres_is_refused_with_its_password_masked() {
    let dir = workdir("dburl");
    let out = run(
        &dir,
        &[("DATABASE_URL", "mysql://pvedeck:hunter2@db/pvedeck")],
    );
    assert_eq!(
        refused(&out),
        "DATABASE_URL=mysql://pvedeck:***@db/pvedeck is not a postgres:// URL"
    );
}

#[test]
fn an_unreachable_database_stops_the_server_with_exit_code_2_and_no_password() {
    let dir = workdir("dbdown");
    // A loopback port nothing listens on: bound, then let go.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let url = format!("postgres://pvedeck:hunter2@127.0.0.1:{port}/pvedeck");
    let out = run(&dir, &[("DATABASE_URL", &url), ("PORT", "0")]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "DATABASE_URL=postgres://pvedeck:***@127.0.0.1:{port}/pvedeck"
        )),
        "{stderr}"
    );
    let all = format!("{stderr}{}", String::from_utf8_lossy(&out.stdout));
    assert!(
        !all.contains("hunter2"),
        "the password is never shown: {all}"
    );
}

#[test]
fn an_incomplete_cluster_is_refused_naming_its_variable() {
    let dir = workdir("clusters");
    let out = run(
        &dir,
        &[
            ("CLUSTERS", "east,west"),
            ("CLUSTER_west_PVE_BACKEND", "api"),
            ("CLUSTER_west_GATEWAY", "10.0.0.1"),
            ("CLUSTER_west_MAIN_NODE", "pve1"),
            ("CLUSTER_west_ASSIGN_STORAGE", "local-lvm"),
            ("HOME", "/root"),
        ],
    );
    assert_eq!(
        refused(&out),
        "CLUSTER_west_PVE_API_URL is not set: required when PVE_BACKEND=api (https://<node>:8006) \
         (cluster west)"
    );
    let out = run(
        &dir,
        &[("CLUSTERS", "east,west"), ("CLUSTER_west_PORT", "81")],
    );
    assert!(
        refused(&out).starts_with("CLUSTER_west_PORT=81 is not a per-cluster setting"),
        "{out:?}"
    );
}
