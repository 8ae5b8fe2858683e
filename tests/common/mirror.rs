//! A loopback mirror whose image and `SHA512SUMS` each test sets (and
//! changes): the mirror the image checks are tested against.

use std::sync::{Arc, Mutex};

/// What the mirror's `SHA512SUMS` answers.
#[derive(Clone)]
pub enum Sums {
    /// The list of the checksum of this content.
    Of(Vec<u8>),
    Status(u16),
}

struct State {
    image: Vec<u8>,
    sums: Sums,
}

/// A loopback mirror serving `state`'s image under `/img/` and its list.
pub struct Mirror {
    pub base: String,
    state: Arc<Mutex<State>>,
}

impl Mirror {
    pub async fn start(image: Vec<u8>, sums: Sums) -> Mirror {
        use axum::extract::Path;
        use axum::http::StatusCode;
        use axum::response::IntoResponse;
        let state = Arc::new(Mutex::new(State { image, sums }));
        let shared = state.clone();
        let app = axum::Router::new().route(
            "/img/{file}",
            axum::routing::get(move |Path(file): Path<String>| {
                let (image, sums) = {
                    let state = shared.lock().unwrap();
                    (state.image.clone(), state.sums.clone())
                };
                async move {
                    if file != "SHA512SUMS" {
                        return image.into_response();
                    }
                    match sums {
                        Sums::Of(content) => super::checksum_list(&file, &content)
                            .unwrap()
                            .into_response(),
                        Sums::Status(code) => StatusCode::from_u16(code).unwrap().into_response(),
                    }
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Mirror {
            base: format!("http://{addr}/img"),
            state,
        }
    }

    pub fn set(&self, image: Vec<u8>, sums: Sums) {
        *self.state.lock().unwrap() = State { image, sums };
    }

    pub fn list_url(&self) -> String {
        format!("{}/SHA512SUMS", self.base)
    }
}

/// `pvedeck-sim mirror` as its own process: every release's image, the
/// lists that give them and their signatures under `/img/`, and each
/// attack on images in a directory of its own
/// (`pvedeck_sim::internet::MirrorFault`).
pub struct SimMirror {
    /// `http://127.0.0.1:<port>`
    root: String,
    _process: super::Killed,
}

impl SimMirror {
    pub fn start() -> SimMirror {
        use std::io::{BufRead, BufReader};
        let mut child = std::process::Command::new(super::sim_binary())
            .arg("mirror")
            .env_clear()
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start pvedeck-sim mirror");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let url = lines
            .next()
            .and_then(Result::ok)
            .expect("pvedeck-sim mirror prints its URL");
        std::thread::spawn(move || for _ in lines.by_ref() {});
        let root = url.trim().trim_end_matches("/img").to_string();
        SimMirror {
            root,
            _process: super::Killed(child),
        }
    }

    /// The directory that stages `fault` (`img`, `no-list`, …): an
    /// `IMAGE_BASE_<OS>`.
    pub fn base(&self, fault: &str) -> String {
        format!("{}/{fault}", self.root)
    }
}

/// A keyring file holding the simulated mirror's public key, for
/// `IMAGE_KEYRING_<OS>`.
pub fn sim_keyring() -> std::path::PathBuf {
    let path = super::temp_dir("keyring").join("mirror.asc");
    let key = pvedeck_sim::internet::mirror_public_key().expect("the mirror's key");
    std::fs::write(&path, key).expect("keyring file");
    path
}
