//! The one place where errors become HTTP statuses and plain-text bodies.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use pvedeck_proxmox::PveError;

use crate::engine::EngineError;
use crate::store::StoreError;

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
        }
    }

    pub fn bad(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, message)
    }
}

/// The status and text an engine error answers with, on `/api` and in the
/// UI's server functions alike.
pub fn status_of(e: &EngineError) -> (StatusCode, String) {
    let status = match e {
        EngineError::BadRequest(_) => StatusCode::BAD_REQUEST,
        EngineError::NotFound(_) | EngineError::Pve(PveError::NoSuchNode(_)) => {
            StatusCode::NOT_FOUND
        }
        EngineError::Conflict(_) => StatusCode::CONFLICT,
        EngineError::Forbidden(_) => StatusCode::FORBIDDEN,
        EngineError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
        EngineError::TooMany(_) => StatusCode::TOO_MANY_REQUESTS,
        EngineError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        // PostgreSQL out of reach: try again later, nothing was done.
        EngineError::Store(store) if store.is_unavailable() => StatusCode::SERVICE_UNAVAILABLE,
        EngineError::Pve(PveError::Timeout { .. }) => StatusCode::GATEWAY_TIMEOUT,
        EngineError::Pve(_) | EngineError::Store(_) | EngineError::Internal(_) => {
            StatusCode::INTERNAL_SERVER_ERROR
        }
    };
    let message = match e {
        EngineError::Pve(PveError::Command {
            command, message, ..
        }) => format!("{command}: {}", crate::engine::one_line(message)),
        other => other.to_string(),
    };
    (status, message)
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> ApiError {
        let (status, message) = status_of(&e);
        ApiError::new(status, message)
    }
}

impl From<PveError> for ApiError {
    fn from(e: PveError) -> ApiError {
        EngineError::from(e).into()
    }
}

impl From<crate::jobs::FollowError> for ApiError {
    fn from(e: crate::jobs::FollowError) -> ApiError {
        match e {
            crate::jobs::FollowError::Store(e) => e.into(),
            crate::jobs::FollowError::Busy(why) => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, why)
            }
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        EngineError::from(e).into()
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::warn!(status = self.status.as_u16(), "{}", self.message);
        }
        (self.status, self.message).into_response()
    }
}
