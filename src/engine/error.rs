use pvedeck_domain::request::Refusal;
use pvedeck_proxmox::PveError;

use crate::store::StoreError;

/// What can go wrong in the engine. The HTTP edge (`api::error`) and the
/// server functions map each kind to a status once.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The request itself is wrong (a field, a precondition): 400.
    #[error("{0}")]
    BadRequest(String),
    /// No such VM, job or node: 404.
    #[error("{0}")]
    NotFound(String),
    /// The cluster is in a state that forbids it right now (a lock, an id
    /// taken): 409.
    #[error("{0}")]
    Conflict(String),
    /// The client may not change anything (`ALLOW_IPS`): 403.
    #[error("{0}")]
    Forbidden(String),
    /// A valid token is needed (`API_TOKENS`): 401.
    #[error("{0}")]
    Unauthorized(String),
    /// pvedeck itself failed (no randomness for a session id): 500.
    #[error("{0}")]
    Internal(String),
    /// pvedeck is stopping and starts no new job: 503.
    #[error("{0}")]
    Unavailable(String),
    /// Too many failed logins from the client's address: 429.
    #[error("{0}")]
    TooMany(String),
    /// Proxmox refused (500), did not answer in time (504), or printed what
    /// pvedeck cannot read (500).
    #[error(transparent)]
    Pve(#[from] PveError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl EngineError {
    pub fn bad(msg: impl Into<String>) -> EngineError {
        EngineError::BadRequest(msg.into())
    }
}

impl From<Refusal> for EngineError {
    fn from(refusal: Refusal) -> EngineError {
        EngineError::BadRequest(refusal.0)
    }
}
