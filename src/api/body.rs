//! Request bodies, read at the edge: each route's wire type
//! (`pvedeck_domain::request`) is decoded from JSON and checked against the server's
//! limits; the handler gets the checked value. A refusal is a 400 naming
//! the field, and nothing has run.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use serde::de::DeserializeOwned;

use pvedeck_domain::request::Body;

use super::ApiError;
use super::AppState;
use crate::engine::EngineError;

/// A body of type `T`, checked.
pub struct Checked<T: Body>(pub T::Checked);

impl<T> FromRequest<AppState> for Checked<T>
where
    T: Body + Send,
    T::Checked: Send,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        // A body that cannot be read (too large: 413) keeps axum's status.
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(|e| ApiError::new(e.status(), e.body_text()))?;
        let body: T = decode(&bytes)?;
        let checked = body
            .check(state.engine.limits())
            .map_err(EngineError::from)?;
        Ok(Checked(checked))
    }
}

/// JSON into a wire type. The wire types take any value in any field (the
/// check names what is wrong), so only the document itself can be refused
/// here.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let object = bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
    let not_object = || ApiError::bad("request body must be a JSON object");
    match serde_json::from_slice::<T>(bytes) {
        Err(e) if e.is_syntax() || e.is_eof() => Err(ApiError::bad(format!(
            "request body is not valid JSON: {e}"
        ))),
        _ if !object => Err(not_object()),
        Ok(body) => Ok(body),
        Err(e) => Err(ApiError::bad(without_position(&e))),
    }
}

/// serde_json's message without its ` at line 1 column 9`.
fn without_position(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let position = format!(" at line {} column {}", e.line(), e.column());
    text.strip_suffix(&position).unwrap_or(&text).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use pvedeck_domain::request::{InstallBody, SetCpu};

    fn refused<T: DeserializeOwned>(body: &str) -> String {
        match decode::<T>(body.as_bytes()) {
            Ok(_) => panic!("{body} was accepted"),
            Err(e) => e.message,
        }
    }

    #[test]
    fn only_json_objects_are_bodies() {
        assert!(refused::<InstallBody>("{").starts_with("request body is not valid JSON: "));
        assert!(refused::<InstallBody>("").starts_with("request body is not valid JSON: "));
        assert_eq!(
            refused::<InstallBody>("[1]"),
            "request body must be a JSON object"
        );
        assert_eq!(refused::<SetCpu>("4"), "request body must be a JSON object");
        assert_eq!(
            refused::<SetCpu>("null"),
            "request body must be a JSON object"
        );
        assert_eq!(
            refused::<SetCpu>(r#"{"cpu":1,"cpu":2}"#),
            "duplicate field `cpu`"
        );
        assert!(decode::<SetCpu>(br#" {"cpu":"four","other":[1,{"a":2}]}"#).is_ok());
    }
}

/// Property tests: any bytes sent as a body are a wire type or a 400 with
/// a message — never a panic, never a non-object taken for a body.
#[cfg(test)]
mod fuzz {
    use axum::http::StatusCode;
    use proptest::prelude::*;
    use pvedeck_domain::request::{InstallBody, SetCpu, SetDisk, SetMemory, SetNode, TemplateBody};

    use super::*;
    use pvedeck_testkit::{config, json_value, output};

    const SEEDS: &[&str] = &[
        r#"{"os":"debian","version":"12","name":"web","id":106,"node":"pve2","cpu":4,"ram":4096,"disk":"32G","user":"debian","passwd":"pw","pubkey":"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl me@host","method":"clone"}"#,
        r#"{"os":"ubuntu","version":24.04}"#,
        r#"{"cpu":4}"#,
        r#"{"memory":8192}"#,
        r#"{"disk":"10G"}"#,
        r#"{"node":"pve2"}"#,
    ];

    fn body() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            output(SEEDS).prop_map(String::into_bytes),
            json_value().prop_map(|v| v.to_string().into_bytes()),
            prop::collection::vec(any::<u8>(), 0..100),
            // Nested past serde_json's depth limit.
            (1usize..400, prop::sample::select(&["[", "{\"a\":"][..]))
                .prop_map(|(n, open)| open.repeat(n).into_bytes()),
        ]
    }

    /// `decode` of `bytes` as `T`: a body exactly when it is an object
    /// that reads as `T`, else a 400 that says why.
    fn decoded_as<T: DeserializeOwned>(bytes: &[u8]) -> Result<(), TestCaseError> {
        let object = bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
        let reads = serde_json::from_slice::<T>(bytes).is_ok();
        match decode::<T>(bytes) {
            Ok(_) => prop_assert!(object && reads),
            Err(e) => {
                prop_assert!(!(object && reads));
                prop_assert_eq!(e.status, StatusCode::BAD_REQUEST);
                prop_assert!(!e.message.is_empty());
            }
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(config(3000))]

        #[test]
        fn any_bytes_are_a_body_or_a_400(bytes in body()) {
            decoded_as::<InstallBody>(&bytes)?;
            decoded_as::<TemplateBody>(&bytes)?;
            decoded_as::<SetCpu>(&bytes)?;
            decoded_as::<SetMemory>(&bytes)?;
            decoded_as::<SetDisk>(&bytes)?;
            decoded_as::<SetNode>(&bytes)?;
        }
    }
}
