//! `pvedeck-cli` as a script runs it, without a server: its exit codes for
//! a wrong command line and an unreachable server. The journeys against a
//! server are the server's integration tests (`tests/client.rs`).

use std::process::{Command, Output};

fn cli(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pvedeck-cli"))
        .args(args)
        .env_remove("PVEDECK_URL")
        .env_remove("PVEDECK_TOKEN")
        .output()
        .expect("pvedeck-cli runs")
}

#[test]
fn a_wrong_command_line_exits_2_and_help_exits_0() {
    let out = cli(&["vm", "levitate"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let out = cli(&["--help"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("vm"),
        "{out:?}"
    );
}

#[test]
fn a_server_that_does_not_answer_exits_3() {
    // A loopback port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let out = cli(&["--url", &format!("http://127.0.0.1:{port}"), "vm", "list"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot reach the server"),
        "{out:?}"
    );
}
