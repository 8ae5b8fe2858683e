//! VM consoles through `/api/vm/:id/console`, on the suite's lane: the
//! simulator's RFB server and serial line in-process (`sim`), `qm
//! vncproxy` and `socat` stand-ins through the `cli` backend, the REST
//! face's `vncproxy`/`termproxy` and `vncwebsocket` (`api`).

mod common;

use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A running VM of the seeded cluster, and a stopped one.
const RUNNING: u32 = 101;
const STOPPED: u32 = 103;

fn ws_url(server: &common::Server, path: &str) -> String {
    format!("{}{path}", server.url.replacen("http", "ws", 1))
}

async fn open(server: &common::Server, path: &str) -> Result<Socket, WsError> {
    open_with(server, path, None).await
}

async fn open_with(
    server: &common::Server,
    path: &str,
    origin: Option<&str>,
) -> Result<Socket, WsError> {
    let mut request = ws_url(server, path).into_client_request()?;
    if let Some(origin) = origin {
        request
            .headers_mut()
            .insert("origin", HeaderValue::from_str(origin).unwrap());
    }
    tokio_tungstenite::connect_async(request)
        .await
        .map(|(socket, _)| socket)
}

/// The HTTP status of a refused upgrade.
fn refused_status(result: Result<Socket, WsError>) -> (u16, String) {
    match result {
        Err(WsError::Http(response)) => {
            let body = response
                .body()
                .as_ref()
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .unwrap_or_default();
            (response.status().as_u16(), body)
        }
        Err(e) => panic!("refused otherwise: {e}"),
        Ok(_) => panic!("the console opened"),
    }
}

/// Reads the socket's binary messages until `n` bytes have come.
struct Reader {
    socket: Socket,
    held: Vec<u8>,
}

impl Reader {
    async fn bytes(&mut self, n: usize) -> Vec<u8> {
        while self.held.len() < n {
            match self.socket.next().await {
                Some(Ok(Message::Binary(b))) => self.held.extend_from_slice(&b),
                Some(Ok(Message::Close(frame))) => panic!("closed: {frame:?}"),
                Some(Ok(_)) => {}
                other => panic!("the console ended: {other:?}"),
            }
        }
        self.held.drain(..n).collect()
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.socket
            .send(Message::binary(bytes.to_vec()))
            .await
            .expect("send");
    }

    /// Reads until the text seen contains `want`; what was seen.
    async fn text_until(&mut self, want: &str) -> String {
        let mut seen = String::new();
        while !seen.contains(want) {
            let chunk = self.bytes(1).await;
            seen.push_str(&String::from_utf8_lossy(&chunk));
            let rest: Vec<u8> = self.held.drain(..).collect();
            seen.push_str(&String::from_utf8_lossy(&rest));
        }
        seen
    }

    /// The close frame's reason, once the server ends the console.
    async fn close_reason(&mut self) -> String {
        loop {
            match self.socket.next().await {
                Some(Ok(Message::Close(frame))) => {
                    return frame.map(|f| f.reason.to_string()).unwrap_or_default();
                }
                Some(Ok(_)) => {}
                other => panic!("ended without a close frame: {other:?}"),
            }
        }
    }
}

/// One framebuffer update of raw rectangles at 32 bits a pixel: whether
/// any pixel is not black.
async fn update_has_light(reader: &mut Reader) -> bool {
    let head = reader.bytes(4).await;
    assert_eq!(head[0], 0, "a FramebufferUpdate");
    let rects = u16::from_be_bytes([head[2], head[3]]);
    let mut light = false;
    for _ in 0..rects {
        let rect = reader.bytes(12).await;
        let (w, h) = (
            u16::from_be_bytes([rect[4], rect[5]]) as usize,
            u16::from_be_bytes([rect[6], rect[7]]) as usize,
        );
        let encoding = i32::from_be_bytes([rect[8], rect[9], rect[10], rect[11]]);
        assert_eq!(encoding, 0, "raw");
        let pixels = reader.bytes(w * h * 4).await;
        light |= pixels.iter().any(|&b| b != 0);
    }
    light
}

/// The RFB client's side up to the first full frame: what pvedeck's
/// relay offers (no password) and the VM's screen.
async fn vnc_session(socket: Socket) -> (Reader, u16, u16) {
    let mut reader = Reader {
        socket,
        held: Vec::new(),
    };
    assert_eq!(reader.bytes(12).await, b"RFB 003.008\n");
    reader.send(b"RFB 003.008\n").await;
    assert_eq!(reader.bytes(2).await, [1, 1], "one security type: none");
    reader.send(&[1]).await;
    assert_eq!(reader.bytes(4).await, [0, 0, 0, 0]);
    reader.send(&[1]).await; // ClientInit: shared
    let init = reader.bytes(24).await;
    let (w, h) = (
        u16::from_be_bytes([init[0], init[1]]),
        u16::from_be_bytes([init[2], init[3]]),
    );
    let name_len = u32::from_be_bytes([init[20], init[21], init[22], init[23]]) as usize;
    reader.bytes(name_len).await;
    // 32 bits a pixel, true colour, little-endian, as noVNC asks.
    reader
        .send(&[
            0, 0, 0, 0, 32, 24, 0, 1, 0, 255, 0, 255, 0, 255, 0, 8, 16, 0, 0, 0,
        ])
        .await;
    reader.send(&[2, 0, 0, 1, 0, 0, 0, 0]).await; // SetEncodings: raw
    (reader, w, h)
}

fn update_request(incremental: bool, w: u16, h: u16) -> Vec<u8> {
    let mut m = vec![3, u8::from(incremental), 0, 0, 0, 0];
    m.extend_from_slice(&w.to_be_bytes());
    m.extend_from_slice(&h.to_be_bytes());
    m
}

fn key(down: bool, keysym: u32) -> Vec<u8> {
    let mut m = vec![4, u8::from(down), 0, 0];
    m.extend_from_slice(&keysym.to_be_bytes());
    m
}

#[tokio::test]
async fn the_graphical_console_draws_the_vm_and_takes_its_keys() {
    let server = common::server(&[]).await;
    let socket = open(&server, &format!("/api/vm/{RUNNING}/console"))
        .await
        .expect("the console opens");
    let (mut vnc, w, h) = vnc_session(socket).await;
    assert!(w >= 320 && h >= 200, "{w}x{h}");
    vnc.send(&update_request(false, w, h)).await;
    assert!(update_has_light(&mut vnc).await, "the screen shows text");
    // A key typed at the login prompt changes the screen.
    vnc.send(&key(true, 'r' as u32)).await;
    vnc.send(&key(false, 'r' as u32)).await;
    vnc.send(&update_request(true, w, h)).await;
    assert!(update_has_light(&mut vnc).await, "the echoed key is drawn");

    let audit = common::json(&format!("{}/api/audit", server.url)).await;
    let actions: Vec<&str> = audit
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["action"].as_str())
        .collect();
    assert!(actions.contains(&"console open"), "{actions:?}");
}

#[tokio::test]
async fn the_serial_console_shows_the_login_prompt_and_echoes() {
    let server = common::server(&[]).await;
    let socket = open(&server, &format!("/api/vm/{RUNNING}/console?kind=serial"))
        .await
        .expect("the serial console opens");
    let mut serial = Reader {
        socket,
        held: Vec::new(),
    };
    serial.text_until("login:").await;
    serial.send(b"root").await;
    serial.text_until("root").await;
}

#[tokio::test]
async fn a_refused_console_is_an_http_status_and_opens_nothing() {
    let server = common::server(&[]).await;
    let before = common::commands(&server).await.len();
    let (status, body) = refused_status(open(&server, &format!("/api/vm/{STOPPED}/console")).await);
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("not running"), "{body}");
    let (status, body) = common::get(&format!("{}/api/vm/{STOPPED}/console", server.url)).await;
    assert_eq!(
        (status, body.contains("not running")),
        (409, true),
        "{body}"
    );
    let (status, _) = refused_status(open(&server, "/api/vm/9999/console").await);
    assert_eq!(status, 404);
    let (status, body) =
        refused_status(open(&server, &format!("/api/vm/{RUNNING}/console?kind=x")).await);
    assert_eq!(status, 400, "{body}");
    let opened: Vec<String> = common::commands(&server)
        .await
        .into_iter()
        .skip(before)
        .filter(|c| c.contains("vncproxy") || c.contains("termproxy") || c.contains("socat"))
        .collect();
    assert!(opened.is_empty(), "no console was opened: {opened:?}");
    // Without an upgrade, a console that could open says where.
    let (status, body) = common::get(&format!("{}/api/vm/{RUNNING}/console", server.url)).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"node\":\"pve1\""), "{body}");
}

#[tokio::test]
async fn a_cross_site_console_is_refused() {
    let server = common::server(&[]).await;
    let (status, body) = refused_status(
        open_with(
            &server,
            &format!("/api/vm/{RUNNING}/console"),
            Some("https://evil.example"),
        )
        .await,
    );
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("cross-site"), "{body}");
}

#[tokio::test]
async fn one_console_per_vm_unless_another_is_asked_for() {
    let server = common::server(&[]).await;
    let path = format!("/api/vm/{RUNNING}/console?kind=serial");
    let _first = open(&server, &path).await.expect("the first opens");
    let (status, body) = refused_status(open(&server, &path).await);
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("already open"), "{body}");
    let another = open(&server, &format!("{path}&another=1")).await;
    assert!(another.is_ok(), "a second one, deliberately");
}

#[tokio::test]
async fn destroying_the_vm_ends_its_console() {
    let server = common::server(&[]).await;
    let socket = open(&server, &format!("/api/vm/{RUNNING}/console?kind=serial"))
        .await
        .expect("the console opens");
    let mut serial = Reader {
        socket,
        held: Vec::new(),
    };
    serial.text_until("login:").await;
    let (status, body) = common::post(&format!("{}/api/vm/{RUNNING}/stop", server.url)).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = common::post(&format!("{}/api/vm/{RUNNING}/destroy", server.url)).await;
    assert_eq!(status, 200, "{body}");
    let reason = serial.close_reason().await;
    assert!(
        reason.contains("destroyed")
            || reason.contains("no longer exists")
            || reason.contains("stopped"),
        "{reason}"
    );
}

/// `cargo xtask bench consoles`: what the relay adds, under 20 open
/// consoles at once (the serial consoles of 20 VMs: a serial port takes
/// one client at a time): each types a key 200 times and waits for its
/// echo (pvedeck → the simulated serial line → pvedeck). The round trip
/// bounds what the relay adds to a message, both ways, from above.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "a benchmark: cargo xtask bench consoles"]
async fn bench_relay_round_trips_under_twenty_consoles() {
    const CONSOLES: usize = 20;
    const KEYS: usize = 200;
    // Two in three of a large simulated cluster's VMs run (ids from 1000).
    let server = common::server(&[("SIM_NODES", "4"), ("SIM_VMS", "40"), ("MANAGE", "all")]).await;
    let running = (1000..1040).filter(|i| (i - 1000) % 3 != 0).take(CONSOLES);
    let mut sessions = Vec::new();
    for vmid in running {
        let socket = open(&server, &format!("/api/vm/{vmid}/console?kind=serial"))
            .await
            .expect("a console opens");
        let mut serial = Reader {
            socket,
            held: Vec::new(),
        };
        serial.text_until("login:").await;
        sessions.push(serial);
    }
    let started = std::time::Instant::now();
    let tasks: Vec<_> = sessions
        .into_iter()
        .map(|mut serial| {
            tokio::spawn(async move {
                let mut took = Vec::with_capacity(KEYS);
                // A key, then DEL: the simulated getty echoes both, and its
                // line (64 characters at most) never fills.
                for k in 0..KEYS {
                    let (key, echo): (&[u8], &[u8]) = match k % 2 {
                        0 => (b"a", b"a"),
                        _ => (b"\x7f", b"\x08 \x08"),
                    };
                    let sent = std::time::Instant::now();
                    serial.send(key).await;
                    assert_eq!(serial.bytes(echo.len()).await, echo);
                    took.push(sent.elapsed());
                }
                took
            })
        })
        .collect();
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.expect("a console's keys"));
    }
    let wall = started.elapsed();
    all.sort();
    let at = |q: f64| all[((all.len() as f64 * q) as usize).min(all.len() - 1)];
    println!(
        "FIGURE console relay, {CONSOLES} consoles at once, {} keys: round trip p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms ({:.0} messages/s)",
        all.len(),
        at(0.5).as_secs_f64() * 1e3,
        at(0.99).as_secs_f64() * 1e3,
        all[all.len() - 1].as_secs_f64() * 1e3,
        (all.len() * 2) as f64 / wall.as_secs_f64()
    );
}
