//! Errors as `/api2/json` answers them (pve-http-server
//! `Formatter/Standard.pm`, pve-manager `HTTPServer.pm`): the HTTP status,
//! the message's first line as the reason phrase, and in the body
//! `{"data":null,"message":"…\n"}` (plus `errors` for parameters).

use std::collections::BTreeMap;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use pvedeck_proxmox::PveError;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: u16,
    pub message: String,
    /// Per-parameter errors of a 400.
    pub errors: BTreeMap<String, String>,
    /// pveproxy's own errors (authentication) carry a plain-text body.
    pub plain: bool,
}

const PARAM_FAILED: &str = "Parameter verification failed.";

impl ApiError {
    pub fn new(status: u16, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            errors: BTreeMap::new(),
            plain: false,
        }
    }

    /// `raise_param_exc`: 400 `Parameter verification failed.`.
    pub fn param(key: &str, message: impl Into<String>) -> ApiError {
        let mut e = ApiError::new(400, PARAM_FAILED);
        e.errors.insert(key.to_string(), message.into());
        e
    }

    /// `raise_perm_exc`: `Permission check failed (/vms/101, VM.Clone)`.
    pub fn permission(path: &str, privilege: &str) -> ApiError {
        ApiError::new(
            403,
            format!("Permission check failed ({path}, {privilege})"),
        )
    }

    /// pveproxy's own refusal, before any handler: a plain-text body
    /// (an upload's body it cannot read, for one).
    pub fn proxy(status: u16, message: impl Into<String>) -> ApiError {
        ApiError {
            plain: true,
            ..ApiError::new(status, message)
        }
    }

    pub fn unauthorized(message: &str) -> ApiError {
        ApiError {
            plain: true,
            ..ApiError::new(401, message)
        }
    }

    /// A failure of the simulator's operation, in the API's terms: its
    /// parameter errors (`400 Parameter verification failed.` then
    /// `param: text` lines, or Getopt's unknown option) become a 400 with
    /// `errors`; anything else is a plain `die`, 500, verbatim.
    pub fn from_pve(e: &PveError) -> ApiError {
        let message = e.message();
        if let Some(rest) = message.strip_prefix(&format!("400 {PARAM_FAILED}\n")) {
            let mut err = ApiError::new(400, PARAM_FAILED);
            for line in rest.lines() {
                if let Some((key, text)) = line.split_once(": ") {
                    err.errors.insert(key.to_string(), text.to_string());
                }
            }
            return err;
        }
        if let Some(key) = message
            .strip_prefix("Unknown option: ")
            .and_then(|r| r.split('\n').next())
        {
            return ApiError::param(
                key,
                "property is not defined in schema and the schema does not allow additional properties",
            );
        }
        ApiError::new(500, message)
    }
}

impl From<PveError> for ApiError {
    fn from(e: PveError) -> ApiError {
        ApiError::from_pve(&e)
    }
}

/// The reason phrase: the message's first line, if it can be one.
fn reason(message: &str) -> Option<hyper::ext::ReasonPhrase> {
    let first = message.lines().next().unwrap_or_default();
    hyper::ext::ReasonPhrase::try_from(first.as_bytes().to_vec()).ok()
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let message = format!("{}\n", self.message.trim_end_matches('\n'));
        let mut response = if self.plain {
            (status, message).into_response()
        } else {
            let mut body = serde_json::json!({ "data": null, "message": message });
            if !self.errors.is_empty() {
                let errors: BTreeMap<&String, String> = self
                    .errors
                    .iter()
                    .map(|(k, v)| (k, format!("{}\n", v.trim_end_matches('\n'))))
                    .collect();
                body["errors"] = serde_json::json!(errors);
            }
            (status, axum::Json(body)).into_response()
        };
        if let Some(reason) = reason(&self.message) {
            response.extensions_mut().insert(reason);
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simulator_errors_map_to_api_errors() {
        let e = PveError::command(
            "qm create 101",
            "400 Parameter verification failed.\ncores: value must have a minimum value of 1",
            255,
        );
        let api = ApiError::from_pve(&e);
        assert_eq!(api.status, 400);
        assert_eq!(api.message, "Parameter verification failed.");
        assert_eq!(api.errors["cores"], "value must have a minimum value of 1");
        let e = PveError::command(
            "qm set",
            "Unknown option: frob\n400 unable to parse option",
            255,
        );
        assert!(ApiError::from_pve(&e).errors.contains_key("frob"));
        let e = PveError::command(
            "qm config 999",
            "Configuration file 'nodes/pve1/qemu-server/999.conf' does not exist",
            2,
        );
        let api = ApiError::from_pve(&e);
        assert_eq!(
            (api.status, api.message.as_str()),
            (
                500,
                "Configuration file 'nodes/pve1/qemu-server/999.conf' does not exist"
            )
        );
        assert_eq!(
            reason("a\nb").map(|r| r.as_bytes().to_vec()),
            Some(b"a".to_vec())
        );
    }
}
