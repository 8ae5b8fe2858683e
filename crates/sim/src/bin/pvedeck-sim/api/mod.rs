//! The simulated cluster's third face: the Proxmox VE REST API
//! (`/api2/json`), served over HTTPS on loopback by `pvedeck-sim api`, over
//! the same file-backed cluster as the command-line stand-ins
//! (`Store::Shared` on `DATA_DIR/sim`). Every operation goes through the
//! simulator's own `qm_*` functions, so rules, timing, faults and the
//! command log are those of the other faces; this module only speaks HTTP:
//! parameters, privileges, tasks (UPIDs) and Proxmox's answer shapes.
//!
//! Contract: `DATA_DIR/sim/api.json` =
//! `{"url":"https://127.0.0.1:<port>/api2/json","fingerprint":"AB:…","token":"pvedeck@pve!deck=<secret>"}`,
//! written once listening; the URL is printed on stdout. `SIM_API_PORT`
//! (default 0: a free port), `SIM_API_PRIVS` (default: pvedeck's role),
//! `SIM_API_MS` (each answer's latency, default 0), `SIM_UPLOAD_MAX_BYTES`
//! (default 16 GiB: a larger upload gets 413).

mod auth;
mod error;
mod params;
mod routes;
mod tasks;
mod tls;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};

use auth::Privs;
use error::ApiError;
use pvedeck_config::Config;
use pvedeck_proxmox::AgentExec;
use pvedeck_sim::{SimCluster, SimInternet, SimSettings};
use pvedeck_support::clock::Clock;
use pvedeck_support::files::{secret_dir, write_atomically};
use tasks::Tasks;

/// What every handler shares.
pub struct Api {
    sim: SimCluster,
    tasks: Tasks,
    privs: Privs,
    secret: String,
    fingerprint: String,
    internet: SimInternet,
    /// `DATA_DIR/sim`.
    dir: PathBuf,
    /// Finished `agent/exec` runs by (vmid, pid), until their status is read.
    execs: Mutex<BTreeMap<(u32, u32), AgentExec>>,
    next_pid: AtomicU32,
    /// The largest upload body taken (`SIM_UPLOAD_MAX_BYTES`).
    upload_max: u64,
    /// The console proxies waiting for their WebSocket.
    consoles: routes::Consoles,
}

impl Api {
    /// Where a node's file storage keeps one content type's files: `sub`
    /// is Proxmox's directory for it (`import`, `template/iso`…).
    fn content_dir(&self, node: &str, storage: &str, sub: &str) -> PathBuf {
        self.dir.join("storage").join(node).join(storage).join(sub)
    }

    /// Where a node's file storage keeps its `import` volumes.
    fn import_dir(&self, node: &str, storage: &str) -> PathBuf {
        self.content_dir(node, storage, "import")
    }
}

/// An image can be many gigabytes; beyond this is a client gone wrong.
const UPLOAD_MAX_DEFAULT: u64 = 16 << 30;

/// Why `pvedeck-sim api` cannot serve.
#[derive(Debug, thiserror::Error)]
enum ServeError {
    #[error("{name}: not {what}: {value}")]
    Setting {
        name: &'static str,
        what: &'static str,
        value: String,
    },
    #[error("{}: {source}", path.display())]
    File {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    #[error("token: {0}")]
    Token(std::io::Error),
    #[error(transparent)]
    Sim(#[from] pvedeck_sim::SimError),
    #[error(transparent)]
    Web(#[from] pvedeck_mirror::ImageError),
    #[error("cannot listen on 127.0.0.1:{port}: {source}")]
    Listen { port: u16, source: std::io::Error },
    #[error(transparent)]
    Socket(std::io::Error),
}

/// A setting from the environment, its default when unset.
fn setting<T: std::str::FromStr>(
    name: &'static str,
    what: &'static str,
    default: T,
) -> Result<T, ServeError> {
    match std::env::var(name) {
        Ok(value) => value
            .parse()
            .map_err(|_| ServeError::Setting { name, what, value }),
        Err(_) => Ok(default),
    }
}

fn upload_max() -> Result<u64, ServeError> {
    setting("SIM_UPLOAD_MAX_BYTES", "a byte count", UPLOAD_MAX_DEFAULT)
}

/// `pvedeck-sim api`: serves until killed. Returns the exit code.
pub fn run() -> i32 {
    let config = match Config::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return 2;
        }
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(&config.log_filter))
        .with_writer(std::io::stderr)
        .try_init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start: {e}");
            return 1;
        }
    };
    match runtime.block_on(serve(&config)) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("pvedeck-sim api: {e}");
            1
        }
    }
}

async fn serve(config: &Config) -> Result<(), ServeError> {
    let dir = config.data_dir.join("sim");
    let api_dir = dir.join("api");
    // It holds the TLS key and the token's secret: 0700 even if it existed.
    secret_dir(&api_dir).map_err(|source| ServeError::File {
        path: api_dir.clone(),
        source,
    })?;
    let tls = tls::load(&api_dir)?;
    let secret = auth::load_or_make_secret(&api_dir).map_err(ServeError::Token)?;
    let settings = SimSettings::from_config(config);
    let sim = SimCluster::shared(&dir, &settings)?;
    let web = pvedeck_mirror::Http::new()?;
    let internet = SimInternet::new(
        Clock::new(settings.speed),
        web,
        config.image_base.values().cloned(),
    );
    let tasks = Tasks::new(dir.join("tasks"));
    tasks.reap_orphans();
    let port: u16 = setting("SIM_API_PORT", "a port", 0)?;
    let privs = Privs::from_setting(std::env::var("SIM_API_PRIVS").ok().as_deref());
    let upload_max = upload_max()?;
    let api = Arc::new(Api {
        sim,
        tasks,
        privs,
        secret,
        fingerprint: tls.fingerprint.clone(),
        internet,
        dir: dir.clone(),
        execs: Mutex::new(BTreeMap::new()),
        next_pid: AtomicU32::new(1000),
        upload_max,
        consoles: routes::Consoles::default(),
    });
    // `SIM_API_MS`: what each answer takes, as pveproxy and pvedaemon
    // take it on a real cluster (the benchmark's slow Proxmox).
    let latency =
        std::time::Duration::from_millis(setting("SIM_API_MS", "a number of milliseconds", 0)?);
    let router = routes::router(api.clone()).layer(axum::middleware::from_fn(
        move |request: axum::extract::Request, next: axum::middleware::Next| async move {
            if !latency.is_zero() {
                tokio::time::sleep(latency).await;
            }
            next.run(request).await
        },
    ));

    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .map_err(|source| ServeError::Listen { port, source })?;
    let port = listener.local_addr().map_err(ServeError::Socket)?.port();
    let url = format!("https://127.0.0.1:{port}/api2/json");
    let about = serde_json::json!({
        "url": url,
        "fingerprint": api.fingerprint,
        "token": format!("{}={}", auth::TOKEN_ID, api.secret),
    });
    // Whole or not at all, 0600: it holds the token's secret.
    let about_file = dir.join("api.json");
    write_atomically(&about_file, about.to_string().as_bytes()).map_err(|source| {
        ServeError::File {
            path: about_file.clone(),
            source,
        }
    })?;
    {
        use std::io::Write;
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "{url}");
        let _ = stdout.flush();
    }

    loop {
        let (tcp, _) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                // Out of descriptors and the like: wait, don't spin.
                tracing::warn!("sim api: accept: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let (acceptor, app) = (tls.acceptor.clone(), router.clone());
        tokio::spawn(async move {
            let Ok(stream) = acceptor.accept(tcp).await else {
                return;
            };
            let service = hyper_util::service::TowerToHyperService::new(app);
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                // The consoles' `vncwebsocket` upgrades the connection.
                .with_upgrades()
                .await;
        });
    }
}

/// `{"data": …}`, Proxmox's success envelope.
fn data(value: impl serde::Serialize) -> axum::response::Response {
    use axum::response::IntoResponse;
    axum::Json(serde_json::json!({ "data": value })).into_response()
}

type ApiResult = Result<axum::response::Response, ApiError>;
