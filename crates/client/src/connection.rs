//! The server, over HTTP: requests, and a job's event stream followed to
//! its end (again from the last event seen when the connection drops).

use futures_util::StreamExt;
use pvedeck_domain::types::{Job, StepEvent};
use reqwest::Response;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue};
use serde_json::Value;

use super::Exit;
use super::failure::Failure;
use super::show::Show;
use super::sse::Reader;

/// Reconnections to a job's stream that brought nothing new, before giving up.
const RETRIES: u32 = 3;

pub struct Connection {
    base: reqwest::Url,
    http: reqwest::Client,
}

pub fn is_stream(res: &Response) -> bool {
    res.headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"))
}

impl Connection {
    pub fn new(url: &str, token: Option<&str>) -> Result<Connection, Failure> {
        let base = reqwest::Url::parse(url)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
            .ok_or_else(|| {
                Failure::Usage(format!(
                    "--url {url} is not an http:// or https:// address of a server"
                ))
            })?;
        let mut headers = HeaderMap::new();
        if let Some(token) = token.map(str::trim).filter(|t| !t.is_empty()) {
            let mut value = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
                Failure::Usage("the token has characters a header cannot carry".into())
            })?;
            value.set_sensitive(true);
            headers.insert(AUTHORIZATION, value);
        }
        let http = reqwest::Client::builder()
            .default_headers(headers)
            .build()
            .map_err(|e| Failure::Unreachable(e.to_string()))?;
        Ok(Connection { base, http })
    }

    fn url(&self, path: &str) -> Result<reqwest::Url, Failure> {
        self.base
            .join(path)
            .map_err(|e| Failure::Usage(format!("{path}: {e}")))
    }

    /// The response when it is a success; the server's words otherwise.
    async fn checked(result: reqwest::Result<Response>) -> Result<Response, Failure> {
        let res = result.map_err(|e| Failure::Unreachable(without_url(e)))?;
        let status = res.status();
        if status.is_success() {
            return Ok(res);
        }
        let message = res.text().await.unwrap_or_default().trim().to_string();
        let code = status.as_u16();
        Err(if status.is_client_error() {
            Failure::Refused {
                status: code,
                message,
            }
        } else {
            Failure::Server {
                status: code,
                message,
            }
        })
    }

    pub async fn get(&self, path: &str) -> Result<Response, Failure> {
        Self::checked(self.http.get(self.url(path)?).send().await).await
    }

    pub async fn get_json(&self, path: &str) -> Result<Value, Failure> {
        self.get(path)
            .await?
            .json()
            .await
            .map_err(|e| Failure::Garbled(e.to_string()))
    }

    pub async fn get_text(&self, path: &str) -> Result<String, Failure> {
        let res = self.get(path).await?;
        self.text_of(res).await
    }

    pub async fn text_of(&self, res: Response) -> Result<String, Failure> {
        res.text()
            .await
            .map(|t| t.trim().to_string())
            .map_err(|e| Failure::Unreachable(without_url(e)))
    }

    pub async fn post_json(&self, path: &str, body: &Value) -> Result<Response, Failure> {
        let req = self.http.post(self.url(path)?).json(body);
        Self::checked(req.send().await).await
    }

    pub async fn post_empty(&self, path: &str) -> Result<Response, Failure> {
        Self::checked(self.http.post(self.url(path)?).send().await).await
    }

    /// A job's stream as the request that started it answered.
    pub async fn follow_response(&self, res: Response, show: &Show) -> Result<Exit, Failure> {
        let id = res
            .headers()
            .get("x-job-id")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            .ok_or_else(|| Failure::Garbled("a job's answer without its X-Job-Id".into()))?;
        self.follow(id, Some(res), show).await
    }

    /// `jobs follow <id>`: from the job's first event.
    pub async fn follow_job(&self, id: u64, show: &Show) -> Result<Exit, Failure> {
        self.follow(id, None, show).await
    }

    /// Reads the job's events to its `close`, reconnecting after the last
    /// one seen if the connection drops; then its end as recorded. Ctrl-C
    /// stops following and leaves the job running.
    async fn follow(&self, id: u64, first: Option<Response>, show: &Show) -> Result<Exit, Failure> {
        // Taken over before the first line is shown: whoever sees it may
        // press Ctrl-C at once.
        let mut interrupt =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
                .map_err(|e| Failure::Unreachable(format!("cannot watch for Ctrl-C: {e}")))?;
        let mut watch = show.job(id, self.base.as_str());
        let following = async {
            let mut res = first;
            let mut retries = 0;
            loop {
                let stream = match res.take() {
                    Some(res) => res,
                    None => {
                        self.get(&format!("/api/jobs/{id}/events?after={}", watch.last_seq()))
                            .await?
                    }
                };
                let before = watch.last_seq();
                if self.read_stream(stream, &mut watch).await {
                    return Ok(());
                }
                retries = if watch.last_seq() > before {
                    0
                } else {
                    retries + 1
                };
                if retries >= RETRIES {
                    return Err(Failure::Unreachable(format!(
                        "the stream of job {id} keeps ending before the job"
                    )));
                }
            }
        };
        let followed = tokio::select! {
            followed = following => Some(followed),
            _ = interrupt.recv() => None,
        };
        match followed {
            None => return Ok(watch.interrupted()),
            Some(followed) => followed?,
        }
        let job: Job = self
            .get_json(&format!("/api/jobs/{id}"))
            .await
            .and_then(|v| serde_json::from_value(v).map_err(|e| Failure::Garbled(e.to_string())))?;
        Ok(watch.ended(&job))
    }

    /// `true` when the job's `close` came.
    async fn read_stream(&self, res: Response, watch: &mut super::show::Watch<'_>) -> bool {
        let mut reader = Reader::default();
        let mut body = res.bytes_stream();
        while let Some(Ok(chunk)) = body.next().await {
            for frame in reader.push(&chunk) {
                if frame.event.as_deref() == Some("close") {
                    return true;
                }
                let (Some(seq), Ok(event)) =
                    (frame.id, serde_json::from_str::<StepEvent>(&frame.data))
                else {
                    continue;
                };
                watch.event(seq, &event);
            }
        }
        false
    }
}

/// reqwest's error, with its causes, without the URL (which may carry a
/// user's password).
fn without_url(e: reqwest::Error) -> String {
    let e = e.without_url();
    let mut text = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        text = format!("{text}: {s}");
        source = s.source();
    }
    text
}
