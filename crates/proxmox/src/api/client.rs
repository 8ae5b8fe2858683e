//! One keep-alive HTTPS client for the whole process, speaking
//! `/api2/json` with an API token.
//!
//! Proxmox reports a failure with the HTTP status, its message as the
//! status line's reason phrase and — since libpve-http-server-perl 5.2 —
//! also as `message` in the body; a parameter error adds `errors`
//! (`{"param": "why"}`). The message shown is the body's, else the reason
//! phrase, with the parameter errors as `qm` prints them (`param: why`), so
//! the engine's classifications of `qm`'s messages hold for both backends.
//!
//! Retries only where they cannot do anything twice: a GET, or any request
//! whose connection never opened. A create, clone or other POST that may
//! have reached Proxmox is never sent again.

use std::time::Duration;

use pvedeck_config::pve_api::{ApiSettings, Fingerprint, Trust, token_shape};
use pvedeck_support::sync::lock;
use reqwest::Body;
use reqwest::header::{AUTHORIZATION, HeaderValue};
use reqwest::multipart::{Form, Part};
use serde_json::Value;

use super::pin::{Seen, client_config};
use crate::PveError;

/// Why the client could not be made.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("PVE_API_TOKEN is not a token (user@realm!tokenid=secret)")]
    Token,
    #[error("cannot set up TLS for the Proxmox API: {0}")]
    Tls(String),
}

/// The HTTP methods pvedeck uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Get,
    Post,
    Put,
    Delete,
}

impl Method {
    fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Delete => "DELETE",
        }
    }
}

/// Attempts for a request that may be repeated (network failures only).
const ATTEMPTS: u32 = 3;
/// A single call's limit; long operations are tasks, polled in short calls.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// An image upload's limit (gigabytes over a slow link).
const UPLOAD_TIMEOUT: Duration = Duration::from_secs(4 * 3600);

/// A file as a stream of chunks, read as the upload goes (256 KiB at a
/// time: `Body::from(File)` would read 4 KiB ones).
fn file_chunks(
    file: tokio::fs::File,
) -> impl futures_util::Stream<Item = Result<bytes::Bytes, std::io::Error>> {
    // After a read error the stream ends: the upload fails with it.
    futures_util::stream::unfold(Some(file), |file| async move {
        use tokio::io::AsyncReadExt;
        let mut file = file?;
        let mut buf = vec![0u8; 256 * 1024];
        match file.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok(bytes::Bytes::from(buf)), Some(file)))
            }
            Err(e) => Some((Err(e), None)),
        }
    })
}

pub struct ApiClient {
    http: reqwest::Client,
    base: String,
    auth: HeaderValue,
    trust: Trust,
    seen: Seen,
}

impl std::fmt::Debug for ApiClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiClient")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

impl ApiClient {
    pub fn new(settings: &ApiSettings) -> Result<ApiClient, SetupError> {
        if !token_shape(settings.token.expose()) {
            return Err(SetupError::Token);
        }
        let mut auth = HeaderValue::try_from(format!("PVEAPIToken={}", settings.token.expose()))
            .map_err(|_| SetupError::Token)?;
        // Kept out of any debug output of the request.
        auth.set_sensitive(true);
        let seen = Seen::default();
        let tls = client_config(&settings.trust, seen.clone())
            .map_err(|e| SetupError::Tls(e.to_string()))?;
        let http = reqwest::Client::builder()
            .use_preconfigured_tls(tls)
            .timeout(CALL_TIMEOUT)
            .connect_timeout(Duration::from_secs(10))
            .pool_idle_timeout(Duration::from_secs(20))
            .build()
            .map_err(|e| SetupError::Tls(e.to_string()))?;
        Ok(ApiClient {
            http,
            base: settings.url.trim_end_matches('/').to_string(),
            auth,
            trust: settings.trust.clone(),
            seen,
        })
    }

    /// `https://<host>:8006/api2/json`.
    pub(super) fn base(&self) -> &str {
        &self.base
    }

    pub(super) fn trust(&self) -> &Trust {
        &self.trust
    }

    pub(super) fn seen(&self) -> &Seen {
        &self.seen
    }

    /// The token's `Authorization` header.
    pub(super) fn authorization(&self) -> &HeaderValue {
        &self.auth
    }

    pub async fn get(&self, path: &str, query: &[(&str, String)]) -> Result<Value, PveError> {
        self.call(Method::Get, path, query).await
    }

    /// A `get` whose answer a guest writes (the agent's `exec-status`):
    /// an answer past `limit` bytes is refused, not read.
    pub async fn get_bounded(
        &self,
        path: &str,
        query: &[(&str, String)],
        limit: usize,
    ) -> Result<Value, PveError> {
        self.call_whole(Method::Get, path, query, limit)
            .await
            .map(data)
    }

    /// A page of a paged listing (`start`/`limit`): its entries and the
    /// `total` Proxmox counts beside them (pve-manager `PVE/API2/Tasks.pm`,
    /// `read_task_log`: `set_result_attrib('total', …)`).
    pub async fn get_page(
        &self,
        path: &str,
        query: &[(&str, String)],
    ) -> Result<(Value, Option<u64>), PveError> {
        let whole = self
            .call_whole(Method::Get, path, query, ANSWER_LIMIT)
            .await?;
        let total = whole.get("total").and_then(Value::as_u64);
        Ok((data(whole), total))
    }

    pub async fn post(&self, path: &str, params: &[(&str, String)]) -> Result<Value, PveError> {
        self.call(Method::Post, path, params).await
    }

    pub async fn put(&self, path: &str, params: &[(&str, String)]) -> Result<Value, PveError> {
        self.call(Method::Put, path, params).await
    }

    pub async fn delete(&self, path: &str, query: &[(&str, String)]) -> Result<Value, PveError> {
        self.call(Method::Delete, path, query).await
    }

    /// `POST …/upload`: `fields`, then the file as the `filename` part of
    /// a multipart form, streamed from disk with its length announced
    /// (pveproxy spools an upload to disk as it comes). Never repeated.
    pub async fn upload(
        &self,
        path: &str,
        fields: &[(&str, &str)],
        name: &str,
        file: &std::path::Path,
        size: u64,
    ) -> Result<Value, PveError> {
        let shown = format!("POST {path}");
        let opened = tokio::fs::File::open(file)
            .await
            .map_err(|e| PveError::Command {
                command: shown.clone(),
                message: format!("cannot read {}: {e}", file.display()),
                exit: None,
            })?;
        let file_part = Part::stream_with_length(Body::wrap_stream(file_chunks(opened)), size)
            .file_name(name.to_string())
            .mime_str("application/octet-stream")
            .map_err(|e| self.network_error(&shown, &e))?;
        // The names as they are (pveproxy reads no `filename*=` form), the
        // fields before the file, as pveproxy wants them; every part's
        // length is known, so the form's is announced (pveproxy takes no
        // upload without it).
        let form = fields
            .iter()
            .fold(Form::new().percent_encode_noop(), |form, (key, value)| {
                form.text(key.to_string(), value.to_string())
            })
            .part("filename", file_part);
        let response = self
            .http
            .post(format!("{}{path}", self.base))
            .header(AUTHORIZATION, self.auth.clone())
            .timeout(UPLOAD_TIMEOUT)
            .multipart(form)
            .send()
            .await
            .map_err(|e| self.network_error(&shown, &e))?;
        answer_whole(&shown, response, ANSWER_LIMIT).await.map(data)
    }

    /// One call: the answer's `data`, or the error in Proxmox's words.
    async fn call(
        &self,
        method: Method,
        path: &str,
        params: &[(&str, String)],
    ) -> Result<Value, PveError> {
        self.call_whole(method, path, params, ANSWER_LIMIT)
            .await
            .map(data)
    }

    /// One call: the whole answer (`data` and its attributes, such as
    /// `total`), or the error in Proxmox's words.
    async fn call_whole(
        &self,
        method: Method,
        path: &str,
        params: &[(&str, String)],
        limit: usize,
    ) -> Result<Value, PveError> {
        let shown = format!("{} {path}", method.as_str());
        let mut attempt = 1;
        loop {
            let url = format!("{}{path}", self.base);
            let request = match method {
                Method::Get => self.http.get(&url).query(params),
                Method::Delete => self.http.delete(&url).query(params),
                Method::Post => self.http.post(&url).form(params),
                Method::Put => self.http.put(&url).form(params),
            };
            match request
                .header(AUTHORIZATION, self.auth.clone())
                .send()
                .await
            {
                Ok(response) => return answer_whole(&shown, response, limit).await,
                Err(e) => {
                    let again = method == Method::Get || e.is_connect();
                    if !again || attempt >= ATTEMPTS || self.refused_certificate().is_some() {
                        return Err(self.network_error(&shown, &e));
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt))).await;
            attempt += 1;
        }
    }

    /// The pin and the other certificate the server presented, when the
    /// last connection failed on it.
    fn refused_certificate(&self) -> Option<(Fingerprint, Fingerprint)> {
        let seen = (*lock(&self.seen))?;
        match &self.trust {
            Trust::Pinned(pin) if seen != *pin => Some((*pin, seen)),
            _ => None,
        }
    }

    fn network_error(&self, shown: &str, e: &reqwest::Error) -> PveError {
        let message = match self.refused_certificate() {
            Some((pin, seen)) => format!(
                "PVE_API_FINGERPRINT does not match the server's certificate \
                 (expected {pin}, the server presents {seen})"
            ),
            None => {
                let mut why = e.to_string();
                let mut source = std::error::Error::source(e);
                while let Some(inner) = source {
                    why = format!("{why}: {inner}");
                    source = inner.source();
                }
                format!(
                    "cannot reach the Proxmox API at {} (PVE_API_URL): {why}",
                    self.base
                )
            }
        };
        PveError::Command {
            command: shown.to_string(),
            message,
            exit: None,
        }
    }
}

/// An answer's `data` (null when it has none).
fn data(mut whole: Value) -> Value {
    whole
        .get_mut("data")
        .map(Value::take)
        .unwrap_or(Value::Null)
}

/// The largest answer read from Proxmox: `/cluster/resources` of a large
/// cluster is megabytes; past this, something is wrong, and pvedeck does not
/// hold it.
const ANSWER_LIMIT: usize = crate::output::Limits::PROXMOX.kept;

/// The body, read chunk by chunk, refused once it passes `limit` bytes.
async fn bounded_body(
    shown: &str,
    mut response: reqwest::Response,
    limit: usize,
) -> Result<Vec<u8>, PveError> {
    let broke = |e: reqwest::Error| PveError::Command {
        command: shown.to_string(),
        message: format!("the answer broke off: {e}"),
        exit: None,
    };
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(broke)? {
        if body.len() + chunk.len() > limit {
            return Err(PveError::Command {
                command: shown.to_string(),
                message: format!("the answer is larger than {limit} bytes: not read"),
                exit: None,
            });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The answer as a JSON object (`data` and its attributes), or the error.
async fn answer_whole(
    shown: &str,
    response: reqwest::Response,
    limit: usize,
) -> Result<Value, PveError> {
    let status = response.status();
    let reason = response
        .extensions()
        .get::<hyper::ext::ReasonPhrase>()
        .map(|r| String::from_utf8_lossy(r.as_bytes()).into_owned())
        .or_else(|| status.canonical_reason().map(str::to_string))
        .unwrap_or_default();
    let body = bounded_body(shown, response, limit).await?;
    let json: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if status.is_success() {
        return match json {
            whole @ Value::Object(_) => Ok(whole),
            _ => Err(PveError::Parse {
                command: shown.to_string(),
                detail: "the answer is not a JSON object".to_string(),
            }),
        };
    }
    Err(PveError::Command {
        command: shown.to_string(),
        message: failure_message(status.as_u16(), &reason, &json),
        exit: Some(i32::from(status.as_u16())),
    })
}

/// A failure's text: the body's `message`, else the reason phrase; then
/// each parameter error as `param: why`; a permission refusal says which
/// privilege the token lacks, and where.
pub fn failure_message(status: u16, reason: &str, body: &Value) -> String {
    let message = body
        .get("message")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|m| !m.is_empty())
        .unwrap_or(reason.trim())
        .to_string();
    let mut lines = vec![match status {
        401 => format!("{message}: the Proxmox API refused PVE_API_TOKEN"),
        403 => permission(&message).unwrap_or(message),
        _ => message,
    }];
    if let Some(errors) = body.get("errors").and_then(Value::as_object) {
        for (param, why) in errors {
            let why = why.as_str().map_or_else(|| why.to_string(), str::to_string);
            lines.push(format!("{param}: {}", why.trim()));
        }
    }
    lines.join("\n")
}

/// `Permission check failed (/vms/101, VM.Clone)` → `token lacks VM.Clone
/// on /vms/101`.
fn permission(message: &str) -> Option<String> {
    let inner = message
        .strip_prefix("Permission check failed (")?
        .strip_suffix(')')?;
    let (path, privilege) = inner.split_once(", ")?;
    Some(format!("token lacks {privilege} on {path}"))
}

#[cfg(test)]
mod tests {
    use pvedeck_config::Secret;
    use serde_json::json;

    use super::*;

    #[test]
    fn a_token_has_user_realm_id_and_secret() {
        assert!(token_shape("pvedeck@pve!deck=5f3c0e-11"));
        for bad in [
            "",
            "pvedeck@pve!deck",
            "pvedeck@pve!=x",
            "pvedeck!deck=x",
            "x=y",
        ] {
            assert!(!token_shape(bad), "{bad}");
        }
        let settings = ApiSettings {
            url: "https://127.0.0.1:8006/api2/json".into(),
            token: Secret::new("root-password"),
            trust: Trust::Insecure,
        };
        assert!(matches!(ApiClient::new(&settings), Err(SetupError::Token)));
    }

    #[test]
    fn the_body_message_wins_over_the_reason_phrase() {
        let body = json!({"data": null, "message": "VM 101 already exists\n"});
        assert_eq!(
            failure_message(500, "VM 101 already exists", &body),
            "VM 101 already exists"
        );
        // Before libpve-http-server-perl 5.2: the reason phrase only.
        assert_eq!(
            failure_message(500, "unable to create VM 101", &json!({"data": null})),
            "unable to create VM 101"
        );
    }

    #[test]
    fn parameter_errors_read_as_qm_prints_them() {
        let body = json!({"data": null, "errors": {"vmid": "VM 105 already exists"}});
        assert_eq!(
            failure_message(400, "Parameter verification failed.", &body),
            "Parameter verification failed.\nvmid: VM 105 already exists"
        );
    }

    #[test]
    fn a_refused_privilege_is_named_with_its_path() {
        assert_eq!(
            failure_message(
                403,
                "Permission check failed (/vms/101, VM.Clone)",
                &json!(null)
            ),
            "token lacks VM.Clone on /vms/101"
        );
        assert_eq!(
            failure_message(401, "authentication failure", &json!(null)),
            "authentication failure: the Proxmox API refused PVE_API_TOKEN"
        );
    }
}
