//! A small RFB (VNC) server: the simulated guest's VGA text screen, as
//! QEMU's VNC server would serve it to noVNC (RFC 6143).
//!
//! The screen is 80×25 characters of 8×16 pixels (640×400, VGA text mode),
//! light grey on black, drawn with the public-domain 8×8 font (each row
//! doubled). Keys go to a getty (`tty`); Ctrl-Alt-Del reboots the guest on
//! screen. Security is None, or VNC authentication when a password is
//! given (QEMU's `set_password`, as `qm vncproxy` sets its ticket). Updates
//! are Raw only; an incremental request waits until the screen changes.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::tty::{Echo, GuestInfo, Key, Login};

pub const COLS: usize = 80;
pub const ROWS: usize = 25;
const CELL_W: usize = 8;
const CELL_H: usize = 16;
pub const WIDTH: u16 = (COLS * CELL_W) as u16;
pub const HEIGHT: u16 = (ROWS * CELL_H) as u16;

/// VGA's light grey, the text colour of a Linux console.
const FOREGROUND: [u8; 3] = [0xaa, 0xaa, 0xaa];
const BACKGROUND: [u8; 3] = [0, 0, 0];

/// The longest cut text taken from a client (ignored, but read).
const CUT_TEXT_MAX: u32 = 1 << 20;
/// The most encodings a SetEncodings may list (noVNC sends about 20).
const ENCODINGS_MAX: u16 = 1024;

#[derive(Debug, thiserror::Error)]
pub enum RfbError {
    #[error("RFB connection: {0}")]
    Io(#[from] std::io::Error),
    #[error("RFB protocol: {0}")]
    Protocol(String),
    #[error("VNC authentication failed")]
    AuthFailed,
}

/// A client's pixel format (SetPixelFormat; RFC 6143 §7.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PixelFormat {
    pub bits_per_pixel: u8,
    pub depth: u8,
    pub big_endian: bool,
    pub true_colour: bool,
    pub red_max: u16,
    pub green_max: u16,
    pub blue_max: u16,
    pub red_shift: u8,
    pub green_shift: u8,
    pub blue_shift: u8,
}

impl PixelFormat {
    /// What the server announces: 32-bit little-endian xRGB, as QEMU does.
    pub const SERVER: PixelFormat = PixelFormat {
        bits_per_pixel: 32,
        depth: 24,
        big_endian: false,
        true_colour: true,
        red_max: 255,
        green_max: 255,
        blue_max: 255,
        red_shift: 16,
        green_shift: 8,
        blue_shift: 0,
    };

    pub fn to_bytes(self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[0] = self.bits_per_pixel;
        b[1] = self.depth;
        b[2] = u8::from(self.big_endian);
        b[3] = u8::from(self.true_colour);
        b[4..6].copy_from_slice(&self.red_max.to_be_bytes());
        b[6..8].copy_from_slice(&self.green_max.to_be_bytes());
        b[8..10].copy_from_slice(&self.blue_max.to_be_bytes());
        b[10] = self.red_shift;
        b[11] = self.green_shift;
        b[12] = self.blue_shift;
        b
    }

    pub fn from_bytes(b: &[u8; 16]) -> Result<PixelFormat, RfbError> {
        let pf = PixelFormat {
            bits_per_pixel: b[0],
            depth: b[1],
            big_endian: b[2] != 0,
            true_colour: b[3] != 0,
            red_max: u16::from_be_bytes([b[4], b[5]]),
            green_max: u16::from_be_bytes([b[6], b[7]]),
            blue_max: u16::from_be_bytes([b[8], b[9]]),
            red_shift: b[10],
            green_shift: b[11],
            blue_shift: b[12],
        };
        if !matches!(pf.bits_per_pixel, 8 | 16 | 32) {
            return Err(RfbError::Protocol(format!(
                "unsupported bits-per-pixel {}",
                pf.bits_per_pixel
            )));
        }
        if !pf.true_colour {
            // A colour map would need SetColourMapEntries; noVNC never asks.
            return Err(RfbError::Protocol("colour maps are not supported".into()));
        }
        Ok(pf)
    }

    /// One pixel of colour `rgb` in this format, as it goes on the wire.
    pub fn encode(self, rgb: [u8; 3]) -> Vec<u8> {
        let scale = |v: u8, max: u16, shift: u8| -> u32 {
            let v = u32::from(v) * u32::from(max) / 255;
            v.checked_shl(u32::from(shift)).unwrap_or(0)
        };
        let value = scale(rgb[0], self.red_max, self.red_shift)
            | scale(rgb[1], self.green_max, self.green_shift)
            | scale(rgb[2], self.blue_max, self.blue_shift);
        let bytes = usize::from(self.bits_per_pixel / 8);
        if self.big_endian {
            value.to_be_bytes()[4 - bytes..].to_vec()
        } else {
            value.to_le_bytes()[..bytes].to_vec()
        }
    }

    /// The colour of a pixel in this format (tests read frames with it).
    pub fn decode(self, pixel: &[u8]) -> [u8; 3] {
        let mut word = [0u8; 4];
        let value = if self.big_endian {
            word[4 - pixel.len()..].copy_from_slice(pixel);
            u32::from_be_bytes(word)
        } else {
            word[..pixel.len()].copy_from_slice(pixel);
            u32::from_le_bytes(word)
        };
        let channel = |max: u16, shift: u8| -> u8 {
            let v = value.checked_shr(u32::from(shift)).unwrap_or(0) & u32::from(max);
            u8::try_from(v * 255 / u32::from(max.max(1))).unwrap_or(u8::MAX)
        };
        [
            channel(self.red_max, self.red_shift),
            channel(self.green_max, self.green_shift),
            channel(self.blue_max, self.blue_shift),
        ]
    }
}

/// A rectangle of the framebuffer, in pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rect {
    pub x: u16,
    pub y: u16,
    pub w: u16,
    pub h: u16,
}

impl Rect {
    pub const FULL: Rect = Rect {
        x: 0,
        y: 0,
        w: WIDTH,
        h: HEIGHT,
    };

    /// The part of `self` inside `other` (and the screen), if any.
    fn within(self, other: Rect) -> Option<Rect> {
        let x0 = self.x.max(other.x);
        let y0 = self.y.max(other.y);
        let x1 = (self.x.saturating_add(self.w))
            .min(other.x.saturating_add(other.w))
            .min(WIDTH);
        let y1 = (self.y.saturating_add(self.h))
            .min(other.y.saturating_add(other.h))
            .min(HEIGHT);
        (x0 < x1 && y0 < y1).then_some(Rect {
            x: x0,
            y: y0,
            w: x1 - x0,
            h: y1 - y0,
        })
    }

    fn covers(self, other: Rect) -> bool {
        other.within(self) == Some(other)
    }
}

/// The VGA text screen: characters, a cursor, and which rows changed
/// since the client last got them.
#[derive(Debug, Clone)]
pub struct TextScreen {
    cells: Vec<[u8; COLS]>,
    row: usize,
    col: usize,
    /// Rows changed since the last update sent: first and last.
    dirty: Option<(usize, usize)>,
}

impl Default for TextScreen {
    fn default() -> Self {
        TextScreen {
            cells: vec![[b' '; COLS]; ROWS],
            row: 0,
            col: 0,
            dirty: Some((0, ROWS - 1)),
        }
    }
}

impl TextScreen {
    fn touch(&mut self, row: usize) {
        self.dirty = Some(match self.dirty {
            Some((a, b)) => (a.min(row), b.max(row)),
            None => (row, row),
        });
    }

    pub fn clear(&mut self) {
        *self = TextScreen::default();
    }

    fn newline(&mut self) {
        self.touch(self.row);
        self.col = 0;
        if self.row + 1 < ROWS {
            self.row += 1;
        } else {
            self.cells.remove(0);
            self.cells.push([b' '; COLS]);
            self.dirty = Some((0, ROWS - 1));
        }
        self.touch(self.row);
    }

    /// Text at the cursor; it wraps at the right edge as a console does.
    pub fn put(&mut self, text: &str) {
        for c in text.chars() {
            if self.col >= COLS {
                self.newline();
            }
            let byte = if c.is_ascii() && !c.is_ascii_control() {
                c as u8
            } else {
                b'?'
            };
            self.cells[self.row][self.col] = byte;
            self.col += 1;
            self.touch(self.row);
        }
    }

    /// A whole line: the text, then a new line.
    pub fn line(&mut self, text: &str) {
        self.put(text);
        self.newline();
    }

    /// Backspace: the character before the cursor goes.
    pub fn erase(&mut self) {
        if self.col > 0 {
            self.col -= 1;
            self.cells[self.row][self.col] = b' ';
            self.touch(self.row);
        }
    }

    /// A getty's echo, on screen.
    fn echo(&mut self, echo: Echo) {
        match echo {
            Echo::None => {}
            Echo::Text(text) => self.put(&text),
            Echo::Erase => self.erase(),
            Echo::Lines(lines) => {
                for line in lines {
                    self.newline();
                    self.put(&line);
                }
            }
        }
    }

    /// The screen's text, one string per row, trailing blanks cut.
    pub fn text(&self) -> Vec<String> {
        self.cells
            .iter()
            .map(|row| String::from_utf8_lossy(row).trim_end().to_string())
            .collect()
    }

    /// Whether the pixel at (`x`, `y`) is lit (text or cursor).
    fn lit(&self, x: usize, y: usize) -> bool {
        let (row, col) = (y / CELL_H, x / CELL_W);
        let in_cell = y % CELL_H;
        // The cursor: the cell's last pixel row (a glyph's rows are drawn
        // twice, so a test reading even rows reads text only).
        if row == self.row && col == self.col && in_cell == CELL_H - 1 {
            return true;
        }
        let byte = self.cells[row][col];
        let glyph = font8x8::legacy::BASIC_LEGACY[usize::from(byte & 0x7f)];
        // 8×8 glyphs, each row drawn twice; bit 0 is the leftmost pixel.
        glyph[in_cell / 2] >> (x % CELL_W) & 1 == 1
    }

    /// The changed part of the screen, taken: what an update must send.
    fn take_dirty(&mut self) -> Option<Rect> {
        let (a, b) = self.dirty.take()?;
        Some(Rect {
            x: 0,
            y: (a * CELL_H) as u16,
            w: WIDTH,
            h: ((b - a + 1) * CELL_H) as u16,
        })
    }

    /// A FramebufferUpdate of `rect` in Raw encoding.
    fn update(&self, rect: Rect, pf: PixelFormat) -> Vec<u8> {
        let (on, off) = (pf.encode(FOREGROUND), pf.encode(BACKGROUND));
        let size = usize::from(rect.w) * usize::from(rect.h) * on.len();
        let mut msg = Vec::with_capacity(16 + size);
        msg.extend_from_slice(&[0, 0]);
        msg.extend_from_slice(&1u16.to_be_bytes());
        for v in [rect.x, rect.y, rect.w, rect.h] {
            msg.extend_from_slice(&v.to_be_bytes());
        }
        msg.extend_from_slice(&0i32.to_be_bytes());
        for y in rect.y..rect.y + rect.h {
            for x in rect.x..rect.x + rect.w {
                let pixel = if self.lit(usize::from(x), usize::from(y)) {
                    &on
                } else {
                    &off
                };
                msg.extend_from_slice(pixel);
            }
        }
        msg
    }
}

/// X11 keysyms the guest reacts to.
mod keysym {
    pub const BACKSPACE: u32 = 0xff08;
    pub const RETURN: u32 = 0xff0d;
    pub const KP_ENTER: u32 = 0xff8d;
    pub const DELETE: u32 = 0xffff;
    pub const KP_DELETE: u32 = 0xff9f;
    pub const CONTROL_L: u32 = 0xffe3;
    pub const CONTROL_R: u32 = 0xffe4;
    pub const ALT_L: u32 = 0xffe9;
    pub const ALT_R: u32 = 0xffea;
    pub const META_L: u32 = 0xffe7;
    pub const META_R: u32 = 0xffe8;
}

/// A client message the screen acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ClientMessage {
    PixelFormat(PixelFormat),
    Update { incremental: bool, rect: Rect },
    Key { down: bool, keysym: u32 },
}

/// One step of what the guest does by itself (a reboot's screens).
#[derive(Debug, Clone)]
enum Step {
    Firmware,
    Kernel,
    Prompt,
}

/// The guest behind the screen: its getty, its modifiers held, and the
/// steps of a reboot under way.
struct Guest<'a> {
    info: &'a GuestInfo,
    screen: TextScreen,
    login: Login,
    ctrl: bool,
    alt: bool,
    steps: VecDeque<(Instant, Step)>,
}

/// How long each screen of a reboot stays (the guest's own time).
const REBOOT_STEP: Duration = Duration::from_millis(400);

impl<'a> Guest<'a> {
    fn booted(info: &'a GuestInfo) -> Guest<'a> {
        let mut guest = Guest {
            info,
            screen: TextScreen::default(),
            login: Login::default(),
            ctrl: false,
            alt: false,
            steps: VecDeque::new(),
        };
        guest.step(Step::Kernel);
        guest.step(Step::Prompt);
        guest
    }

    fn step(&mut self, step: Step) {
        match step {
            Step::Firmware => {
                self.screen.clear();
                for line in self.info.firmware_lines() {
                    self.screen.line(&line);
                }
            }
            Step::Kernel => {
                self.screen.clear();
                for line in self.info.boot_lines() {
                    self.screen.line(&line);
                }
            }
            Step::Prompt => {
                for line in self.info.issue("tty1") {
                    self.screen.line(&line);
                }
                self.screen.put(&self.info.prompt());
                self.login = Login::default();
            }
        }
    }

    fn rebooting(&self) -> bool {
        !self.steps.is_empty()
    }

    fn key(&mut self, down: bool, keysym: u32) {
        use keysym::*;
        match keysym {
            CONTROL_L | CONTROL_R => self.ctrl = down,
            ALT_L | ALT_R | META_L | META_R => self.alt = down,
            DELETE | KP_DELETE if down && self.ctrl && self.alt && !self.rebooting() => {
                self.reboot()
            }
            _ if !down || self.rebooting() || self.ctrl || self.alt => {}
            RETURN | KP_ENTER => self.type_key(Key::Enter),
            BACKSPACE => self.type_key(Key::Backspace),
            0x20..=0x7e => {
                if let Some(c) = char::from_u32(keysym) {
                    self.type_key(Key::Char(c));
                }
            }
            _ => {}
        }
    }

    fn type_key(&mut self, key: Key) {
        let echo = self.login.key(key, self.info);
        self.screen.echo(echo);
    }

    /// Ctrl-Alt-Del: systemd goes down, and the guest boots again.
    fn reboot(&mut self) {
        self.screen.newline();
        for line in self.info.reboot_lines() {
            self.screen.line(&line);
        }
        let now = Instant::now();
        self.steps = VecDeque::from([
            (now + REBOOT_STEP, Step::Firmware),
            (now + REBOOT_STEP * 2, Step::Kernel),
            (now + REBOOT_STEP * 3, Step::Prompt),
        ]);
    }
}

/// The client's protocol version, as far as the handshake differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Version {
    V3_3,
    V3_7,
    V3_8,
}

/// The DES key VNC authentication makes of a password: its first 8 bytes,
/// zero-padded, each byte's bits reversed (the protocol's own quirk).
fn des_key(password: &str) -> [u8; 8] {
    let mut key = [0u8; 8];
    for (k, b) in key.iter_mut().zip(password.bytes()) {
        *k = b.reverse_bits();
    }
    key
}

/// The answer to a VNC authentication challenge with `password`: what a
/// client sends, and what the server expects.
pub fn vnc_response(password: &str, challenge: &[u8; 16]) -> [u8; 16] {
    use des::cipher::{BlockEncrypt, KeyInit};
    let cipher = des::Des::new(&des_key(password).into());
    let mut out = *challenge;
    for block in out.chunks_exact_mut(8) {
        cipher.encrypt_block(block.into());
    }
    out
}

/// The handshake up to ServerInit; then the session, until the client
/// goes or the link fails.
pub async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    io: S,
    guest: &GuestInfo,
    password: Option<&str>,
) -> Result<(), RfbError> {
    let (mut rd, mut wr) = tokio::io::split(io);
    handshake(&mut rd, &mut wr, guest, password).await?;
    let (tx, rx) = mpsc::channel(64);
    tokio::select! {
        read = read_messages(&mut rd, tx) => read,
        run = run(&mut wr, rx, guest) => run,
    }
}

async fn handshake<R, W>(
    rd: &mut R,
    wr: &mut W,
    guest: &GuestInfo,
    password: Option<&str>,
) -> Result<(), RfbError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    security(rd, wr, password).await?;
    let mut shared = [0u8; 1];
    rd.read_exact(&mut shared).await?;
    let name = guest.hostname.as_bytes();
    let mut init = Vec::with_capacity(24 + name.len());
    init.extend_from_slice(&WIDTH.to_be_bytes());
    init.extend_from_slice(&HEIGHT.to_be_bytes());
    init.extend_from_slice(&PixelFormat::SERVER.to_bytes());
    init.extend_from_slice(&u32::try_from(name.len()).unwrap_or(0).to_be_bytes());
    init.extend_from_slice(name);
    wr.write_all(&init).await?;
    wr.flush().await?;
    Ok(())
}

/// The server's side of the handshake up to SecurityResult: the version,
/// then None or VNC authentication with `password`.
async fn security<R, W>(rd: &mut R, wr: &mut W, password: Option<&str>) -> Result<(), RfbError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    wr.write_all(b"RFB 003.008\n").await?;
    wr.flush().await?;
    let mut version = [0u8; 12];
    rd.read_exact(&mut version).await?;
    let version = match &version {
        b"RFB 003.008\n" => Version::V3_8,
        b"RFB 003.007\n" => Version::V3_7,
        // 3.3 and what 3.3 servers must treat as it (3.4–3.6, 3.889).
        v if v.starts_with(b"RFB 003.") => Version::V3_3,
        other => {
            return Err(RfbError::Protocol(format!(
                "not an RFB client: {:?}",
                String::from_utf8_lossy(other)
            )));
        }
    };
    let offered: u8 = if password.is_some() { 2 } else { 1 };
    if version == Version::V3_3 {
        wr.write_all(&u32::from(offered).to_be_bytes()).await?;
    } else {
        wr.write_all(&[1, offered]).await?;
        wr.flush().await?;
        let mut chosen = [0u8; 1];
        rd.read_exact(&mut chosen).await?;
        if chosen[0] != offered {
            security_failed(wr, version, "Invalid security type").await?;
            return Err(RfbError::Protocol(format!(
                "the client chose security type {} of {offered}",
                chosen[0]
            )));
        }
    }
    if let Some(password) = password {
        let mut challenge = [0u8; 16];
        getrandom::fill(&mut challenge)
            .map_err(|e| std::io::Error::other(format!("no randomness: {e}")))?;
        wr.write_all(&challenge).await?;
        wr.flush().await?;
        let mut response = [0u8; 16];
        rd.read_exact(&mut response).await?;
        let expected = vnc_response(password, &challenge);
        if !bool::from(subtle::ConstantTimeEq::ct_eq(&expected[..], &response[..])) {
            security_failed(wr, version, "Authentication failed").await?;
            return Err(RfbError::AuthFailed);
        }
        wr.write_all(&0u32.to_be_bytes()).await?;
    } else if version == Version::V3_8 {
        wr.write_all(&0u32.to_be_bytes()).await?;
    }
    wr.flush().await?;
    Ok(())
}

/// VNC authentication with `password` in front of an RFB server that asks
/// for none (a real guest's QEMU): the handshake with that server is done
/// with security None, the client's with `password`, and from the
/// ClientInit on the bytes pass through.
pub fn guard<S>(server: S, password: String) -> tokio::io::DuplexStream
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (ours, theirs) = tokio::io::duplex(GUARD_BUFFER);
    tokio::spawn(async move {
        if let Err(e) = guarded(theirs, server, &password).await {
            tracing::debug!("sim: guarded VNC console ended: {e}");
        }
    });
    ours
}

/// What [`guard`] holds in flight each way.
const GUARD_BUFFER: usize = 1 << 16;

async fn guarded<C, S>(client: C, mut server: S, password: &str) -> Result<(), RfbError>
where
    C: AsyncRead + AsyncWrite + Unpin,
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut version = [0u8; 12];
    server.read_exact(&mut version).await?;
    if &version != b"RFB 003.008\n" {
        return Err(RfbError::Protocol(format!(
            "the guest's VNC server speaks {:?}",
            String::from_utf8_lossy(&version)
        )));
    }
    server.write_all(b"RFB 003.008\n").await?;
    let n = server.read_u8().await?;
    let mut types = vec![0u8; usize::from(n)];
    server.read_exact(&mut types).await?;
    if !types.contains(&1) {
        return Err(RfbError::Protocol(format!(
            "the guest's VNC server offers {types:?}, not None"
        )));
    }
    server.write_all(&[1]).await?;
    if server.read_u32().await? != 0 {
        return Err(RfbError::Protocol(
            "the guest's VNC server refused security None".into(),
        ));
    }
    let (mut rd, mut wr) = tokio::io::split(client);
    security(&mut rd, &mut wr, Some(password)).await?;
    let mut client = rd.unsplit(wr);
    tokio::io::copy_bidirectional(&mut client, &mut server).await?;
    Ok(())
}

/// SecurityResult failed, with the reason from 3.8 on.
async fn security_failed<W: AsyncWrite + Unpin>(
    wr: &mut W,
    version: Version,
    reason: &str,
) -> std::io::Result<()> {
    wr.write_all(&1u32.to_be_bytes()).await?;
    if version == Version::V3_8 {
        let len = u32::try_from(reason.len()).unwrap_or(0);
        wr.write_all(&len.to_be_bytes()).await?;
        wr.write_all(reason.as_bytes()).await?;
    }
    wr.flush().await
}

/// Reads client messages until the client closes; what the screen needs
/// goes to `tx`, the rest is read and dropped.
async fn read_messages<R: AsyncRead + Unpin>(
    rd: &mut R,
    tx: mpsc::Sender<ClientMessage>,
) -> Result<(), RfbError> {
    loop {
        let mut kind = [0u8; 1];
        if rd.read(&mut kind).await? == 0 {
            return Ok(());
        }
        let message = match kind[0] {
            0 => {
                let mut b = [0u8; 19];
                rd.read_exact(&mut b).await?;
                let mut pf = [0u8; 16];
                pf.copy_from_slice(&b[3..]);
                Some(ClientMessage::PixelFormat(PixelFormat::from_bytes(&pf)?))
            }
            2 => {
                let mut b = [0u8; 3];
                rd.read_exact(&mut b).await?;
                let n = u16::from_be_bytes([b[1], b[2]]);
                if n > ENCODINGS_MAX {
                    return Err(RfbError::Protocol(format!("{n} encodings")));
                }
                // Raw is always served, whatever the client prefers.
                let mut list = vec![0u8; usize::from(n) * 4];
                rd.read_exact(&mut list).await?;
                None
            }
            3 => {
                let mut b = [0u8; 9];
                rd.read_exact(&mut b).await?;
                let at = |i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
                Some(ClientMessage::Update {
                    incremental: b[0] != 0,
                    rect: Rect {
                        x: at(1),
                        y: at(3),
                        w: at(5),
                        h: at(7),
                    },
                })
            }
            4 => {
                let mut b = [0u8; 7];
                rd.read_exact(&mut b).await?;
                Some(ClientMessage::Key {
                    down: b[0] != 0,
                    keysym: u32::from_be_bytes([b[3], b[4], b[5], b[6]]),
                })
            }
            5 => {
                let mut b = [0u8; 5];
                rd.read_exact(&mut b).await?;
                None
            }
            6 => {
                let mut b = [0u8; 7];
                rd.read_exact(&mut b).await?;
                let len = u32::from_be_bytes([b[3], b[4], b[5], b[6]]);
                if len > CUT_TEXT_MAX {
                    return Err(RfbError::Protocol(format!("{len} bytes of cut text")));
                }
                let mut text = vec![0u8; len as usize];
                rd.read_exact(&mut text).await?;
                None
            }
            other => {
                return Err(RfbError::Protocol(format!(
                    "unknown client message type {other}"
                )));
            }
        };
        if let Some(message) = message
            && tx.send(message).await.is_err()
        {
            return Ok(());
        }
    }
}

/// The session: the client's requests answered from the guest's screen;
/// an incremental request waits for the next change (a key, a reboot step).
async fn run<W: AsyncWrite + Unpin>(
    wr: &mut W,
    mut rx: mpsc::Receiver<ClientMessage>,
    info: &GuestInfo,
) -> Result<(), RfbError> {
    let mut guest = Guest::booted(info);
    let mut pf = PixelFormat::SERVER;
    let mut waiting: Option<Rect> = None;
    loop {
        if let Some(asked) = waiting
            && let Some(changed) = guest.screen.take_dirty()
        {
            // What changed outside the asked part is not sent: a client
            // that asks for part of the screen only wants that part.
            if let Some(rect) = changed.within(asked) {
                wr.write_all(&guest.screen.update(rect, pf)).await?;
                wr.flush().await?;
                waiting = None;
            }
        }
        let next_step = guest.steps.front().map(|(at, _)| *at);
        tokio::select! {
            message = rx.recv() => match message {
                None => return Ok(()),
                Some(ClientMessage::PixelFormat(format)) => pf = format,
                Some(ClientMessage::Key { down, keysym }) => guest.key(down, keysym),
                Some(ClientMessage::Update { incremental: true, rect }) => waiting = Some(rect),
                Some(ClientMessage::Update { incremental: false, rect }) => {
                    waiting = None;
                    if let Some(rect) = rect.within(Rect::FULL) {
                        if rect.covers(Rect::FULL) {
                            guest.screen.dirty = None;
                        }
                        wr.write_all(&guest.screen.update(rect, pf)).await?;
                        wr.flush().await?;
                    }
                }
            },
            () = tokio::time::sleep_until(next_step.unwrap_or_else(Instant::now)), if next_step.is_some() => {
                if let Some((_, step)) = guest.steps.pop_front() {
                    guest.step(step);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tty::test_guest as guest;
    use super::*;

    /// A tiny RFB client: enough of the protocol to log in, set a pixel
    /// format, ask for frames and type.
    pub struct Client<S> {
        pub io: S,
        pub pf: PixelFormat,
        pub width: u16,
        pub height: u16,
        pub name: String,
        /// The framebuffer as the client holds it: one colour per pixel.
        pub frame: Vec<[u8; 3]>,
    }

    impl<S: AsyncRead + AsyncWrite + Unpin> Client<S> {
        /// The handshake with RFB 3.8; `password` answers VNC
        /// authentication. Returns the SecurityResult's reason on failure.
        pub async fn connect(mut io: S, password: Option<&str>) -> Result<Client<S>, String> {
            let mut version = [0u8; 12];
            io.read_exact(&mut version)
                .await
                .map_err(|e| e.to_string())?;
            assert_eq!(&version, b"RFB 003.008\n");
            io.write_all(b"RFB 003.008\n").await.unwrap();
            let n = io.read_u8().await.unwrap();
            let mut types = vec![0u8; usize::from(n)];
            io.read_exact(&mut types).await.unwrap();
            let chosen = types[0];
            io.write_all(&[chosen]).await.unwrap();
            if chosen == 2 {
                let mut challenge = [0u8; 16];
                io.read_exact(&mut challenge).await.unwrap();
                let response = vnc_response(password.unwrap_or(""), &challenge);
                io.write_all(&response).await.unwrap();
            } else {
                assert_eq!(chosen, 1, "offered {types:?}");
            }
            let result = io.read_u32().await.unwrap();
            if result != 0 {
                let len = io.read_u32().await.unwrap();
                let mut reason = vec![0u8; len as usize];
                io.read_exact(&mut reason).await.unwrap();
                return Err(String::from_utf8_lossy(&reason).into_owned());
            }
            io.write_all(&[1]).await.unwrap();
            let width = io.read_u16().await.unwrap();
            let height = io.read_u16().await.unwrap();
            let mut pf = [0u8; 16];
            io.read_exact(&mut pf).await.unwrap();
            let len = io.read_u32().await.unwrap();
            let mut name = vec![0u8; len as usize];
            io.read_exact(&mut name).await.unwrap();
            Ok(Client {
                io,
                pf: PixelFormat::from_bytes(&pf).unwrap(),
                width,
                height,
                name: String::from_utf8_lossy(&name).into_owned(),
                frame: vec![[0; 3]; usize::from(width) * usize::from(height)],
            })
        }

        pub async fn set_pixel_format(&mut self, pf: PixelFormat) {
            let mut msg = vec![0u8, 0, 0, 0];
            msg.extend_from_slice(&pf.to_bytes());
            self.io.write_all(&msg).await.unwrap();
            self.pf = pf;
        }

        pub async fn set_encodings(&mut self, encodings: &[i32]) {
            let mut msg = vec![2u8, 0];
            msg.extend_from_slice(&(encodings.len() as u16).to_be_bytes());
            for e in encodings {
                msg.extend_from_slice(&e.to_be_bytes());
            }
            self.io.write_all(&msg).await.unwrap();
        }

        pub async fn request(&mut self, incremental: bool) {
            let mut msg = vec![3u8, u8::from(incremental)];
            for v in [0, 0, self.width, self.height] {
                msg.extend_from_slice(&v.to_be_bytes());
            }
            self.io.write_all(&msg).await.unwrap();
        }

        pub async fn key(&mut self, keysym: u32) {
            for down in [1u8, 0] {
                let mut msg = vec![4u8, down, 0, 0];
                msg.extend_from_slice(&keysym.to_be_bytes());
                self.io.write_all(&msg).await.unwrap();
            }
        }

        pub async fn key_event(&mut self, down: bool, keysym: u32) {
            let mut msg = vec![4u8, u8::from(down), 0, 0];
            msg.extend_from_slice(&keysym.to_be_bytes());
            self.io.write_all(&msg).await.unwrap();
        }

        pub async fn type_text(&mut self, text: &str) {
            for c in text.chars() {
                self.key(c as u32).await;
            }
        }

        /// Reads one FramebufferUpdate into the frame; returns its rectangles.
        pub async fn read_update(&mut self) -> Vec<Rect> {
            let kind = self.io.read_u8().await.unwrap();
            assert_eq!(kind, 0, "a FramebufferUpdate");
            self.io.read_u8().await.unwrap();
            let n = self.io.read_u16().await.unwrap();
            let mut rects = Vec::new();
            let bytes = usize::from(self.pf.bits_per_pixel / 8);
            for _ in 0..n {
                let rect = Rect {
                    x: self.io.read_u16().await.unwrap(),
                    y: self.io.read_u16().await.unwrap(),
                    w: self.io.read_u16().await.unwrap(),
                    h: self.io.read_u16().await.unwrap(),
                };
                assert_eq!(self.io.read_i32().await.unwrap(), 0, "Raw");
                let mut pixels = vec![0u8; usize::from(rect.w) * usize::from(rect.h) * bytes];
                self.io.read_exact(&mut pixels).await.unwrap();
                for (i, pixel) in pixels.chunks_exact(bytes).enumerate() {
                    let x = usize::from(rect.x) + i % usize::from(rect.w);
                    let y = usize::from(rect.y) + i / usize::from(rect.w);
                    self.frame[y * usize::from(self.width) + x] = self.pf.decode(pixel);
                }
                rects.push(rect);
            }
            rects
        }

        /// The frame read back as text: each 8×16 cell matched against the
        /// font (what a test can compare with the lines it expects).
        pub fn screen_text(&self) -> Vec<String> {
            let w = usize::from(self.width);
            (0..usize::from(self.height) / CELL_H)
                .map(|row| {
                    let line: String = (0..w / CELL_W)
                        .map(|col| {
                            let cell: Vec<u8> = (0..8)
                                .map(|gy| {
                                    (0..8).fold(0u8, |acc, gx| {
                                        let (x, y) = (col * CELL_W + gx, row * CELL_H + gy * 2);
                                        let on = self.frame[y * w + x] != BACKGROUND;
                                        acc | (u8::from(on) << gx)
                                    })
                                })
                                .collect();
                            (0x20u8..0x7f)
                                .find(|&c| {
                                    font8x8::legacy::BASIC_LEGACY[usize::from(c)] == cell[..]
                                })
                                .map_or('?', char::from)
                        })
                        .collect();
                    line.trim_end().to_string()
                })
                .collect()
        }
    }

    /// A test's work, failed rather than hung when an awaited frame never
    /// comes.
    async fn within<F: std::future::Future>(work: F) -> F::Output {
        tokio::time::timeout(Duration::from_secs(30), work)
            .await
            .expect("the screen changed in time")
    }

    async fn session(password: Option<&'static str>) -> tokio::io::DuplexStream {
        let (client, server) = tokio::io::duplex(1 << 16);
        tokio::spawn(async move {
            let _ = serve(server, &guest(), password).await;
        });
        client
    }

    #[tokio::test]
    async fn without_a_password_security_none_gives_the_login_screen() {
        let mut c = Client::connect(session(None).await, None).await.unwrap();
        assert_eq!((c.width, c.height, c.name.as_str()), (640, 400, "web-01"));
        c.request(false).await;
        assert_eq!(c.read_update().await, [Rect::FULL]);
        let lit = c.frame.iter().filter(|p| **p == FOREGROUND).count();
        assert!(lit > 1000, "the frame shows text: {lit} pixels lit");
        let text = c.screen_text();
        assert!(
            text.iter().any(|l| l == "Debian GNU/Linux 12 web-01 tty1"),
            "{text:#?}"
        );
        assert!(text.iter().any(|l| l == "web-01 login:"), "{text:#?}");
    }

    #[tokio::test]
    async fn vnc_authentication_takes_the_password_and_refuses_another() {
        let c = Client::connect(session(Some("s3cret-ticket")).await, Some("s3cret-t"))
            .await
            .unwrap();
        assert_eq!(c.name, "web-01", "only the first 8 bytes count");
        let refused = Client::connect(session(Some("s3cret")).await, Some("guess"))
            .await
            .err();
        assert_eq!(refused.as_deref(), Some("Authentication failed"));
    }

    #[tokio::test]
    async fn a_guard_asks_for_the_password_in_front_of_a_server_that_asks_none() {
        // A real guest's QEMU offers None; the guard's client must log in.
        let guarded = guard(session(None).await, "ticket12".to_string());
        let mut c = Client::connect(guarded, Some("ticket12")).await.unwrap();
        assert_eq!(c.name, "web-01", "ServerInit passes through");
        c.request(false).await;
        assert_eq!(c.read_update().await, [Rect::FULL]);
        let refused = Client::connect(
            guard(session(None).await, "ticket12".to_string()),
            Some("nope"),
        )
        .await
        .err();
        assert_eq!(refused.as_deref(), Some("Authentication failed"));
    }

    #[test]
    fn the_des_key_is_the_password_with_each_byte_mirrored() {
        assert_eq!(des_key("ab"), [0b1000_0110, 0b0100_0110, 0, 0, 0, 0, 0, 0]);
        // DES's known answer for the all-zero key and block: an empty
        // password's response to an all-zero challenge, block by block.
        let response = vnc_response("", &[0; 16]);
        let block = [0x8c, 0xa6, 0x4d, 0xe9, 0xc1, 0xb1, 0x23, 0xa7];
        assert_eq!((&response[..8], &response[8..]), (&block[..], &block[..]));
    }

    #[tokio::test]
    async fn typed_keys_show_on_the_login_line_and_an_incremental_request_waits_for_them() {
        let mut c = Client::connect(session(None).await, None).await.unwrap();
        c.set_encodings(&[0, 1, -223, -239]).await;
        c.request(false).await;
        c.read_update().await;
        let before = c.frame.clone();
        c.request(true).await;
        c.type_text("root").await;
        // The first change answers the waiting request; the rest follow.
        let mut got = c.read_update().await;
        within(async {
            while !c.screen_text().iter().any(|l| l == "web-01 login: root") {
                c.request(true).await;
                got.extend(c.read_update().await);
            }
        })
        .await;
        assert!(
            got.iter().all(|r| r.h < HEIGHT),
            "only the changed rows are sent: {got:?}"
        );
        assert_ne!(c.frame, before);

        c.key(keysym::BACKSPACE).await;
        c.key(keysym::RETURN).await;
        let mut text = Vec::new();
        within(async {
            while !text.iter().any(|l: &String| l == "Password:") {
                c.request(true).await;
                c.read_update().await;
                text = c.screen_text();
            }
        })
        .await;
        assert!(text.iter().any(|l| l == "web-01 login: roo"), "{text:#?}");
        c.type_text("hunter2").await;
        c.key(keysym::RETURN).await;
        within(async {
            while !text.iter().any(|l| l == "Login incorrect") {
                c.request(true).await;
                c.read_update().await;
                text = c.screen_text();
            }
        })
        .await;
        assert!(!text.iter().any(|l| l.contains("hunter2")), "{text:#?}");
        assert_eq!(text.iter().filter(|l| *l == "web-01 login:").count(), 1);
    }

    #[tokio::test]
    async fn the_client_s_pixel_format_is_honoured() {
        let mut c = Client::connect(session(None).await, None).await.unwrap();
        // noVNC's own choice (32 bit, little-endian, red lowest) and a
        // big-endian 16-bit 5-6-5, each read back to the same screen.
        let novnc = PixelFormat {
            red_shift: 0,
            blue_shift: 16,
            ..PixelFormat::SERVER
        };
        c.set_pixel_format(novnc).await;
        c.request(false).await;
        c.read_update().await;
        let text = c.screen_text();
        assert!(text.iter().any(|l| l == "web-01 login:"), "{text:#?}");
        assert_eq!(novnc.encode(FOREGROUND), [0xaa, 0xaa, 0xaa, 0]);

        let rgb565 = PixelFormat {
            bits_per_pixel: 16,
            depth: 16,
            big_endian: true,
            true_colour: true,
            red_max: 31,
            green_max: 63,
            blue_max: 31,
            red_shift: 11,
            green_shift: 5,
            blue_shift: 0,
        };
        c.set_pixel_format(rgb565).await;
        c.frame.fill([0; 3]);
        c.request(false).await;
        c.read_update().await;
        assert_eq!(c.screen_text(), text);
        // 0xaa of 255 is 20 of 31 and 42 of 63: 10100 101010 10100.
        assert_eq!(rgb565.encode(FOREGROUND), [0b1010_0101, 0b0101_0100]);
    }

    #[tokio::test]
    async fn ctrl_alt_del_reboots_the_guest_on_screen() {
        let mut c = Client::connect(session(None).await, None).await.unwrap();
        c.request(false).await;
        c.read_update().await;
        c.key_event(true, keysym::CONTROL_L).await;
        c.key_event(true, keysym::ALT_L).await;
        c.key(keysym::DELETE).await;
        c.key_event(false, keysym::ALT_L).await;
        c.key_event(false, keysym::CONTROL_L).await;
        let mut seen = Vec::new();
        // Each step of the reboot answers a waiting request.
        within(async {
            loop {
                c.request(true).await;
                c.read_update().await;
                let text = c.screen_text();
                seen.extend(text.clone());
                if text.iter().any(|l| l == "web-01 login:")
                    && seen.iter().any(|l| l.starts_with("Booting from Hard Disk"))
                {
                    break;
                }
            }
        })
        .await;
        assert!(
            seen.iter()
                .any(|l| l == "[  OK  ] Reached target reboot.target - System Reboot."),
            "{seen:#?}"
        );
    }

    #[test]
    fn a_rectangle_is_cut_to_what_was_asked() {
        let band = Rect {
            x: 0,
            y: 32,
            w: WIDTH,
            h: 16,
        };
        let asked = Rect {
            x: 100,
            y: 0,
            w: 50,
            h: 40,
        };
        assert_eq!(
            band.within(asked),
            Some(Rect {
                x: 100,
                y: 32,
                w: 50,
                h: 8
            })
        );
        assert_eq!(band.within(Rect { h: 32, ..asked }), None);
    }
}
