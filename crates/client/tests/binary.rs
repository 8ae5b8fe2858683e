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

/// A server that answers every request with `body` (text/plain, 200), once.
fn one_answer(body: &'static [u8]) -> String {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let url = format!("http://{}", listener.local_addr().expect("its address"));
    std::thread::spawn(move || {
        let Ok((stream, _)) = listener.accept() else {
            return;
        };
        let mut reader = BufReader::new(&stream);
        let mut line = String::new();
        // The request's head, up to its empty line.
        while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
            line.clear();
        }
        let mut stream = &stream;
        let _ = write!(
            stream,
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        );
        let _ = stream.write_all(body);
    });
    url
}

#[test]
fn what_a_server_says_reaches_the_terminal_without_control_characters() {
    let url = one_answer(b"\x1b]0;owned\x07\x1b[2Jrunning\r");
    let out = cli(&["--url", &url, "vm", "status", "101"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "]0;owned[2Jrunning\n",
        "{out:?}"
    );
}
