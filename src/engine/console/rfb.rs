//! The RFB (VNC) handshake's security part, done by the relay: pvedeck
//! authenticates to the VM's VNC server (Proxmox's `vncproxy` asks for its
//! one-time ticket as a VNC password, RFC 6143 §7.2.2) and offers the
//! browser no authentication, so the ticket never leaves the server
//! (docs/security.md#consoles). After both handshakes the bytes pass as
//! they are.

use des::Des;
use des::cipher::{BlockEncrypt, KeyInit, generic_array::GenericArray};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// What the relay speaks to both sides.
pub const VERSION: &[u8; 12] = b"RFB 003.008\n";
const NONE: u8 = 1;
const VNC_AUTH: u8 = 2;

#[derive(Debug, thiserror::Error)]
pub enum RfbError {
    #[error("the VNC server closed or failed during its handshake: {0}")]
    Io(#[from] std::io::Error),
    #[error("the VNC server does not speak RFB: it began with {0:?}")]
    NotRfb(String),
    #[error("the VNC server refused the connection: {0}")]
    Refused(String),
    #[error(
        "the VNC server asks for an authentication pvedeck does not speak (security types {0:?})"
    )]
    Unsupported(Vec<u8>),
    #[error("the VNC server refused pvedeck's password: {0}")]
    AuthFailed(String),
}

async fn reason(io: &mut (impl AsyncRead + Unpin)) -> Result<String, RfbError> {
    let len = io.read_u32().await?;
    let mut text = vec![0; usize::try_from(len.min(4096)).unwrap_or(4096)];
    io.read_exact(&mut text).await?;
    Ok(String::from_utf8_lossy(&text).into_owned())
}

/// The DES key VNC authentication makes of a password: its first eight
/// bytes, each with its bits in reverse order (RFB's historic quirk).
fn vnc_key(password: &str) -> [u8; 8] {
    let mut key = [0u8; 8];
    for (k, b) in key.iter_mut().zip(password.bytes()) {
        *k = b.reverse_bits();
    }
    key
}

/// The answer to a VNC authentication challenge.
pub fn vnc_response(password: &str, challenge: &[u8; 16]) -> [u8; 16] {
    let key = vnc_key(password);
    let cipher = Des::new(GenericArray::from_slice(&key));
    let mut out = *challenge;
    for block in out.chunks_exact_mut(8) {
        cipher.encrypt_block(GenericArray::from_mut_slice(block));
    }
    out
}

/// Does the client's side of the version and security handshake with the
/// VM's VNC server: `password` for VNC authentication when it asks, none
/// otherwise. What follows on `io` is the `ClientInit`/`ServerInit` and the
/// session, the browser's to speak.
pub async fn authenticate(
    io: &mut (impl AsyncRead + AsyncWrite + Unpin),
    password: Option<&str>,
) -> Result<(), RfbError> {
    let mut version = [0u8; 12];
    io.read_exact(&mut version).await?;
    if !version.starts_with(b"RFB 003.") {
        return Err(RfbError::NotRfb(
            String::from_utf8_lossy(&version).into_owned(),
        ));
    }
    io.write_all(VERSION).await?;
    let count = io.read_u8().await?;
    if count == 0 {
        return Err(RfbError::Refused(reason(io).await?));
    }
    let mut types = vec![0u8; usize::from(count)];
    io.read_exact(&mut types).await?;
    let chosen = match password {
        Some(_) if types.contains(&VNC_AUTH) => VNC_AUTH,
        _ if types.contains(&NONE) => NONE,
        _ => return Err(RfbError::Unsupported(types)),
    };
    io.write_all(&[chosen]).await?;
    if chosen == VNC_AUTH {
        let mut challenge = [0u8; 16];
        io.read_exact(&mut challenge).await?;
        let answer = vnc_response(password.unwrap_or_default(), &challenge);
        io.write_all(&answer).await?;
    }
    io.flush().await?;
    match io.read_u32().await? {
        0 => Ok(()),
        _ => {
            let why = reason(io).await.unwrap_or_default();
            Err(RfbError::AuthFailed(why))
        }
    }
}

/// What the relay tells the browser after its version: one security type,
/// none.
pub const SECURITY_TYPES: [u8; 2] = [1, NONE];
/// `SecurityResult`: OK.
pub const SECURITY_OK: [u8; 4] = [0, 0, 0, 0];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vnc_key_reverses_each_byte_and_pads_to_eight() {
        assert_eq!(vnc_key("a"), [0x86, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(vnc_key("PVE:ticket::123").len(), 8);
        assert_eq!(vnc_key("PVE:tick")[0], b'P'.reverse_bits());
    }

    #[test]
    fn the_response_is_des_of_the_challenge() {
        let answer = vnc_response("password", &[0; 16]);
        assert_eq!(
            &answer[..8],
            &answer[8..],
            "ECB: equal blocks, equal answers"
        );
        assert_ne!(answer, [0; 16]);
        assert_ne!(vnc_response("passwore", &[0; 16]), answer);
    }

    /// A VNC server's side, as far as the handshake goes.
    async fn server(
        mut io: tokio::io::DuplexStream,
        types: Vec<u8>,
        password: Option<&'static str>,
    ) -> std::io::Result<u8> {
        io.write_all(b"RFB 003.008\n").await?;
        let mut version = [0u8; 12];
        io.read_exact(&mut version).await?;
        io.write_all(&[types.len() as u8]).await?;
        io.write_all(&types).await?;
        let chosen = io.read_u8().await?;
        let ok = if chosen == VNC_AUTH {
            let challenge = [7u8; 16];
            io.write_all(&challenge).await?;
            let mut answer = [0u8; 16];
            io.read_exact(&mut answer).await?;
            answer == vnc_response(password.unwrap_or_default(), &challenge)
        } else {
            true
        };
        if ok {
            io.write_all(&[0, 0, 0, 0]).await?;
        } else {
            io.write_all(&[0, 0, 0, 1, 0, 0, 0, 3]).await?;
            io.write_all(b"bad").await?;
        }
        Ok(chosen)
    }

    #[tokio::test]
    async fn vnc_authentication_with_the_ticket_and_none_without() {
        let (mut client, far) = tokio::io::duplex(1024);
        let served = tokio::spawn(server(far, vec![VNC_AUTH], Some("PVE:t1")));
        authenticate(&mut client, Some("PVE:t1")).await.unwrap();
        assert_eq!(served.await.unwrap().unwrap(), VNC_AUTH);

        let (mut client, far) = tokio::io::duplex(1024);
        let served = tokio::spawn(server(far, vec![NONE], None));
        authenticate(&mut client, None).await.unwrap();
        assert_eq!(served.await.unwrap().unwrap(), NONE);

        let (mut client, far) = tokio::io::duplex(1024);
        tokio::spawn(server(far, vec![VNC_AUTH], Some("right")));
        let wrong = authenticate(&mut client, Some("wrong")).await;
        assert!(
            matches!(&wrong, Err(RfbError::AuthFailed(m)) if m == "bad"),
            "{wrong:?}"
        );

        let (mut client, far) = tokio::io::duplex(1024);
        tokio::spawn(server(far, vec![VNC_AUTH], None));
        let unsupported = authenticate(&mut client, None).await;
        assert!(
            matches!(&unsupported, Err(RfbError::Unsupported(t)) if t == &vec![VNC_AUTH]),
            "{unsupported:?}"
        );
    }
}
