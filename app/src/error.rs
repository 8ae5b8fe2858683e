//! The error server functions answer with.

use serde::{Deserialize, Serialize};

/// A refusal or failure as the UI shows it: the HTTP status the API would
/// have answered and the message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UiError {
    pub status: u16,
    pub message: String,
}

impl std::fmt::Display for UiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for UiError {}

impl leptos::server_fn::error::FromServerFnError for UiError {
    type Encoder = crate::codec::JsonText;

    fn from_server_fn_error(value: leptos::server_fn::error::ServerFnErrorErr) -> Self {
        UiError {
            status: 500,
            message: value.to_string(),
        }
    }
}
