//! The relay of one console: the browser's messages to the VM's stream and
//! back, under the console's bounds (idle time, bytes per second) until
//! either side ends or something closes it (the VM destroyed, the session
//! ended). For the graphical console it first does both RFB handshakes
//! (`rfb`): the browser's noVNC meets a server asking no password.

use std::time::Duration;

use bytes::Bytes;
use pvedeck_config::ConsoleLimits;
use pvedeck_proxmox::{ConsoleKind, ConsoleStream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::rfb;

/// How long the VM's VNC server and the browser each have for their
/// handshake.
const HANDSHAKE: Duration = Duration::from_secs(10);
/// The most one read of the VM's stream relays in one message.
const CHUNK: usize = 64 * 1024;

/// Why a relay ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// The browser closed the console.
    Browser,
    /// The VM's side ended (stopped, destroyed, the proxy gone).
    Vm,
    /// No key or pointer for `CONSOLE_IDLE_SECS`.
    Idle(Duration),
    /// Closed from outside: the VM destroyed, the session ended.
    Closed(String),
    /// A handshake failed.
    Failed(String),
}

impl std::fmt::Display for End {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            End::Browser => write!(f, "closed by the browser"),
            End::Vm => write!(f, "ended by the VM's side"),
            End::Idle(after) => write!(
                f,
                "closed after {} s without a key or the pointer (CONSOLE_IDLE_SECS)",
                after.as_secs()
            ),
            End::Closed(why) | End::Failed(why) => write!(f, "{why}"),
        }
    }
}

/// What a relay did.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub end: End,
    /// Bytes the browser sent to the VM.
    pub bytes_in: u64,
    /// Bytes the VM sent to the browser.
    pub bytes_out: u64,
    pub open_for: Duration,
}

/// Bytes per second, with a second's worth of burst.
struct Bucket {
    rate: f64,
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn new(rate: u64) -> Bucket {
        let rate = rate as f64;
        Bucket {
            rate,
            tokens: rate,
            at: Instant::now(),
        }
    }

    /// Takes `n` bytes' worth, waiting for what is missing.
    async fn take(&mut self, n: usize) {
        let now = Instant::now();
        self.tokens =
            (self.tokens + now.duration_since(self.at).as_secs_f64() * self.rate).min(self.rate);
        self.at = now;
        self.tokens -= n as f64;
        if self.tokens < 0.0 {
            // A rate, not a wait for an event: the budget refills with time.
            tokio::time::sleep(Duration::from_secs_f64(-self.tokens / self.rate)).await;
            self.tokens = 0.0;
            self.at = Instant::now();
        }
    }
}

/// Whether a message from the browser is someone at the console: for the
/// graphical console anything but noVNC's lone `FramebufferUpdateRequest`
/// (which follows every screen update by itself), for the serial one any
/// input.
fn is_activity(kind: ConsoleKind, message: &[u8]) -> bool {
    kind == ConsoleKind::Serial || !(message.len() == 10 && message[0] == 3)
}

/// Reads exactly `n` bytes from the browser's messages, keeping the rest in
/// `held`.
async fn browser_bytes(
    from: &mut mpsc::Receiver<Bytes>,
    held: &mut Vec<u8>,
    n: usize,
) -> Option<Vec<u8>> {
    while held.len() < n {
        held.extend_from_slice(&from.recv().await?);
    }
    Some(held.drain(..n).collect())
}

/// The browser's side of the RFB handshake: version, security "none".
/// What it sent beyond is left in `held`.
async fn browser_handshake(
    from: &mut mpsc::Receiver<Bytes>,
    to: &mpsc::Sender<Bytes>,
    held: &mut Vec<u8>,
) -> Result<(), End> {
    let gone = || End::Browser;
    to.send(Bytes::from_static(rfb::VERSION))
        .await
        .map_err(|_| gone())?;
    let version = browser_bytes(from, held, 12).await.ok_or_else(gone)?;
    if !version.starts_with(b"RFB 003.") {
        return Err(End::Failed("the browser does not speak RFB".into()));
    }
    to.send(Bytes::from_static(&rfb::SECURITY_TYPES))
        .await
        .map_err(|_| gone())?;
    let chosen = browser_bytes(from, held, 1).await.ok_or_else(gone)?;
    if chosen != [rfb::SECURITY_TYPES[1]] {
        return Err(End::Failed(format!(
            "the browser chose security type {chosen:?}, not the one offered"
        )));
    }
    to.send(Bytes::from_static(&rfb::SECURITY_OK))
        .await
        .map_err(|_| gone())
}

/// Relays `stream` between the browser (`from`, `to`: its messages) and the
/// VM until one side ends, it idles, or `closed` says why it must close.
/// `session_ends`: when the session it was opened from ends.
pub async fn relay(
    stream: ConsoleStream,
    kind: ConsoleKind,
    limits: ConsoleLimits,
    mut from: mpsc::Receiver<Bytes>,
    to: mpsc::Sender<Bytes>,
    mut closed: watch::Receiver<Option<String>>,
    session_ends: Option<Instant>,
) -> Outcome {
    let started = Instant::now();
    let mut outcome = Outcome {
        end: End::Browser,
        bytes_in: 0,
        bytes_out: 0,
        open_for: Duration::ZERO,
    };
    let ConsoleStream { mut io, password } = stream;
    let mut held = Vec::new();
    if kind == ConsoleKind::Vnc {
        let handshakes = async {
            rfb::authenticate(&mut io, password.as_deref())
                .await
                .map_err(|e| End::Failed(e.to_string()))?;
            browser_handshake(&mut from, &to, &mut held).await
        };
        let done = match tokio::time::timeout(HANDSHAKE, handshakes).await {
            Ok(done) => done,
            Err(_) => Err(End::Failed("the console's handshake timed out".into())),
        };
        if let Err(end) = done {
            outcome.end = end;
            outcome.open_for = started.elapsed();
            return outcome;
        }
    }
    let (mut vm_in, mut vm_out) = tokio::io::split(io);
    if !held.is_empty() {
        outcome.bytes_in += held.len() as u64;
        if vm_out.write_all(&held).await.is_err() {
            outcome.end = End::Vm;
            outcome.open_for = started.elapsed();
            return outcome;
        }
    }
    let mut down = Bucket::new(limits.bytes_per_sec);
    let mut up = Bucket::new(limits.bytes_per_sec);
    let mut idle_at = Instant::now() + limits.idle;
    let session_end = async move {
        match session_ends {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(session_end);
    let mut buf = vec![0u8; CHUNK];
    outcome.end = loop {
        if let Some(why) = closed.borrow_and_update().clone() {
            break End::Closed(why);
        }
        tokio::select! {
            read = vm_in.read(&mut buf) => match read {
                Ok(0) | Err(_) => break End::Vm,
                Ok(n) => {
                    down.take(n).await;
                    outcome.bytes_out += n as u64;
                    if to.send(Bytes::copy_from_slice(&buf[..n])).await.is_err() {
                        break End::Browser;
                    }
                }
            },
            message = from.recv() => match message {
                None => break End::Browser,
                Some(message) => {
                    if is_activity(kind, &message) {
                        idle_at = Instant::now() + limits.idle;
                    }
                    up.take(message.len()).await;
                    outcome.bytes_in += message.len() as u64;
                    if vm_out.write_all(&message).await.is_err() {
                        break End::Vm;
                    }
                }
            },
            () = tokio::time::sleep_until(idle_at) => break End::Idle(limits.idle),
            changed = closed.changed() => {
                if changed.is_err() {
                    break End::Closed("the console was closed".into());
                }
            }
            () = &mut session_end => break End::Closed("your session ended".into()),
        }
    };
    let _ = vm_out.shutdown().await;
    outcome.open_for = started.elapsed();
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncRead, AsyncWrite, DuplexStream};

    fn limits() -> ConsoleLimits {
        ConsoleLimits {
            idle: Duration::from_secs(900),
            ..ConsoleLimits::default()
        }
    }

    struct Browser {
        to_relay: mpsc::Sender<Bytes>,
        from_relay: mpsc::Receiver<Bytes>,
    }

    impl Browser {
        async fn expect(&mut self, want: &[u8]) {
            let mut got = Vec::new();
            while got.len() < want.len() {
                got.extend_from_slice(&self.from_relay.recv().await.unwrap());
            }
            assert_eq!(got, want);
        }
        async fn send(&self, bytes: &[u8]) {
            self.to_relay
                .send(Bytes::copy_from_slice(bytes))
                .await
                .unwrap();
        }
    }

    fn start(
        kind: ConsoleKind,
        limits: ConsoleLimits,
        password: Option<&str>,
    ) -> (
        Browser,
        DuplexStream,
        watch::Sender<Option<String>>,
        tokio::task::JoinHandle<Outcome>,
    ) {
        let (near, far) = tokio::io::duplex(1 << 16);
        let (to_relay, from) = mpsc::channel(16);
        let (to, from_relay) = mpsc::channel(16);
        let (close, closed) = watch::channel(None);
        let stream = ConsoleStream {
            io: Box::new(near),
            password: password.map(str::to_string),
        };
        let task = tokio::spawn(relay(stream, kind, limits, from, to, closed, None));
        (
            Browser {
                to_relay,
                from_relay,
            },
            far,
            close,
            task,
        )
    }

    async fn read_n(io: &mut (impl AsyncRead + Unpin), n: usize) -> Vec<u8> {
        let mut buf = vec![0; n];
        io.read_exact(&mut buf).await.unwrap();
        buf
    }

    async fn vnc_server_with_password(vm: &mut (impl AsyncRead + AsyncWrite + Unpin), pw: &str) {
        vm.write_all(b"RFB 003.008\n").await.unwrap();
        read_n(vm, 12).await;
        vm.write_all(&[1, 2]).await.unwrap();
        assert_eq!(read_n(vm, 1).await, [2]);
        let challenge = [9u8; 16];
        vm.write_all(&challenge).await.unwrap();
        assert_eq!(
            read_n(vm, 16).await,
            rfb::vnc_response(pw, &challenge).to_vec()
        );
        vm.write_all(&[0, 0, 0, 0]).await.unwrap();
    }

    #[tokio::test]
    async fn the_browser_meets_no_password_while_the_relay_gives_the_ticket() {
        let (mut browser, mut vm, _close, task) =
            start(ConsoleKind::Vnc, limits(), Some("PVE:ticket"));
        vnc_server_with_password(&mut vm, "PVE:ticket").await;
        browser.expect(b"RFB 003.008\n").await;
        browser.send(b"RFB 003.008\n").await;
        browser.expect(&[1, 1]).await;
        browser.send(&[1, 1]).await; // the choice, and ClientInit in the same message
        browser.expect(&[0, 0, 0, 0]).await;
        assert_eq!(read_n(&mut vm, 1).await, [1], "ClientInit passed on");
        vm.write_all(b"server-init").await.unwrap();
        browser.expect(b"server-init").await;
        drop(browser);
        let outcome = task.await.unwrap();
        assert_eq!(outcome.end, End::Browser);
        assert_eq!(outcome.bytes_in, 1);
        assert_eq!(outcome.bytes_out, 11);
    }

    #[tokio::test]
    async fn serial_bytes_pass_both_ways_and_the_vm_ending_ends_the_relay() {
        let (mut browser, mut vm, _close, task) = start(ConsoleKind::Serial, limits(), None);
        vm.write_all(b"login: ").await.unwrap();
        browser.expect(b"login: ").await;
        browser.send(b"root\r").await;
        assert_eq!(read_n(&mut vm, 5).await, b"root\r");
        drop(vm);
        assert_eq!(task.await.unwrap().end, End::Vm);
    }

    #[tokio::test]
    async fn closing_from_outside_ends_the_relay_with_its_reason() {
        let (_browser, _vm, close, task) = start(ConsoleKind::Serial, limits(), None);
        close.send_replace(Some("VM 101 was destroyed".into()));
        assert_eq!(
            task.await.unwrap().end,
            End::Closed("VM 101 was destroyed".into())
        );
    }

    #[tokio::test]
    async fn a_console_without_keys_closes_at_its_idle_time() {
        let idle = Duration::from_millis(300);
        let (_browser, _vm, _close, task) = start(
            ConsoleKind::Serial,
            ConsoleLimits {
                idle,
                ..ConsoleLimits::default()
            },
            None,
        );
        let started = Instant::now();
        let outcome = task.await.unwrap();
        assert_eq!(outcome.end, End::Idle(idle));
        assert!(started.elapsed() >= idle);
    }

    #[test]
    fn screen_update_requests_are_not_someone_at_the_console() {
        let key = [4, 1, 0, 0, 0, 0, 0, 0x61];
        let update_request = [3, 1, 0, 0, 0, 0, 2, 208, 1, 144];
        assert!(is_activity(ConsoleKind::Vnc, &key));
        assert!(!is_activity(ConsoleKind::Vnc, &update_request));
        assert!(is_activity(ConsoleKind::Serial, &update_request));
    }

    #[tokio::test]
    async fn bytes_per_second_are_bounded() {
        let rate = 100_000;
        let (mut browser, mut vm, _close, _task) = start(
            ConsoleKind::Serial,
            ConsoleLimits {
                bytes_per_sec: rate,
                ..limits()
            },
            None,
        );
        let started = Instant::now();
        let sent = vec![b'x'; 250_000];
        let writer = tokio::spawn(async move {
            vm.write_all(&sent).await.unwrap();
            vm
        });
        browser.expect(&vec![b'x'; 250_000]).await;
        // A second's burst (100,000), then 150,000 at 100,000 a second.
        assert!(
            started.elapsed() >= Duration::from_millis(1_400),
            "{:?}",
            started.elapsed()
        );
        drop(writer);
    }
}
