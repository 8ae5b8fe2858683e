//! The consoles of the `pvedeck-sim` binary as pvedeck's backends reach
//! them: `qm vncproxy` and `qm terminal` (directly and through the `ssh`
//! stand-in), `socat` on a node, and the REST face's `vncproxy`,
//! `termproxy` and `vncwebsocket`.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use pvedeck_sim::console::rfb::vnc_response;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

const BIN: &str = env!("CARGO_BIN_EXE_pvedeck-sim");
/// The demo cluster's first node with `GATEWAY=10.9.0.1`.
const PVE1: &str = "10.9.0.11";
/// How long anything here may take before the test fails instead of hanging.
const PATIENCE: Duration = Duration::from_secs(30);

fn fresh_dir(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("pvedeck-sim-console-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn command(data: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command
        .args(args)
        .env_clear()
        .env("DATA_DIR", data)
        .env("GATEWAY", "10.9.0.1")
        .env("SIM_SPEED", "2000")
        .current_dir(data);
    command
}

/// A stand-in running with pipes on all three; killed when dropped.
struct Running {
    child: Child,
    out: Receiver<Vec<u8>>,
    seen: Vec<u8>,
    /// stderr, read as it comes (a long-running face logs there).
    err: Option<std::thread::JoinHandle<String>>,
}

impl Running {
    fn start(data: &Path, args: &[&str], env: &[(&str, &str)]) -> Running {
        let mut command = command(data, args);
        command.envs(env.iter().copied());
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("pvedeck-sim runs");
        let mut stdout = child.stdout.take().expect("stdout");
        let mut stderr = child.stderr.take().expect("stderr");
        let err = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        let (tx, out) = channel();
        std::thread::spawn(move || {
            let mut buf = [0u8; 65536];
            while let Ok(n) = stdout.read(&mut buf) {
                if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                    break;
                }
            }
        });
        Running {
            child,
            out,
            seen: Vec::new(),
            err: Some(err),
        }
    }

    fn write(&mut self, bytes: &[u8]) {
        let stdin = self.child.stdin.as_mut().expect("stdin");
        stdin.write_all(bytes).expect("write to the stand-in");
        stdin.flush().expect("flush");
    }

    /// Reads until `n` bytes beyond those taken are there; takes them.
    fn take(&mut self, n: usize) -> Vec<u8> {
        let deadline = Instant::now() + PATIENCE;
        while self.seen.len() < n {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.out.recv_timeout(left) {
                Ok(chunk) => self.seen.extend(chunk),
                Err(e) => panic!("{n} bytes did not come ({e}); got {:?}", self.seen),
            }
        }
        self.seen.drain(..n).collect()
    }

    /// Reads until `text` has come; takes what came up to its end.
    fn until(&mut self, text: &str) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let got = String::from_utf8_lossy(&self.seen).into_owned();
            if let Some(at) = got.find(text) {
                let upto = at + text.len();
                let taken: Vec<u8> = self.seen.drain(..upto).collect();
                return String::from_utf8_lossy(&taken).into_owned();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.out.recv_timeout(left) {
                Ok(chunk) => self.seen.extend(chunk),
                Err(e) => panic!("{text:?} did not come ({e}); got {got:?}"),
            }
        }
    }

    /// Waits for stdout's end and the exit; the exit code and stderr.
    fn finish(mut self) -> (Option<i32>, String) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.out.recv_timeout(left) {
                Ok(chunk) => self.seen.extend(chunk),
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
                Err(e) => panic!("the stand-in did not end: {e}"),
            }
        }
        drop(self.child.stdin.take());
        let status = self.child.wait().expect("wait");
        let err = self
            .err
            .take()
            .and_then(|e| e.join().ok())
            .unwrap_or_default();
        (status.code(), err)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The client's side of the RFB handshake with VNC authentication; the
/// ServerInit's width, height and name.
fn rfb_login(vm: &mut Running, password: &str) -> (u16, u16, String) {
    assert_eq!(vm.take(12), b"RFB 003.008\n");
    vm.write(b"RFB 003.008\n");
    assert_eq!(vm.take(2), [1, 2], "VNC authentication only");
    vm.write(&[2]);
    let challenge: [u8; 16] = vm.take(16).try_into().expect("16 bytes");
    vm.write(&vnc_response(password, &challenge));
    assert_eq!(vm.take(4), [0, 0, 0, 0], "SecurityResult OK");
    vm.write(&[1]);
    let init = vm.take(24);
    let width = u16::from_be_bytes([init[0], init[1]]);
    let height = u16::from_be_bytes([init[2], init[3]]);
    let len = u32::from_be_bytes([init[20], init[21], init[22], init[23]]) as usize;
    let name = String::from_utf8_lossy(&vm.take(len)).into_owned();
    (width, height, name)
}

/// A whole frame asked for and read: how many of its pixels are lit.
fn lit_pixels(vm: &mut Running, width: u16, height: u16) -> usize {
    let mut request = vec![3u8, 0, 0, 0, 0, 0];
    request.extend_from_slice(&width.to_be_bytes());
    request.extend_from_slice(&height.to_be_bytes());
    vm.write(&request);
    let header = vm.take(16);
    assert_eq!(&header[..4], [0, 0, 0, 1], "one rectangle");
    assert_eq!(&header[12..], [0, 0, 0, 0], "Raw");
    let pixels = vm.take(usize::from(width) * usize::from(height) * 4);
    pixels
        .chunks_exact(4)
        .filter(|p| p[..3] != [0, 0, 0])
        .count()
}

#[test]
fn qm_vncproxy_speaks_rfb_with_lc_pve_ticket_as_the_password() {
    let data = fresh_dir("vncproxy");
    // As pvedeck's cli backend calls it: the variable on the command line.
    let mut vm = Running::start(
        &data,
        &[
            "ssh",
            "-T",
            &format!("root@{PVE1}"),
            "LC_PVE_TICKET='a:b=c+de' /usr/sbin/qm vncproxy 101",
        ],
        &[],
    );
    let (width, height, name) = rfb_login(&mut vm, "a:b=c+de");
    assert_eq!((width, height, name.as_str()), (640, 400, "web-01-101"));
    assert!(lit_pixels(&mut vm, width, height) > 1000, "text on screen");
    // The relay closing its side ends the proxy.
    drop(vm.child.stdin.take());
    let (code, _) = vm.finish();
    assert_eq!(code, Some(0));

    // From the environment, as `ssh` passes LC_* on; a wrong password fails.
    let mut vm = Running::start(
        &data,
        &["qm", "vncproxy", "102"],
        &[("LC_PVE_TICKET", "right")],
    );
    assert_eq!(vm.take(12), b"RFB 003.008\n");
    vm.write(b"RFB 003.008\n");
    assert_eq!(vm.take(2), [1, 2]);
    vm.write(&[2]);
    let challenge: [u8; 16] = vm.take(16).try_into().expect("16 bytes");
    vm.write(&vnc_response("wrong", &challenge));
    assert_eq!(vm.take(4), [0, 0, 0, 1], "SecurityResult failed");
    let reason_len = vm.take(4);
    assert_eq!(vm.take(reason_len[3] as usize), b"Authentication failed");
}

#[test]
fn qm_vncproxy_refuses_without_a_ticket_and_for_a_stopped_vm() {
    let data = fresh_dir("vncproxy-no");
    let (code, err) = Running::start(&data, &["qm", "vncproxy", "101"], &[]).finish();
    assert_eq!(code, Some(255));
    assert_eq!(
        err.trim(),
        "LC_PVE_TICKET not set, VNC proxy without password is forbidden"
    );
    let stop = command(&data, &["qm", "stop", "102"])
        .output()
        .expect("qm stop");
    assert!(stop.status.success(), "{stop:?}");
    let ticket = [("LC_PVE_TICKET", "secret12")];
    let (code, err) = Running::start(&data, &["qm", "vncproxy", "102"], &ticket).finish();
    assert_eq!((code, err.trim()), (Some(255), "VM 102 not running"));
    // A VM of another node: its config is not on this one.
    let (code, err) = Running::start(&data, &["qm", "vncproxy", "103"], &ticket).finish();
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("'nodes/pve1/qemu-server/103.conf' does not exist"),
        "{err}"
    );
}

#[test]
fn qm_terminal_needs_a_terminal_and_then_is_the_serial_line() {
    let data = fresh_dir("terminal");
    // On pipes, socat's `raw,echo=0` fails after the banner; qm exits 0.
    let mut pipe = Running::start(&data, &["qm", "terminal", "101"], &[]);
    assert_eq!(
        pipe.until("\n"),
        "starting serial terminal on interface serial0 (press Ctrl+O to exit)\n"
    );
    let (code, err) = pipe.finish();
    assert_eq!(code, Some(0));
    assert!(err.contains("Inappropriate ioctl for device"), "{err}");

    // `ssh -tt` gives it a pty: the banner ends in CR LF, then the line.
    let node = format!("root@{PVE1}");
    let args = ["ssh", "-tt", &node, "qm", "terminal", "101", "-escape", "0"];
    let mut term = Running::start(&data, &args, &[]);
    assert_eq!(
        term.until("\r\n"),
        "starting serial terminal on interface serial0\r\n"
    );
    let greeting = term.until("web-01-101 login: ");
    assert!(
        greeting.contains("Ubuntu 24.04.1 LTS web-01-101 ttyS0"),
        "{greeting}"
    );
    term.write(b"root\r");
    assert_eq!(term.until("Password: "), "root\r\nPassword: ");
    term.write(b"hunter2\r");
    assert_eq!(
        term.until("login: "),
        "\r\n\r\nLogin incorrect\r\nweb-01-101 login: "
    );

    // Stopped by another process: the line ends, and so does qm terminal.
    let stop = command(&data, &["qm", "stop", "101"])
        .output()
        .expect("qm stop");
    assert!(stop.status.success(), "{stop:?}");
    let (code, _) = term.finish();
    assert_eq!(code, Some(0));

    // Ctrl+O, the default escape, ends a session.
    let mut term = Running::start(&data, &["ssh", "-tt", &node, "qm terminal 102"], &[]);
    term.until("db-01-102 login: ");
    term.write(b"\x0f");
    assert_eq!(term.finish().0, Some(0));

    let (code, err) =
        Running::start(&data, &["ssh", "-tt", &node, "qm terminal 101"], &[]).finish();
    assert_eq!((code, err.trim()), (Some(255), "VM 101 not running"));
    let (code, err) =
        Running::start(&data, &["qm", "terminal", "102", "-iface", "serial1"], &[]).finish();
    assert_eq!(
        (code, err.trim()),
        (Some(255), "serial interface 'serial1' is not configured")
    );
}

#[test]
fn socat_on_a_node_is_the_serial_socket_while_the_vm_runs() {
    let data = fresh_dir("socat");
    let node = format!("root@{PVE1}");
    let socket = "UNIX-CONNECT:/var/run/qemu-server/102.serial0";
    let mut line = Running::start(&data, &["ssh", "-T", &node, "socat", "-", socket], &[]);
    line.until("db-01-102 login: ");
    line.write(b"x");
    assert_eq!(line.until("x"), "x");
    drop(line);
    let socket = "UNIX-CONNECT:/var/run/qemu-server/105.serial0";
    let (code, err) =
        Running::start(&data, &["ssh", "-T", &node, "socat", "-", socket], &[]).finish();
    assert_eq!(code, Some(1));
    assert!(err.contains("No such file or directory"), "{err}");
}

/// `pvedeck-sim api` on `data`: its base URL's port, its token, and a TLS
/// client trusting its certificate.
struct Face {
    _process: Running,
    port: u16,
    token: String,
    tls: tokio_rustls::TlsConnector,
}

fn start_face(data: &Path) -> Face {
    let mut process = Running::start(data, &["api"], &[]);
    let url = process.until("\n");
    let port = url
        .trim()
        .strip_prefix("https://127.0.0.1:")
        .and_then(|rest| rest.split('/').next())
        .and_then(|p| p.parse().ok())
        .expect("the face's URL");
    let about: serde_json::Value =
        serde_json::from_slice(&std::fs::read(data.join("sim/api.json")).expect("api.json"))
            .expect("JSON");
    let pem = std::fs::read(data.join("sim/api/cert.pem")).expect("cert.pem");
    let mut roots = rustls::RootCertStore::empty();
    use rustls::pki_types::pem::PemObject;
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(&pem) {
        roots.add(cert.expect("PEM")).expect("root");
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("TLS versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    Face {
        _process: process,
        port,
        token: about["token"].as_str().expect("token").to_string(),
        tls: tokio_rustls::TlsConnector::from(Arc::new(config)),
    }
}

type Tls = tokio_rustls::client::TlsStream<tokio::net::TcpStream>;
type Ws = tokio_tungstenite::WebSocketStream<Tls>;

impl Face {
    async fn connect(&self) -> Tls {
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", self.port))
            .await
            .expect("connect");
        let name = rustls::pki_types::ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into());
        self.tls.connect(name, tcp).await.expect("TLS")
    }

    /// `POST path` with a form body, over HTTP/1.1: the status and JSON.
    async fn post(&self, path: &str, form: &str) -> (u16, serde_json::Value) {
        let mut tls = self.connect().await;
        let request = format!(
            "POST /api2/json{path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: PVEAPIToken={}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{form}",
            self.token,
            form.len()
        );
        tls.write_all(request.as_bytes()).await.expect("request");
        let mut answer = Vec::new();
        let _ = tls.read_to_end(&mut answer).await;
        let text = String::from_utf8_lossy(&answer);
        let status = text
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .expect("a status line");
        let body = text.split("\r\n\r\n").nth(1).unwrap_or_default();
        // The body may come chunked: the JSON is its one chunk's text.
        let json = body
            .find('{')
            .and_then(|start| body.rfind('}').map(|end| &body[start..=end]))
            .unwrap_or("null");
        (status, serde_json::from_str(json).expect("JSON body"))
    }

    /// The `vncwebsocket` upgrade; `Err(status)` when refused.
    async fn websocket(&self, vm: &str, port: u16, ticket: &str, token: bool) -> Result<Ws, u16> {
        let ticket: String = url_encode(ticket);
        let url = format!(
            "ws://127.0.0.1:{}/api2/json/nodes/pve1/qemu/{vm}/vncwebsocket?port={port}&vncticket={ticket}",
            self.port
        );
        let mut request = url.into_client_request().expect("request");
        let headers = request.headers_mut();
        headers.insert("Sec-WebSocket-Protocol", "binary".parse().expect("header"));
        if token {
            let auth = format!("PVEAPIToken={}", self.token);
            headers.insert("Authorization", auth.parse().expect("header"));
        }
        match tokio_tungstenite::client_async(request, self.connect().await).await {
            Ok((ws, response)) => {
                let protocol = response.headers().get("Sec-WebSocket-Protocol");
                assert_eq!(protocol.and_then(|p| p.to_str().ok()), Some("binary"));
                Ok(ws)
            }
            Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
                Err(response.status().as_u16())
            }
            Err(e) => panic!("websocket: {e}"),
        }
    }
}

fn url_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A WebSocket's binary frames read as one byte stream.
struct WsBytes {
    ws: Ws,
    seen: Vec<u8>,
}

impl WsBytes {
    async fn take(&mut self, n: usize) -> Vec<u8> {
        while self.seen.len() < n {
            match self.ws.next().await {
                Some(Ok(Message::Binary(bytes))) => self.seen.extend_from_slice(&bytes),
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                other => panic!("{n} bytes did not come: {other:?}; got {:?}", self.seen),
            }
        }
        self.seen.drain(..n).collect()
    }

    async fn until(&mut self, text: &str) -> String {
        loop {
            let got = String::from_utf8_lossy(&self.seen).into_owned();
            if let Some(at) = got.find(text) {
                let taken: Vec<u8> = self.seen.drain(..at + text.len()).collect();
                return String::from_utf8_lossy(&taken).into_owned();
            }
            match self.ws.next().await {
                Some(Ok(Message::Binary(bytes))) => self.seen.extend_from_slice(&bytes),
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                other => panic!("{text:?} did not come: {other:?}; got {got:?}"),
            }
        }
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.ws
            .send(Message::binary(bytes.to_vec()))
            .await
            .expect("send");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rest_face_serves_vnc_and_serial_consoles_over_vncwebsocket() {
    let data = fresh_dir("face");
    let face = start_face(&data);
    tokio::time::timeout(PATIENCE, async {
        let (status, answer) = face
            .post("/nodes/pve1/qemu/101/vncproxy", "websocket=1")
            .await;
        assert_eq!(status, 200, "{answer}");
        let d = &answer["data"];
        let port = d["port"].as_u64().expect("port") as u16;
        assert!((5900..6000).contains(&port), "{port}");
        let ticket = d["ticket"].as_str().expect("ticket").to_string();
        let password = d["password"].as_str().expect("password");
        assert_eq!(password.len(), 8);
        assert!(
            ticket.starts_with(&format!("{password}:PVEVNC:")),
            "{ticket}"
        );
        assert_eq!(d["user"], "pvedeck@pve!deck");
        assert!(
            d["cert"]
                .as_str()
                .is_some_and(|c| c.contains("BEGIN CERTIFICATE"))
        );
        assert!(
            d["upid"]
                .as_str()
                .is_some_and(|u| u.contains(":vncproxy:101:"))
        );

        // Refused: no token, another VM's path, a ticket not its own.
        assert_eq!(
            face.websocket("101", port, &ticket, false).await.err(),
            Some(401)
        );
        assert_eq!(
            face.websocket("102", port, &ticket, true).await.err(),
            Some(401)
        );
        let forged = ticket.replace("PVEVNC:", "PVEVNC:0");
        assert_eq!(
            face.websocket("101", port, &forged, true).await.err(),
            Some(401)
        );

        let mut rfb = WsBytes {
            ws: face
                .websocket("101", port, &ticket, true)
                .await
                .expect("upgrade"),
            seen: Vec::new(),
        };
        assert_eq!(rfb.take(12).await, b"RFB 003.008\n");
        rfb.send(b"RFB 003.008\n").await;
        assert_eq!(rfb.take(2).await, [1, 2]);
        rfb.send(&[2]).await;
        let challenge: [u8; 16] = rfb.take(16).await.try_into().expect("16");
        // The ticket as the password: only its first 8 bytes count.
        rfb.send(&vnc_response(&ticket, &challenge)).await;
        assert_eq!(rfb.take(4).await, [0, 0, 0, 0]);
        rfb.send(&[1]).await;
        let init = rfb.take(24).await;
        let len = u32::from_be_bytes([init[20], init[21], init[22], init[23]]) as usize;
        assert_eq!(rfb.take(len).await, b"web-01-101");
        rfb.send(&[3, 0, 0, 0, 0, 0, 2, 128, 1, 144]).await;
        let header = rfb.take(16).await;
        assert_eq!(&header[..4], [0, 0, 0, 1]);
        let pixels = rfb.take(640 * 400 * 4).await;
        assert!(
            pixels
                .chunks_exact(4)
                .filter(|p| p[..3] != [0, 0, 0])
                .count()
                > 1000
        );

        // One connection per port: the ticket does not open a second.
        assert_eq!(
            face.websocket("101", port, &ticket, true).await.err(),
            Some(500)
        );

        let (status, answer) = face
            .post("/nodes/pve1/qemu/102/termproxy", "serial=serial0")
            .await;
        assert_eq!(status, 200, "{answer}");
        let d = &answer["data"];
        let port = d["port"].as_u64().expect("port") as u16;
        let ticket = d["ticket"].as_str().expect("ticket").to_string();
        assert!(ticket.starts_with("PVEVNC:"), "{ticket}");
        let mut term = WsBytes {
            ws: face
                .websocket("102", port, &ticket, true)
                .await
                .expect("upgrade"),
            seen: Vec::new(),
        };
        term.send(format!("pvedeck@pve!deck:{ticket}\n").as_bytes())
            .await;
        assert_eq!(term.take(2).await, b"OK");
        assert_eq!(
            term.until("\r\n").await,
            "starting serial terminal on interface serial0\r\n"
        );
        term.until("db-01-102 login: ").await;
        term.send(b"1:120:40:20:4:root").await;
        term.send(b"0:1:\r").await;
        assert_eq!(term.until("Password: ").await, "root\r\nPassword: ");

        // Its VM stopped, the console ends.
        let stop = command(&data, &["qm", "stop", "102"])
            .output()
            .expect("qm stop");
        assert!(stop.status.success(), "{stop:?}");
        loop {
            match term.ws.next().await {
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
                Some(Ok(_)) => {}
            }
        }
    })
    .await
    .expect("the consoles answered in time");
}
