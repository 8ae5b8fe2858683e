//! Why a command could not do its work, as the exit code tells it.

/// Why a command could not do its work.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// The server said no (4xx): its words.
    #[error("refused ({status}): {message}")]
    Refused { status: u16, message: String },
    /// The server failed (5xx).
    #[error("the server answered {status}: {message}")]
    Server { status: u16, message: String },
    #[error("cannot reach the server: {0}")]
    Unreachable(String),
    #[error("the server's answer is not what pvedeck sends: {0}")]
    Garbled(String),
    #[error("{0}")]
    Usage(String),
}
