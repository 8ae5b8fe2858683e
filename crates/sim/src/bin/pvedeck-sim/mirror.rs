//! `pvedeck-sim mirror`: the simulator's cloud images and the checksum
//! lists that give them, over plain HTTP on loopback, all in one directory
//! (`/img/`), for `IMAGE_BASE_<OS>`: what a process of the `cli` or `api`
//! backend (and the simulator's REST face, which fetches such a base for
//! real) downloads instead of the internet. Prints the directory's URL once
//! it listens, one line per request on stderr; serves until killed.

use axum::extract::Path;
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};

use pvedeck_sim::internet::local_mirror_file;

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
    let app = axum::Router::new().route("/img/{file}", axum::routing::get(file));
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

/// `/img/<name>` (GET or HEAD): an image or a checksum list; 404 else.
/// With `SIM_MIRROR_DIR`, that directory's files come first: the real
/// guest image `cargo xtask guest` builds, and its `SHA512SUMS`.
async fn file(method: Method, Path(name): Path<String>) -> Response {
    let from_dir = match std::env::var_os("SIM_MIRROR_DIR") {
        Some(dir) if !name.contains('/') && !name.starts_with('.') => {
            tokio::fs::read(std::path::Path::new(&dir).join(&name))
                .await
                .ok()
        }
        _ => None,
    };
    let found = from_dir.or_else(|| local_mirror_file(&name));
    eprintln!(
        "{method} /img/{name}: {}",
        if found.is_some() { "200" } else { "404" }
    );
    match found {
        Some(bytes) => bytes.into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}
