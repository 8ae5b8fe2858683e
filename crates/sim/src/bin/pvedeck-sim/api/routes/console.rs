//! Consoles (qemu-server `PVE/API2/Qemu.pm` `vncproxy`, `termproxy`,
//! `vncwebsocket`; pve-xtermjs `termproxy`): a POST starts a proxy task listening on
//! a port of 5900–5999 for one connection within 10 s and answers a ticket
//! bound to the token, the VM and the port; `vncwebsocket` with that port
//! and ticket upgrades to a WebSocket that pveproxy would join to the
//! port. Nothing listens on a real port here: the port is a key to the
//! waiting task, which gets the WebSocket itself.
//!
//! What runs behind the port: for `vncproxy`, `qm vncproxy` (the VM's RFB
//! server asking for VNC authentication with the answered `password`,
//! the ticket's first 8 bytes); for `termproxy`, termproxy's protocol
//! (the `user:ticket\n` line, `OK`, then framed input and raw output)
//! around `qm terminal <vmid> -escape 0` in a pty.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::ws::{
    Message, WebSocket, WebSocketUpgrade, rejection::WebSocketUpgradeRejection,
};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use pvedeck_proxmox::{ConsoleIo, ConsoleKind, PveError};
use pvedeck_sim::console::ConsoleOptions;
use pvedeck_support::clock::now_ms;
use serde_json::json;
use sha2::Digest;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;

use super::super::auth::TOKEN_ID;
use super::super::error::ApiError;
use super::super::params::Params;
use super::super::{Api, ApiResult, data};
use super::{Vm, VmParams};

/// `PVE::Tools::next_vnc_port`: `next_unused_port(5900, 6000)`.
const PORTS: std::ops::Range<u16> = 5900..6000;
/// How long the proxy waits for its one connection (the worker's `alarm
/// 10`, termproxy's `listen_and_accept`), and termproxy for the ticket line.
const ACCEPT: Duration = Duration::from_secs(10);
/// `verify_vnc_ticket`: a ticket is good from 20 s before its time to 40
/// s after.
const TICKET_MIN_AGE: i64 = -20;
const TICKET_MAX_AGE: i64 = 40;
/// pveproxy's largest WebSocket frame each way.
const FRAME_MAX: usize = 128 * 1024;
/// termproxy's longest ticket line.
const TICKET_LINE_MAX: usize = 4096;

/// The proxies waiting for their connection, by port.
#[derive(Default)]
pub struct Consoles {
    ports: Mutex<BTreeMap<u16, Listener>>,
}

struct Listener {
    vmid: u32,
    /// Hands the WebSocket to the task behind the port.
    hand: oneshot::Sender<WebSocket>,
}

impl Consoles {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u16, Listener>> {
        self.ports.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A free port with a listener for VM `vmid` on it.
    fn listen(&self, vmid: u32) -> Result<(u16, oneshot::Receiver<WebSocket>), ApiError> {
        let mut ports = self.lock();
        ports.retain(|_, l| !l.hand.is_closed());
        let port = PORTS
            .clone()
            .find(|p| !ports.contains_key(p))
            .ok_or_else(|| ApiError::new(500, "unable to find free port (5900-5999)"))?;
        let (hand, taken) = oneshot::channel();
        ports.insert(port, Listener { vmid, hand });
        Ok((port, taken))
    }

    /// The listener on `port` for VM `vmid`, taken: one connection only.
    fn accept(&self, port: u16, vmid: u32) -> Option<oneshot::Sender<WebSocket>> {
        let mut ports = self.lock();
        if ports.get(&port).is_none_or(|l| l.vmid != vmid) {
            return None;
        }
        ports.remove(&port).map(|l| l.hand)
    }

    fn close(&self, port: u16) {
        self.lock().remove(&port);
    }
}

/// `assemble_vnc_ticket(authuser, path, port)`: `PVEVNC:<hex time>::<sig>`,
/// signed with `secret` (Proxmox signs with the cluster's RSA key).
fn vnc_ticket(secret: &str, user: &str, path: &str, port: u16, time: i64) -> String {
    let stamp = format!("{time:08X}");
    let digest = sha2::Sha256::digest(format!("{secret}\0PVEVNC:{stamp}\0{user}:{path}:{port}"));
    use base64::Engine as _;
    let sig = base64::engine::general_purpose::STANDARD.encode(digest);
    format!("PVEVNC:{stamp}::{sig}")
}

/// `verify_vnc_ticket` at `now` (unix seconds): signed for this user, path
/// and port, and young enough; a `password:` prefix is allowed.
fn verify_vnc_ticket(
    secret: &str,
    ticket: &str,
    (user, path, port): (&str, &str, u16),
    now: i64,
) -> bool {
    let plain = match ticket.as_bytes().get(8) {
        Some(b':') if !ticket.starts_with("PVEVNC:") => ticket.get(9..).unwrap_or_default(),
        _ => ticket,
    };
    let Some(time) = plain
        .strip_prefix("PVEVNC:")
        .and_then(|rest| rest.split_once("::"))
        .and_then(|(stamp, _)| i64::from_str_radix(stamp, 16).ok())
    else {
        return false;
    };
    let age = now - time;
    let expected = vnc_ticket(secret, user, path, port, time);
    let same: bool = subtle::ConstantTimeEq::ct_eq(expected.as_bytes(), plain.as_bytes()).into();
    same && TICKET_MIN_AGE < age && age < TICKET_MAX_AGE
}

impl Api {
    /// A ticket of the token for VM `vmid`'s console on `port`, made now.
    fn console_ticket(&self, vmid: u32, port: u16) -> String {
        vnc_ticket(&self.secret, TOKEN_ID, &acl(vmid), port, now_ms() / 1000)
    }
}

/// `PVE::Ticket::generate_vnc_password`: 8 characters of `!`..`` ` ``.
fn vnc_password() -> Result<String, ApiError> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).map_err(|e| ApiError::new(500, format!("no randomness: {e}")))?;
    // 64 characters: each byte's low 6 bits pick one without bias.
    Ok(bytes
        .iter()
        .map(|b| char::from(b'!' + (b & 0x3f)))
        .collect())
}

/// What the ticket's path names.
fn acl(vmid: u32) -> String {
    format!("/vms/{vmid}")
}

/// What runs behind a proxy's port once its connection came.
enum Behind {
    Vnc {
        password: String,
    },
    Term {
        ticket: String,
        iface: Option<String>,
    },
}

/// Starts the proxy task of VM `vm` behind `port` (waiting on `taken`);
/// returns its UPID.
fn start_proxy(
    api: &Arc<Api>,
    vm: &Vm,
    (port, taken): (u16, oneshot::Receiver<WebSocket>),
    behind: Behind,
) -> String {
    let task_api = api.clone();
    let (node, vmid) = (vm.node.clone(), vm.id);
    let upid = api.tasks.spawn(
        api.tasks.upid(&vm.node, "vncproxy", &vm.id.to_string()),
        move |_log| async move {
            let api = task_api;
            let Ok(Ok(socket)) = tokio::time::timeout(ACCEPT, taken).await else {
                api.consoles.close(port);
                return Err(PveError::command("vncproxy", "connection timed out", 255));
            };
            match behind {
                Behind::Vnc { password } => vnc(&api, &node, vmid, password, socket).await,
                Behind::Term { ticket, iface } => {
                    term(&api, &node, vmid, &ticket, iface, socket).await
                }
            }
        },
    );
    upid.to_string()
}

/// `POST …/vncproxy`: the VM's VNC console behind a port, with a new VNC
/// password that also begins the ticket (qemu-server ≥ 9.1.7).
pub async fn vncproxy(State(api): State<Arc<Api>>, VmParams(vm, params): VmParams) -> ApiResult {
    params.flag("websocket")?;
    params.flag("generate-password")?;
    vm.open(&api, &["VM.Console"])?;
    let password = vnc_password()?;
    let listener = api.consoles.listen(vm.id)?;
    let port = listener.0;
    let ticket = api.console_ticket(vm.id, port);
    let behind = Behind::Vnc {
        password: password.clone(),
    };
    let upid = start_proxy(&api, &vm, listener, behind);
    let cert = std::fs::read_to_string(api.dir.join("api").join("cert.pem")).unwrap_or_default();
    Ok(data(json!({
        "user": TOKEN_ID,
        "ticket": format!("{password}:{ticket}"),
        "password": password,
        "cert": cert,
        "port": port,
        "upid": upid,
    })))
}

/// `POST …/termproxy [serial=serialN]`: `qm terminal` behind termproxy,
/// which takes only the ticket answered here (`--ticket-fd`).
pub async fn termproxy(State(api): State<Arc<Api>>, VmParams(vm, params): VmParams) -> ApiResult {
    let iface = params.get("serial").map(str::to_string);
    if let Some(iface) = &iface
        && !["serial0", "serial1", "serial2", "serial3"].contains(&iface.as_str())
    {
        return Err(ApiError::param(
            "serial",
            format!(
                "value '{iface}' does not have a value in the enumeration 'serial0, serial1, serial2, serial3'"
            ),
        ));
    }
    vm.open(&api, &["VM.Console"])?;
    let listener = api.consoles.listen(vm.id)?;
    let port = listener.0;
    let ticket = api.console_ticket(vm.id, port);
    let behind = Behind::Term {
        ticket: ticket.clone(),
        iface,
    };
    let upid = start_proxy(&api, &vm, listener, behind);
    Ok(data(json!({
        "user": TOKEN_ID,
        "ticket": ticket,
        "port": port,
        "upid": upid,
    })))
}

/// `GET …/vncwebsocket?port=…&vncticket=…`: the ticket checked, then the
/// WebSocket joined to the proxy on that port. Without an upgrade, the
/// handler's own answer (`{port}`).
pub async fn vncwebsocket(
    State(api): State<Arc<Api>>,
    vm: Vm,
    headers: HeaderMap,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
    params: Params,
) -> Result<Response, ApiError> {
    let port = match params.int("port")? {
        None => {
            return Err(ApiError::param(
                "port",
                "property is missing and it is not optional",
            ));
        }
        Some(p) if !(5900..=5999).contains(&p) => {
            return Err(ApiError::param(
                "port",
                format!(
                    "value must have a {} value of {}",
                    if p < 5900 { "minimum" } else { "maximum" },
                    if p < 5900 { 5900 } else { 5999 }
                ),
            ));
        }
        Some(p) => u16::try_from(p).unwrap_or(0),
    };
    let ticket = params.required("vncticket")?;
    if ticket.len() > 512 {
        return Err(ApiError::param(
            "vncticket",
            "value may only be 512 characters long",
        ));
    }
    api.privs.require(&vm.acl(), "VM.Console")?;
    let path = acl(vm.id);
    if !verify_vnc_ticket(
        &api.secret,
        ticket,
        (TOKEN_ID, &path, port),
        now_ms() / 1000,
    ) {
        return Err(ApiError::new(
            401,
            "permission denied - invalid PVEVNC ticket",
        ));
    }
    vm.found(&api)?;
    let upgrade = match upgrade {
        Ok(upgrade) => upgrade,
        Err(_) => return Ok(data(json!({ "port": port.to_string() }))),
    };
    // pveproxy's `tcp_connect('localhost', $port)`: the proxy listens for
    // one connection, for 10 s.
    let Some(hand) = api.consoles.accept(port, vm.id) else {
        return Err(ApiError::new(
            500,
            format!("unable to connect to VNC proxy on port {port} - Connection refused"),
        ));
    };
    // The client's subprotocol, echoed as pveproxy echoes it.
    let offered: Vec<String> = headers
        .get(axum::http::header::SEC_WEBSOCKET_PROTOCOL)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(',').map(|p| p.trim().to_string()).collect())
        .unwrap_or_default();
    Ok(upgrade
        .protocols(offered)
        .max_frame_size(FRAME_MAX)
        .max_message_size(FRAME_MAX)
        .on_upgrade(move |socket| async move {
            // A task that timed out meanwhile drops it: the client sees
            // the connection close.
            let _ = hand.send(socket);
        })
        .into_response())
}

/// `qm vncproxy <vmid>` behind the WebSocket, its password set.
async fn vnc(
    api: &Api,
    node: &str,
    vmid: u32,
    password: String,
    mut socket: WebSocket,
) -> Result<(), PveError> {
    let options = ConsoleOptions {
        password: Some(password),
        iface: None,
    };
    match api
        .sim
        .open_console(node, vmid, ConsoleKind::Vnc, options)
        .await
    {
        Ok(console) => {
            relay(socket, console.io, Vec::new(), |bytes| bytes.to_vec()).await;
            Ok(())
        }
        Err(e) => {
            // `qm vncproxy` dies; the client sees the connection end.
            let _ = socket.send(Message::Close(None)).await;
            Err(e)
        }
    }
}

/// termproxy: the ticket line, `OK`, then `qm terminal <vmid> -escape 0`
/// in a pty.
async fn term(
    api: &Api,
    node: &str,
    vmid: u32,
    pinned: &str,
    iface: Option<String>,
    mut socket: WebSocket,
) -> Result<(), PveError> {
    let failed = |why: &str| PveError::command("termproxy", why, 255);
    let mut line = Vec::new();
    let read_line = async {
        while !line.contains(&b'\n') {
            match socket.recv().await {
                Some(Ok(Message::Binary(b))) => line.extend_from_slice(&b),
                Some(Ok(Message::Text(t))) => line.extend_from_slice(t.as_bytes()),
                Some(Ok(_)) => {}
                _ => return false,
            }
            if line.len() > TICKET_LINE_MAX {
                return false;
            }
        }
        true
    };
    if !matches!(tokio::time::timeout(ACCEPT, read_line).await, Ok(true)) {
        return Err(failed(
            "failed reading ticket: timeout or connection closed",
        ));
    }
    let end = line.iter().position(|b| *b == b'\n').unwrap_or(line.len());
    let rest = line.split_off(end + 1);
    let text = String::from_utf8_lossy(&line[..end]).into_owned();
    let authentic = text
        .split_once(':')
        .is_some_and(|(user, ticket)| user == TOKEN_ID && ticket == pinned);
    if !authentic {
        // termproxy closes without a word.
        let _ = socket.send(Message::Close(None)).await;
        return Err(failed("authentication request failed"));
    }
    let _ = socket
        .send(Message::Binary(Bytes::from_static(b"OK")))
        .await;

    let command = pvedeck_sim::console::command(ConsoleKind::Serial, vmid);
    let opened = async {
        let iface = api.sim.read(|s| {
            let vm = pvedeck_sim::qm::vm_on(s, node, vmid, &command, true)?;
            pvedeck_sim::console::serial_iface(vm, iface.as_deref(), &command)
        })?;
        let options = ConsoleOptions {
            password: None,
            iface: Some(iface.clone()),
        };
        let console = api
            .sim
            .open_console(node, vmid, ConsoleKind::Serial, options)
            .await?;
        Ok::<_, PveError>((iface, console))
    };
    match opened.await {
        Ok((iface, console)) => {
            // The pty turns the banner's newline into CR LF.
            let banner = format!("starting serial terminal on interface {iface}\r\n");
            let mut input = TermInput::default();
            let first = input.feed(&rest);
            relay_with_banner(socket, console.io, banner, first, input).await;
            Ok(())
        }
        Err(e) => {
            // `qm terminal`'s error, through the pty, then the end.
            let text = format!("{}\r\n", e.message().replace('\n', "\r\n"));
            let _ = socket.send(Message::Binary(Bytes::from(text))).await;
            let _ = socket.send(Message::Close(None)).await;
            Err(e)
        }
    }
}

async fn relay_with_banner(
    mut socket: WebSocket,
    io: Box<dyn ConsoleIo>,
    banner: String,
    first: Vec<u8>,
    mut input: TermInput,
) {
    if socket
        .send(Message::Binary(Bytes::from(banner)))
        .await
        .is_err()
    {
        return;
    }
    relay(socket, io, first, move |bytes| input.feed(bytes)).await;
}

/// The WebSocket and the console, each way until either ends: what the
/// client sends goes through `input` to the console (`first` before it),
/// what the console says goes out raw in binary frames.
async fn relay(
    mut socket: WebSocket,
    io: Box<dyn ConsoleIo>,
    first: Vec<u8>,
    mut input: impl FnMut(&[u8]) -> Vec<u8>,
) {
    let (mut from_vm, mut to_vm) = tokio::io::split(io);
    if !first.is_empty() && to_vm.write_all(&first).await.is_err() {
        return;
    }
    let mut buf = vec![0u8; FRAME_MAX];
    loop {
        tokio::select! {
            message = socket.recv() => {
                let bytes = match message {
                    Some(Ok(Message::Binary(b))) => input(&b),
                    Some(Ok(Message::Text(t))) => input(t.as_bytes()),
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                    _ => break,
                };
                if to_vm.write_all(&bytes).await.is_err() || to_vm.flush().await.is_err() {
                    break;
                }
            }
            read = from_vm.read(&mut buf) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let frame = Bytes::copy_from_slice(&buf[..n]);
                    if socket.send(Message::Binary(frame)).await.is_err() {
                        break;
                    }
                }
            },
        }
    }
    let _ = socket.send(Message::Close(None)).await;
}

/// termproxy's input (`process_queue`): `0:LEN:DATA` is data, `1:COLS:ROWS:`
/// a resize, `2` a ping; anything else is dropped a byte at a time. One
/// byte stream: a message may be split across frames, or frames share one.
#[derive(Debug, Default)]
pub struct TermInput {
    pending: Vec<u8>,
}

/// A decimal number then `:` at the start of `bytes`.
enum Number {
    Done(usize, usize),
    More,
    Bad,
}

fn number(bytes: &[u8]) -> Number {
    const DIGITS_MAX: usize = 9;
    let digits = bytes.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits > DIGITS_MAX {
        return Number::Bad;
    }
    match bytes.get(digits) {
        None => Number::More,
        Some(b':') if digits > 0 => {
            let text = String::from_utf8_lossy(&bytes[..digits]);
            text.parse()
                .map_or(Number::Bad, |n| Number::Done(n, digits + 1))
        }
        Some(_) => Number::Bad,
    }
}

impl TermInput {
    /// Takes the client's next bytes; returns what goes to the terminal.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<u8> {
        self.pending.extend_from_slice(bytes);
        let mut out = Vec::new();
        loop {
            let buf = &self.pending;
            let used = match buf.first() {
                None => break,
                Some(b'0' | b'1') if buf.len() < 2 => break,
                Some(b'0') if buf[1] == b':' => match number(&buf[2..]) {
                    Number::More => break,
                    Number::Bad => 1,
                    Number::Done(len, at) => {
                        let start = 2 + at;
                        if buf.len() < start + len {
                            break;
                        }
                        out.extend_from_slice(&buf[start..start + len]);
                        start + len
                    }
                },
                Some(b'1') if buf[1] == b':' => match number(&buf[2..]) {
                    Number::More => break,
                    Number::Bad => 1,
                    Number::Done(_cols, at) => match number(&buf[2 + at..]) {
                        Number::More => break,
                        Number::Bad => 1,
                        // A pty's size: a serial line never learns it.
                        Number::Done(_rows, at2) => 2 + at + at2,
                    },
                },
                _ => 1,
            };
            self.pending.drain(..used);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ticket_is_bound_to_its_user_vm_and_port_and_lives_40_seconds() {
        let bound = ("pvedeck@pve!deck", "/vms/101", 5900);
        let ticket = vnc_ticket("s", bound.0, bound.1, bound.2, 1_000_000);
        assert!(ticket.starts_with("PVEVNC:000F4240::"), "{ticket}");
        let ok = |t: &str, bound, now| verify_vnc_ticket("s", t, bound, now);
        assert!(ok(&ticket, bound, 1_000_000));
        assert!(ok(&format!("Ab#d!fgh:{ticket}"), bound, 1_000_039));
        assert!(!ok(&ticket, bound, 1_000_040), "too old");
        assert!(!ok(&ticket, bound, 999_980), "from the future");
        assert!(!ok(
            &ticket,
            ("pvedeck@pve!deck", "/vms/102", 5900),
            1_000_000
        ));
        assert!(!ok(
            &ticket,
            ("pvedeck@pve!deck", "/vms/101", 5901),
            1_000_000
        ));
        assert!(!ok(&ticket, ("root@pam", "/vms/101", 5900), 1_000_000));
        assert!(
            !verify_vnc_ticket("t", &ticket, bound, 1_000_000),
            "another key"
        );
        assert!(!ok("PVEVNC:zz::x", bound, 1_000_000));
    }

    #[test]
    fn vnc_passwords_are_8_characters_of_proxmox_s_range() {
        let password = vnc_password().unwrap();
        assert_eq!(password.len(), 8);
        assert!(
            password.bytes().all(|b| (b'!'..=b'`').contains(&b)),
            "{password}"
        );
    }

    #[test]
    fn term_input_takes_data_frames_and_drops_resizes_pings_and_noise() {
        let mut input = TermInput::default();
        assert_eq!(input.feed(b"0:5:hello2"), b"hello");
        assert_eq!(input.feed(b"1:80:24:0:3:a"), b"");
        assert_eq!(input.feed(b"bc"), b"abc", "a frame split across messages");
        assert_eq!(input.feed(b"x0:1:\r"), b"\r", "noise dropped");
        assert_eq!(
            input.feed(b"0:2:\xc3\xa9"),
            "é".as_bytes(),
            "LEN counts bytes"
        );
        assert_eq!(input.feed(b"0:x:"), b"", "a bad length is noise");
        assert!(input.pending.is_empty());
        assert_eq!(input.feed(b"0:12"), b"", "the length is not whole yet");
        assert_eq!(input.feed(b":hello world!"), b"hello world!");
    }
}
