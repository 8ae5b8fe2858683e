//! `pvedeck-sim mirror`: the simulator's cloud images, the checksum lists
//! that give them and those lists' signatures, over plain HTTP on loopback,
//! all in one directory (`/img/`), for `IMAGE_BASE_<OS>`: what a process of
//! the `cli` or `api` backend (and the simulator's REST face, which fetches
//! such a base for real) downloads instead of the internet. Prints the
//! directory's URL once it listens, one line per request on stderr; serves
//! until killed.
//!
//! Beside `/img/`, each directory stages an attack on the images
//! (`pvedeck_sim::internet::MirrorFault`): `/no-list/`, `/no-signature/`,
//! `/bad-signature/`, `/backing-file/`, `/data-file/`, `/trickle/`. One
//! process serves them all at once, so tests that run side by side pick
//! theirs by the base URL they give.

use std::time::Duration;

use axum::body::Body;
use axum::extract::Path;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;

use pvedeck_mirror::qcow2::HEADER_BYTES;
use pvedeck_sim::internet::{MirrorFault, local_mirror_served};

/// A trickling mirror sends this much, this often: never still long
/// enough for a stall timeout (60 s), never done within a deadline.
const TRICKLE_BYTES: usize = 16;
const TRICKLE_EVERY: Duration = Duration::from_millis(500);

/// Returns the exit code.
pub fn run() -> i32 {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start: {e}");
            return 1;
        }
    };
    match runtime.block_on(serve()) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("pvedeck-sim mirror: {e}");
            1
        }
    }
}

/// Why the mirror stopped serving.
#[derive(Debug, thiserror::Error)]
enum MirrorError {
    #[error("cannot listen on 127.0.0.1: {0}")]
    Listen(std::io::Error),
    #[error(transparent)]
    Socket(std::io::Error),
}

async fn serve() -> Result<(), MirrorError> {
    let app = axum::Router::new().route("/{dir}/{file}", axum::routing::get(file));
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .map_err(MirrorError::Listen)?;
    let port = listener.local_addr().map_err(MirrorError::Socket)?.port();
    {
        use std::io::Write;
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "http://127.0.0.1:{port}/img");
        let _ = stdout.flush();
    }
    axum::serve(listener, app)
        .await
        .map_err(MirrorError::Socket)
}

/// `bytes=0-N` (the only form pvedeck asks for): the last byte wanted.
fn range_end(headers: &HeaderMap) -> Option<usize> {
    let value = headers.get(header::RANGE)?.to_str().ok()?;
    let (start, end) = value.strip_prefix("bytes=")?.split_once('-')?;
    (start == "0").then(|| end.parse().ok()).flatten()
}

/// `/<dir>/<name>` (GET or HEAD): an image, a checksum list or a
/// signature as the directory's fault has them; 404 else. With
/// `SIM_MIRROR_DIR`, that directory's files come first under `/img/`: the
/// real guest image `cargo xtask guest` builds, and its `SHA512SUMS`.
async fn file(
    method: Method,
    headers: HeaderMap,
    Path((dir, name)): Path<(String, String)>,
) -> Response {
    let Some(fault) = MirrorFault::parse(&dir) else {
        eprintln!("{method} /{dir}/{name}: 404");
        return StatusCode::NOT_FOUND.into_response();
    };
    let from_dir = match std::env::var_os("SIM_MIRROR_DIR") {
        Some(dir)
            if fault == MirrorFault::None && !name.contains('/') && !name.starts_with('.') =>
        {
            tokio::fs::read(std::path::Path::new(&dir).join(&name))
                .await
                .ok()
        }
        _ => None,
    };
    let found = from_dir.or_else(|| local_mirror_served(fault, &name));
    eprintln!(
        "{method} /{dir}/{name}: {}",
        if found.is_some() { "200" } else { "404" }
    );
    let Some(bytes) = found else {
        return StatusCode::NOT_FOUND.into_response();
    };
    // The start of a file, as a node-fetched image's header check asks
    // for it; quick even where the whole file trickles.
    if let Some(end) = range_end(&headers) {
        let part = bytes[..bytes.len().min(end.saturating_add(1))].to_vec();
        let range = format!("bytes 0-{}/{}", part.len().saturating_sub(1), bytes.len());
        return (
            StatusCode::PARTIAL_CONTENT,
            [(header::CONTENT_RANGE, range)],
            part,
        )
            .into_response();
    }
    let image = bytes.len() > HEADER_BYTES;
    if fault == MirrorFault::Trickle && image && method == Method::GET {
        return trickle(bytes);
    }
    bytes.into_response()
}

/// The header at once, then the rest a few bytes at a time, with the
/// whole length announced.
fn trickle(bytes: Vec<u8>) -> Response {
    let total = bytes.len();
    let (head, rest) = bytes.split_at(HEADER_BYTES.min(total));
    let head = head.to_vec();
    let rest: Vec<Vec<u8>> = rest.chunks(TRICKLE_BYTES).map(<[u8]>::to_vec).collect();
    let tail = futures_util::stream::iter(rest).then(|chunk| async move {
        tokio::time::sleep(TRICKLE_EVERY).await;
        Ok::<_, std::io::Error>(chunk)
    });
    let stream = futures_util::stream::once(async move { Ok(head) }).chain(tail);
    let mut response = Body::from_stream(stream).into_response();
    if let Ok(length) = header::HeaderValue::from_str(&total.to_string()) {
        response
            .headers_mut()
            .insert(header::CONTENT_LENGTH, length);
    }
    response
}
