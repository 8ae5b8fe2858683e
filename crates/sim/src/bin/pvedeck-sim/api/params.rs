//! Request parameters as pveproxy reads them (pve-http-server
//! `AnyEvent.pm` `extract_params`, `decode_urlencoded`): the query string,
//! and for POST/PUT a form-urlencoded or JSON body; query parameters win.
//! A repeated key is an array (`command` of `agent/exec`); `k=` with an
//! empty value is absent (Perl's `split` drops it); an unescaped `=` in a
//! value cuts it off there.

use std::collections::BTreeMap;

use axum::extract::{FromRequest, Request};
use axum::http::header::CONTENT_TYPE;
use pvedeck_proxmox::escape::form_unescape;
use serde_json::Value;

use super::error::ApiError;

/// Bodies larger than this are refused (pveproxy's limit is 64 KiB for
/// forms; `input-data` of an agent exec is at most that).
const MAX_BODY: usize = 1 << 20;

/// A JSON body that is not an object of parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("body is not a JSON object")]
pub struct NotAnObject;

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Params(BTreeMap<String, Vec<String>>);

impl Params {
    /// `a=1&b=2&b=3`, as `decode_urlencoded` reads it.
    pub fn from_urlencoded(text: &str) -> Params {
        let mut params = Params::default();
        for pair in text.split('&').filter(|p| !p.is_empty()) {
            let mut parts = pair.split('=');
            let key = form_unescape(parts.next().unwrap_or_default());
            let Some(value) = parts.next().filter(|v| !v.is_empty()) else {
                continue;
            };
            params.push(key, form_unescape(value));
        }
        params
    }

    /// A JSON object body: numbers and booleans as Proxmox's checks read
    /// them (`1`/`0`), arrays as repeated values, `null` absent.
    pub fn from_json(value: &Value) -> Result<Params, NotAnObject> {
        let Value::Object(map) = value else {
            return Err(NotAnObject);
        };
        let mut params = Params::default();
        for (key, value) in map {
            let items: Vec<&Value> = match value {
                Value::Array(items) => items.iter().collect(),
                other => vec![other],
            };
            for item in items {
                let text = match item {
                    Value::Null => continue,
                    Value::Bool(b) => u8::from(*b).to_string(),
                    Value::String(s) => s.clone(),
                    Value::Number(n) => n.to_string(),
                    other => other.to_string(),
                };
                params.push(key.clone(), text);
            }
        }
        Ok(params)
    }

    /// Parameters from `(key, value)` pairs (an upload's form fields).
    pub fn from_pairs(pairs: impl IntoIterator<Item = (String, String)>) -> Params {
        let mut params = Params::default();
        for (key, value) in pairs {
            params.push(key, value);
        }
        params
    }

    /// The keys given, in order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }

    fn push(&mut self, key: String, value: String) {
        self.0.entry(key).or_default().push(value);
    }

    /// `over`'s keys replace these.
    pub fn overridden_by(mut self, over: Params) -> Params {
        for (key, values) in over.0 {
            self.0.insert(key, values);
        }
        self
    }

    /// A scalar parameter: the last value given.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.last()).map(String::as_str)
    }

    /// An array parameter (a scalar is a one-element array).
    pub fn list(&self, key: &str) -> Vec<String> {
        self.0.get(key).cloned().unwrap_or_default()
    }

    pub fn has(&self, key: &str) -> bool {
        self.0.contains_key(key)
    }

    /// A boolean as JSONSchema `check_type` takes it.
    pub fn flag(&self, key: &str) -> Result<bool, ApiError> {
        match self.get(key) {
            None => Ok(false),
            Some("1" | "true" | "yes" | "on") => Ok(true),
            Some("0" | "false" | "no" | "off") => Ok(false),
            Some(other) => Err(ApiError::param(
                key,
                format!("type check ('boolean') failed - got '{other}'"),
            )),
        }
    }

    pub fn required(&self, key: &str) -> Result<&str, ApiError> {
        self.get(key)
            .ok_or_else(|| ApiError::param(key, "property is missing and it is not optional"))
    }

    /// An integer parameter, if given.
    pub fn int(&self, key: &str) -> Result<Option<u64>, ApiError> {
        self.get(key)
            .map(|v| {
                v.parse::<u64>().map_err(|_| {
                    ApiError::param(key, format!("type check ('integer') failed - got '{v}'"))
                })
            })
            .transpose()
    }

    /// Every `(key, value)` except `skip`, in key order (what becomes
    /// `qm` options).
    pub fn options(&self, skip: &[&str]) -> Vec<(String, String)> {
        self.0
            .iter()
            .filter(|(k, _)| !skip.contains(&k.as_str()))
            .filter_map(|(k, v)| v.last().map(|v| (k.clone(), v.clone())))
            .collect()
    }
}

impl<S: Send + Sync> FromRequest<S> for Params {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Params, ApiError> {
        let query = Params::from_urlencoded(req.uri().query().unwrap_or_default());
        let method = req.method().clone();
        let json = req
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/json"));
        let body = axum::body::Bytes::from_request(req, state)
            .await
            .map_err(|e| ApiError::new(400, e.to_string()))?;
        if body.len() > MAX_BODY {
            return Err(ApiError::new(413, "request too large"));
        }
        if body.is_empty() {
            return Ok(query);
        }
        if method == axum::http::Method::DELETE || method == axum::http::Method::GET {
            return Err(ApiError::new(
                400,
                format!("Unexpected content for method '{method}'"),
            ));
        }
        let body = if json {
            let value: Value = serde_json::from_slice(&body)
                .map_err(|e| ApiError::new(400, format!("invalid JSON body: {e}")))?;
            Params::from_json(&value).map_err(|e| ApiError::new(400, e.to_string()))?
        } else {
            Params::from_urlencoded(&String::from_utf8_lossy(&body))
        };
        Ok(body.overridden_by(query))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_decode_as_pveproxy_reads_them() {
        let p = Params::from_urlencoded(
            "command=sh&command=-c&command=cat%20%2Fetc%2Fmachine-id&name=a+b&empty=&cut=x=y",
        );
        assert_eq!(p.list("command"), ["sh", "-c", "cat /etc/machine-id"]);
        assert_eq!(p.get("name"), Some("a b"));
        assert!(!p.has("empty"), "k= is absent");
        assert_eq!(p.get("cut"), Some("x"), "an unescaped = cuts the value");
        // sshkeys arrives encoded twice: the form decoding leaves Proxmox's.
        let p = Params::from_urlencoded("sshkeys=ssh-ed25519%2520AAAA%250A");
        assert_eq!(p.get("sshkeys"), Some("ssh-ed25519%20AAAA%0A"));
        assert_eq!(form_unescape("100%"), "100%");
        assert_eq!(form_unescape("%zz"), "%zz");
    }

    #[test]
    fn json_bodies_give_the_same_params() {
        let v = serde_json::json!({
            "command": ["sh", "-c", ""], "vmid": 101, "full": true, "pool": null, "name": "web"
        });
        let p = Params::from_json(&v).unwrap();
        assert_eq!(p.list("command"), ["sh", "-c", ""]);
        assert_eq!(p.get("vmid"), Some("101"));
        assert_eq!(p.flag("full"), Ok(true));
        assert!(!p.has("pool"));
        assert!(Params::from_json(&serde_json::json!([1])).is_err());
    }

    #[test]
    fn query_parameters_win_and_types_are_checked() {
        let body = Params::from_urlencoded("a=1&b=2");
        let p = body.overridden_by(Params::from_urlencoded("b=3"));
        assert_eq!((p.get("a"), p.get("b")), (Some("1"), Some("3")));
        assert!(p.flag("a").is_ok());
        let bad = Params::from_urlencoded("purge=maybe&vmid=x");
        assert!(bad.flag("purge").is_err());
        assert!(bad.int("vmid").is_err());
        assert_eq!(p.options(&["a"]), [("b".to_string(), "3".to_string())]);
    }
}
