//! A simulated guest's first serial port (`serial0: socket`): what
//! `qm terminal` and termproxy connect to. The kernel's console and a getty
//! run there (cloud images boot with `console=ttyS0`), so a connection
//! first sees the end of the boot, then a login prompt that echoes a name,
//! asks for a password without echo, and refuses it.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::tty::{Echo, GuestInfo, Key, Login};

/// Serves the serial line on `io` until the peer closes its side.
pub async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    mut io: S,
    guest: &GuestInfo,
) -> std::io::Result<()> {
    let mut greeting = String::new();
    for line in guest
        .boot_lines()
        .into_iter()
        .chain(guest.issue("ttyS0"))
        .chain(std::iter::once(guest.prompt()))
    {
        greeting.push_str("\r\n");
        greeting.push_str(&line);
    }
    io.write_all(greeting.as_bytes()).await?;
    io.flush().await?;

    let mut login = Login::default();
    let mut keys = KeyReader::default();
    let mut buf = [0u8; 1024];
    loop {
        let n = io.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        let mut out = Vec::new();
        for &byte in &buf[..n] {
            if let Some(key) = keys.byte(byte) {
                out.extend_from_slice(&render(login.key(key, guest)));
            }
        }
        if !out.is_empty() {
            io.write_all(&out).await?;
            io.flush().await?;
        }
    }
}

/// A terminal's bytes as keys: Enter is `\r` (a terminal in raw mode), or
/// `\n`, or both in a row counted once; DEL and BS erase.
#[derive(Debug, Default)]
struct KeyReader {
    after_cr: bool,
}

impl KeyReader {
    fn byte(&mut self, byte: u8) -> Option<Key> {
        let after_cr = std::mem::replace(&mut self.after_cr, byte == b'\r');
        match byte {
            b'\r' => Some(Key::Enter),
            b'\n' if after_cr => None,
            b'\n' => Some(Key::Enter),
            0x7f | 0x08 => Some(Key::Backspace),
            0x20..=0x7e => Some(Key::Char(char::from(byte))),
            // Other control characters and anything past ASCII: the
            // simulated getty ignores them.
            _ => None,
        }
    }
}

/// What the terminal receives for a getty's echo.
fn render(echo: Echo) -> Vec<u8> {
    match echo {
        Echo::None => Vec::new(),
        Echo::Text(text) => text.into_bytes(),
        Echo::Erase => b"\x08 \x08".to_vec(),
        Echo::Lines(lines) => lines
            .iter()
            .flat_map(|line| {
                let mut bytes = b"\r\n".to_vec();
                bytes.extend_from_slice(line.as_bytes());
                bytes
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::tty::test_guest as guest;
    use super::*;

    /// Reads until `text` has arrived; what came, or what came before EOF.
    async fn until(io: &mut tokio::io::DuplexStream, seen: &mut String, text: &str) {
        let mut buf = [0u8; 4096];
        while !seen.contains(text) {
            let n = io.read(&mut buf).await.unwrap();
            assert!(n > 0, "EOF before {text:?}; got {seen:?}");
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    }

    #[tokio::test]
    async fn the_line_shows_a_prompt_echoes_a_name_and_refuses_the_password() {
        let (mut client, server) = tokio::io::duplex(4096);
        let served = tokio::spawn(async move { serve(server, &guest()).await });
        let mut seen = String::new();
        until(&mut client, &mut seen, "\r\nweb-01 login: ").await;
        assert!(
            seen.contains("Debian GNU/Linux 12 web-01 ttyS0"),
            "{seen:?}"
        );

        seen.clear();
        client.write_all(b"rooz\x7ft\r\n").await.unwrap();
        until(&mut client, &mut seen, "Password: ").await;
        assert_eq!(seen, "rooz\x08 \x08t\r\nPassword: ");

        seen.clear();
        client.write_all(b"secret\r").await.unwrap();
        until(&mut client, &mut seen, "web-01 login: ").await;
        assert!(!seen.contains("secret"), "a password is not echoed");
        assert_eq!(seen, "\r\n\r\nLogin incorrect\r\nweb-01 login: ");

        drop(client);
        served.await.unwrap().unwrap();
    }

    #[test]
    fn cr_lf_is_one_enter_and_lf_alone_is_one_too() {
        let mut keys = KeyReader::default();
        let got: Vec<Option<Key>> = b"\r\n\n".iter().map(|&b| keys.byte(b)).collect();
        assert_eq!(got, [Some(Key::Enter), None, Some(Key::Enter)]);
        assert_eq!(keys.byte(0x1b), None, "escape is ignored");
    }
}
