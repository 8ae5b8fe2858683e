//! The guest lane's console stage: a real guest's serial and graphical
//! consoles through pvedeck's `/api/vm/:id/console`, as a script opens
//! them. The WebSocket is written out here (RFC 6455: one handshake,
//! unfragmented binary frames, masked from the client) as the lane's HTTP
//! client is: no client crate in the xtask's tree for one stage.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::http;

/// Ample for a TCG guest's getty to answer, or its screen to come.
const WAIT: Duration = Duration::from_secs(60);

/// A console's WebSocket.
pub struct Socket {
    stream: TcpStream,
    /// Bytes read past what was asked for (frames, or the RFB stream).
    frames: Vec<u8>,
    data: Vec<u8>,
}

impl Socket {
    /// Opens `path` on `addr`; a refusal is its status line and body.
    pub fn open(addr: &str, path: &str) -> Result<Socket, String> {
        let mut stream = http::connect(addr)?;
        stream
            .set_read_timeout(Some(WAIT))
            .map_err(|e| format!("timeout: {e}"))?;
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: cHZlZGVjay1ndWVzdC1sYW5l\r\nSec-WebSocket-Version: 13\r\n\
             Sec-WebSocket-Protocol: binary\r\n\r\n"
        )
        .map_err(|e| format!("send: {e}"))?;
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            match stream.read(&mut byte) {
                Ok(1) => head.push(byte[0]),
                Ok(_) => break,
                Err(e) => return Err(format!("{path}: the answer: {e}")),
            }
        }
        let head = String::from_utf8_lossy(&head).into_owned();
        if !head.starts_with("HTTP/1.1 101") {
            let mut rest = String::new();
            let _ = stream.take(4096).read_to_string(&mut rest);
            let status = head.lines().next().unwrap_or_default();
            return Err(format!("{path}: {status} {}", rest.trim()));
        }
        Ok(Socket {
            stream,
            frames: Vec::new(),
            data: Vec::new(),
        })
    }

    fn fill(&mut self, want: usize) -> Result<(), String> {
        let mut buf = [0u8; 16 * 1024];
        while self.frames.len() < want {
            let n = self
                .stream
                .read(&mut buf)
                .map_err(|e| format!("the console: {e}"))?;
            if n == 0 {
                return Err("the console ended".into());
            }
            self.frames.extend_from_slice(&buf[..n]);
        }
        Ok(())
    }

    /// The next message's payload; a close frame is an error with its reason.
    fn message(&mut self) -> Result<Vec<u8>, String> {
        loop {
            self.fill(2)?;
            let (opcode, short) = (self.frames[0] & 0x0f, usize::from(self.frames[1] & 0x7f));
            let (len, at) = match short {
                126 => {
                    self.fill(4)?;
                    (
                        usize::from(u16::from_be_bytes([self.frames[2], self.frames[3]])),
                        4,
                    )
                }
                127 => {
                    self.fill(10)?;
                    let mut n = [0u8; 8];
                    n.copy_from_slice(&self.frames[2..10]);
                    let len = usize::try_from(u64::from_be_bytes(n))
                        .map_err(|_| "a frame too large".to_string())?;
                    (len, 10)
                }
                n => (n, 2),
            };
            self.fill(at + len)?;
            let payload: Vec<u8> = self.frames.drain(..at + len).skip(at).collect();
            match opcode {
                0x8 => {
                    let reason = payload.get(2..).unwrap_or_default();
                    return Err(format!(
                        "the console closed: {}",
                        String::from_utf8_lossy(reason)
                    ));
                }
                0x9 => self.frame(0xA, &payload)?,
                0xA => {}
                _ => return Ok(payload),
            }
        }
    }

    /// `n` bytes of the console's stream.
    pub fn read(&mut self, n: usize) -> Result<Vec<u8>, String> {
        while self.data.len() < n {
            let more = self.message()?;
            self.data.extend_from_slice(&more);
        }
        Ok(self.data.drain(..n).collect())
    }

    /// Reads until `text` has come (within [`WAIT`]); what came.
    pub fn until(&mut self, text: &str) -> Result<String, String> {
        let deadline = Instant::now() + WAIT;
        let mut seen = String::from_utf8_lossy(&std::mem::take(&mut self.data)).into_owned();
        while !seen.contains(text) {
            if Instant::now() > deadline {
                return Err(format!("no {text:?} within {WAIT:?}: {seen:?}"));
            }
            seen.push_str(&String::from_utf8_lossy(&self.message()?));
        }
        Ok(seen)
    }

    fn frame(&mut self, opcode: u8, payload: &[u8]) -> Result<(), String> {
        const MASK: [u8; 4] = [0x5a, 0x17, 0xc3, 0x08];
        let mut frame = vec![0x80 | opcode];
        match payload.len() {
            n if n < 126 => frame.push(0x80 | n as u8),
            n => {
                let n = u16::try_from(n).map_err(|_| "a message too large".to_string())?;
                frame.push(0x80 | 126);
                frame.extend_from_slice(&n.to_be_bytes());
            }
        }
        frame.extend_from_slice(&MASK);
        frame.extend(payload.iter().zip(MASK.iter().cycle()).map(|(b, m)| b ^ m));
        self.stream
            .write_all(&frame)
            .map_err(|e| format!("send: {e}"))
    }

    pub fn send(&mut self, data: &[u8]) -> Result<(), String> {
        self.frame(0x2, data)
    }
}

/// The serial console: Enter brings the getty's prompt. Its last line.
pub fn serial(addr: &str, vmid: u32) -> Result<String, String> {
    let mut socket = Socket::open(addr, &format!("/api/vm/{vmid}/console?kind=serial"))?;
    socket.send(b"\r")?;
    let seen = socket.until("login:")?;
    Ok(seen
        .lines()
        .rev()
        .find(|l| l.contains("login:"))
        .unwrap_or_default()
        .trim()
        .to_string())
}

/// What the graphical console showed.
pub struct Screen {
    pub width: u16,
    pub height: u16,
    pub name: String,
    /// Pixels of the first full frame that are not black.
    pub lit: usize,
}

/// The graphical console: RFB 3.8 with the security type pvedeck offers
/// (None: it answered QEMU's VNC password itself), the server's init, and
/// one full frame in Raw (no other encoding is asked for).
pub fn graphical(addr: &str, vmid: u32) -> Result<Screen, String> {
    let mut socket = Socket::open(addr, &format!("/api/vm/{vmid}/console"))?;
    let version = socket.read(12)?;
    if version != b"RFB 003.008\n" {
        return Err(format!("not RFB 3.8: {version:?}"));
    }
    socket.send(b"RFB 003.008\n")?;
    let count = socket.read(1)?[0];
    let types = socket.read(usize::from(count))?;
    if !types.contains(&1) {
        return Err(format!("security types {types:?} offer no None"));
    }
    socket.send(&[1])?;
    if socket.read(4)? != [0, 0, 0, 0] {
        return Err("security result: failed".into());
    }
    socket.send(&[1])?; // ClientInit, shared
    let init = socket.read(24)?;
    let width = u16::from_be_bytes([init[0], init[1]]);
    let height = u16::from_be_bytes([init[2], init[3]]);
    let bytes_per_pixel = usize::from(init[4] / 8);
    let name_len = u32::from_be_bytes([init[20], init[21], init[22], init[23]]);
    let name = socket.read(name_len.min(4096) as usize)?;
    let mut request = vec![3, 0, 0, 0, 0, 0];
    request.extend_from_slice(&width.to_be_bytes());
    request.extend_from_slice(&height.to_be_bytes());
    socket.send(&request)?;
    let mut lit = 0;
    loop {
        let header = socket.read(4)?;
        match header[0] {
            0 => {}
            // A bell or a cut text before the frame: not expected of QEMU
            // unasked, and not worth parsing here.
            other => return Err(format!("server message {other} before the frame")),
        }
        let rects = u16::from_be_bytes([header[2], header[3]]);
        let mut covered = 0usize;
        for _ in 0..rects {
            let rect = socket.read(12)?;
            let (w, h) = (
                usize::from(u16::from_be_bytes([rect[4], rect[5]])),
                usize::from(u16::from_be_bytes([rect[6], rect[7]])),
            );
            let encoding = i32::from_be_bytes([rect[8], rect[9], rect[10], rect[11]]);
            if encoding != 0 {
                return Err(format!("encoding {encoding}: only Raw was asked for"));
            }
            let pixels = socket.read(w * h * bytes_per_pixel)?;
            lit += pixels
                .chunks(bytes_per_pixel.max(1))
                .filter(|p| p.iter().any(|&b| b > 0x20))
                .count();
            covered += w * h;
        }
        if covered > 0 {
            break;
        }
    }
    Ok(Screen {
        width,
        height,
        name: String::from_utf8_lossy(&name).into_owned(),
        lit,
    })
}
