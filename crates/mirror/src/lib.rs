//! Cloud image mirrors as pvedeck reaches them (docs/provisioning.md#os-images): a `HEAD` that
//! must answer 200 within 15 s, then a streamed `GET` into a file. `Http`
//! is the real web; the simulated cluster brings an internet of its own
//! (`pvedeck_sim::internet`), so the demo contacts nothing. Beside the image, a
//! mirror may publish a checksum list (`checksums`), signed or not
//! (`signature`); an image is a qcow2 file whose header is read before it
//! is used (`qcow2`).

pub mod checksums;
pub mod qcow2;
pub mod signature;

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;

/// How a download reports its progress: bytes so far, and the total when known.
pub type Progress<'a> = &'a (dyn Fn(u64, Option<u64>) + Send + Sync);

const HEAD_TIMEOUT: Duration = Duration::from_secs(15);
/// A download that delivers nothing for this long is given up.
const STALL_TIMEOUT: Duration = Duration::from_secs(60);
/// The largest checksum list read: the official ones are a few KiB, and a
/// mirror that streams for ever must not fill the memory.
pub const MAX_LIST_BYTES: u64 = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("no answer within {}s", HEAD_TIMEOUT.as_secs())]
    NoAnswer,
    #[error("cannot connect: {0}")]
    Connect(String),
    #[error("{0}")]
    Http(String),
    #[error("{method} {url} answered {code}")]
    Status {
        method: &'static str,
        url: String,
        code: u16,
    },
    #[error("no data for {}s", STALL_TIMEOUT.as_secs())]
    Stalled,
    #[error("download ended after {done} of {total} bytes")]
    Truncated { done: u64, total: u64 },
    #[error("cannot create {}: {source}", path.display())]
    Create {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot move the image into place: {0}")]
    Rename(std::io::Error),
    #[error("the image is larger than IMAGE_MAX_BYTES ({max} bytes)")]
    TooLarge { max: u64 },
    #[error("cannot set up the HTTP client: {0}")]
    Client(String),
    #[error("{url} is larger than {} bytes", MAX_LIST_BYTES)]
    ListTooLarge { url: String },
    /// The whole download took longer than `IMAGE_DOWNLOAD_TIMEOUT_SECS`:
    /// a mirror that trickles a few bytes now and then never stalls, so
    /// only a bound on the whole ends it.
    #[error("not complete within IMAGE_DOWNLOAD_TIMEOUT_SECS ({secs}s)")]
    Deadline { secs: u64 },
}

impl From<reqwest::Error> for ImageError {
    fn from(e: reqwest::Error) -> ImageError {
        if e.is_timeout() {
            ImageError::NoAnswer
        } else if e.is_connect() {
            ImageError::Connect(e.to_string())
        } else {
            ImageError::Http(e.to_string())
        }
    }
}

/// Where images come from.
#[async_trait]
pub trait Mirror: Send + Sync {
    /// `HEAD <url>`: 200 within 15 s, or why not.
    async fn check(&self, url: &str) -> Result<(), ImageError>;
    /// `GET <url>` into `file` (at `path`, for messages), all of it.
    async fn fetch(
        &self,
        url: &str,
        file: &mut tokio::fs::File,
        path: &Path,
        progress: Progress<'_>,
    ) -> Result<(), ImageError>;
    /// `GET <url>` of a checksum list (at most [`MAX_LIST_BYTES`]): its
    /// text, or `None` when the mirror answers 404 or 410 (it publishes none).
    async fn list(&self, url: &str) -> Result<Option<String>, ImageError>;
    /// `GET <url>` of a list's detached signature (at most
    /// [`MAX_LIST_BYTES`], binary or armored): its bytes, or `None` on 404
    /// or 410.
    async fn signature(&self, url: &str) -> Result<Option<Vec<u8>>, ImageError>;
    /// The first [`qcow2::HEADER_BYTES`] of the image at `url` (fewer when
    /// it is shorter), by a `Range` request: the header check of an image
    /// a node fetches itself.
    async fn header(&self, url: &str) -> Result<Vec<u8>, ImageError>;
}

/// The web, through reqwest (TLS with the system's CA store).
#[derive(Clone)]
pub struct Http {
    client: reqwest::Client,
}

impl Http {
    pub fn new() -> Result<Http, ImageError> {
        let client = reqwest::Client::builder()
            .connect_timeout(HEAD_TIMEOUT)
            .user_agent(concat!("pvedeck/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ImageError::Client(e.to_string()))?;
        Ok(Http { client })
    }
}

#[async_trait]
impl Mirror for Http {
    async fn check(&self, url: &str) -> Result<(), ImageError> {
        let res = self.client.head(url).timeout(HEAD_TIMEOUT).send().await?;
        match res.status().as_u16() {
            200 => Ok(()),
            code => Err(ImageError::Status {
                method: "HEAD",
                url: url.to_string(),
                code,
            }),
        }
    }

    async fn fetch(
        &self,
        url: &str,
        file: &mut tokio::fs::File,
        path: &Path,
        progress: Progress<'_>,
    ) -> Result<(), ImageError> {
        let res = self.client.get(url).send().await?;
        if res.status().as_u16() != 200 {
            return Err(ImageError::Status {
                method: "GET",
                url: url.to_string(),
                code: res.status().as_u16(),
            });
        }
        let total = res.content_length();
        let write_error = |source| ImageError::Write {
            path: path.to_path_buf(),
            source,
        };
        let mut stream = res.bytes_stream();
        let mut done = 0u64;
        loop {
            let chunk = match tokio::time::timeout(STALL_TIMEOUT, stream.next()).await {
                Err(_) => return Err(ImageError::Stalled),
                Ok(None) => break,
                Ok(Some(chunk)) => chunk?,
            };
            file.write_all(&chunk).await.map_err(write_error)?;
            done += chunk.len() as u64;
            progress(done, total);
        }
        if let Some(total) = total
            && done != total
        {
            return Err(ImageError::Truncated { done, total });
        }
        file.sync_all().await.map_err(write_error)
    }

    async fn list(&self, url: &str) -> Result<Option<String>, ImageError> {
        let body = self.small(url).await?;
        Ok(body.map(|body| String::from_utf8_lossy(&body).into_owned()))
    }

    async fn signature(&self, url: &str) -> Result<Option<Vec<u8>>, ImageError> {
        self.small(url).await
    }

    async fn header(&self, url: &str) -> Result<Vec<u8>, ImageError> {
        let want = qcow2::HEADER_BYTES;
        let res = self
            .client
            .get(url)
            .header(reqwest::header::RANGE, format!("bytes=0-{}", want - 1))
            .timeout(HEAD_TIMEOUT)
            .send()
            .await?;
        // 206 is the range; a mirror that ignores ranges answers 200 with
        // the whole file, of which only the start is read.
        match res.status().as_u16() {
            200 | 206 => {}
            code => {
                return Err(ImageError::Status {
                    method: "GET",
                    url: url.to_string(),
                    code,
                });
            }
        }
        let mut head = Vec::with_capacity(want);
        let mut stream = res.bytes_stream();
        while head.len() < want {
            match stream.next().await {
                Some(chunk) => head.extend_from_slice(&chunk?),
                None => break,
            }
        }
        head.truncate(want);
        Ok(head)
    }
}

impl Http {
    /// A small file (a list, a signature) whole, within the HEAD's time:
    /// `None` on 404 or 410, an error past [`MAX_LIST_BYTES`].
    async fn small(&self, url: &str) -> Result<Option<Vec<u8>>, ImageError> {
        let res = self.client.get(url).timeout(HEAD_TIMEOUT).send().await?;
        match res.status().as_u16() {
            200 => {}
            404 | 410 => return Ok(None),
            code => {
                return Err(ImageError::Status {
                    method: "GET",
                    url: url.to_string(),
                    code,
                });
            }
        }
        let too_large = || ImageError::ListTooLarge {
            url: url.to_string(),
        };
        if res.content_length().is_some_and(|n| n > MAX_LIST_BYTES) {
            return Err(too_large());
        }
        let mut body = Vec::new();
        let mut stream = res.bytes_stream();
        while let Some(chunk) = stream.next().await {
            body.extend_from_slice(&chunk?);
            if body.len() as u64 > MAX_LIST_BYTES {
                return Err(too_large());
            }
        }
        Ok(Some(body))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A loopback server: `/list` answers the list, `/gone` 410, `/broken`
    /// 500, `/huge` more than a list may hold, anything else 404.
    async fn server() -> String {
        use axum::http::StatusCode;
        use axum::routing::get;
        let app = axum::Router::new()
            .route("/list", get(|| async { "abc  file\n" }))
            .route("/gone", get(|| async { StatusCode::GONE }))
            .route(
                "/broken",
                get(|| async { StatusCode::INTERNAL_SERVER_ERROR }),
            )
            .route(
                "/huge",
                get(|| async { vec![b'a'; MAX_LIST_BYTES as usize + 1] }),
            )
            .route(
                "/image",
                get(|| async { qcow2::header(1 << 30, true, false).repeat(4) }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        format!("http://{addr}")
    }

    #[tokio::test]
    async fn a_list_is_read_and_its_absence_is_no_error() {
        let base = server().await;
        let web = Http::new().unwrap();
        let list = |path: &str| {
            let url = format!("{base}{path}");
            let web = web.clone();
            async move { web.list(&url).await }
        };
        assert_eq!(list("/list").await.unwrap().as_deref(), Some("abc  file\n"));
        assert_eq!(list("/missing").await.unwrap(), None);
        assert_eq!(list("/gone").await.unwrap(), None);
        let e = list("/broken").await.unwrap_err();
        assert_eq!(e.to_string(), format!("GET {base}/broken answered 500"));
        let e = list("/huge").await.unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("{base}/huge is larger than 1048576 bytes")
        );
        let sig = web.signature(&format!("{base}/list")).await.unwrap();
        assert_eq!(sig.as_deref(), Some(&b"abc  file\n"[..]));
    }

    #[tokio::test]
    async fn the_header_is_the_image_s_first_bytes_only() {
        let base = server().await;
        let web = Http::new().unwrap();
        let head = web.header(&format!("{base}/image")).await.unwrap();
        assert_eq!(head, qcow2::header(1 << 30, true, false));
        assert_eq!(qcow2::check(&head), Err(qcow2::Refusal::BackingFile));
        let e = web.header(&format!("{base}/broken")).await.unwrap_err();
        assert_eq!(e.to_string(), format!("GET {base}/broken answered 500"));
    }
}
