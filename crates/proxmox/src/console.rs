//! A VM's console as the port gives it: a byte stream to relay.
//!
//! Each backend opens it its own way (docs/backends.md#consoles): the `api`
//! backend through `vncproxy`/`termproxy` and the `vncwebsocket` upgrade,
//! the `cli` backend through `ssh root@node qm vncproxy|terminal`, the
//! simulator from its own RFB server and serial line. What reaches the relay
//! is the same for all: for [`ConsoleKind::Vnc`] an RFB stream from its
//! first byte (the server's version line), whose security handshake the
//! relay completes with [`ConsoleStream::password`]; for
//! [`ConsoleKind::Serial`] the terminal's bytes both ways.

use tokio::io::{AsyncRead, AsyncWrite};

/// Which console of a VM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConsoleKind {
    /// The graphical console: QEMU's VNC server.
    Vnc,
    /// The first serial port (`serial0: socket`).
    Serial,
}

impl ConsoleKind {
    pub fn name(self) -> &'static str {
        match self {
            ConsoleKind::Vnc => "vnc",
            ConsoleKind::Serial => "serial",
        }
    }

    pub fn parse(text: &str) -> Option<ConsoleKind> {
        match text {
            "vnc" => Some(ConsoleKind::Vnc),
            "serial" => Some(ConsoleKind::Serial),
            _ => None,
        }
    }
}

/// Both halves of a console's stream.
pub trait ConsoleIo: AsyncRead + AsyncWrite + Unpin + Send {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send> ConsoleIo for T {}

/// An open console.
pub struct ConsoleStream {
    pub io: Box<dyn ConsoleIo>,
    /// The VNC password the RFB server will ask for (the `api` backend's
    /// one-time ticket); `None` when it offers no authentication.
    pub password: Option<String>,
}

impl std::fmt::Debug for ConsoleStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsoleStream")
            .field("password", &self.password.as_ref().map(|_| "…"))
            .finish_non_exhaustive()
    }
}
