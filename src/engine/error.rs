use crate::pve::PveError;

/// What can go wrong in the engine. The HTTP edge (`api::error`) maps each
/// kind to a status once.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Pve(#[from] PveError),
}
