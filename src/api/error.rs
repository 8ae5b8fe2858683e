//! The one place where errors become HTTP statuses and plain-text bodies.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::engine::EngineError;
use crate::pve::PveError;

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
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> ApiError {
        let status = match &e {
            EngineError::Pve(PveError::NoSuchNode(_)) => StatusCode::NOT_FOUND,
            EngineError::Pve(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError::new(status, e.to_string())
    }
}

impl From<PveError> for ApiError {
    fn from(e: PveError) -> ApiError {
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
