//! Wires configuration, backend, engine and routes together and serves them.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use app::backend::SharedBackend;
use app::{App, OUTPUT_NAME, shell};
use axum::Router;
use leptos::prelude::*;
use leptos_axum::{LeptosRoutes, generate_route_list};
use pvedeck_config::{BackendKind, Config};
use pvedeck_mirror::{Http, ImageError, Mirror};
use pvedeck_proxmox::Pve;
use pvedeck_sim::{SimCluster, SimInternet};
use pvedeck_support::clock::Clock;
use tokio::net::TcpListener;

use crate::api::{self, AppState};
use crate::engine::{Clusters, Engine, Parts};
use crate::jobs::Jobs;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Sim(#[from] pvedeck_sim::SimError),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error(transparent)]
    Engine(#[from] crate::engine::EngineError),
    #[error(transparent)]
    Http(#[from] ImageError),
    #[error(transparent)]
    Api(#[from] pvedeck_proxmox::api::client::SetupError),
    #[error("the Proxmox API is not ready for pvedeck:\n  - {}", .0.join("\n  - "))]
    Preflight(Vec<String>),
    #[error("PVE_BACKEND=api without its settings")]
    NoApiSettings,
    #[error("MAIN_NODE={0} is not a node of the simulated cluster ({1})")]
    NoSuchSimNode(String, String),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    SignIn(#[from] crate::engine::signin::SignInError),
    #[error("{var}: {source}")]
    Keyring {
        var: String,
        source: pvedeck_mirror::signature::KeyringError,
    },
    #[error("server stopped: {0}")]
    Serve(std::io::Error),
    #[error("cannot serve HTTPS: {0}")]
    Tls(#[from] crate::tls::TlsError),
}

/// A replica's name when `REPLICA_NAME` is unset: the host's, and a random
/// suffix so that two processes on one host (or a restart within a lease)
/// are two replicas.
fn replica_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| {
            h.trim()
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
                .take(48)
                .collect::<String>()
        })
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "pvedeck".to_string());
    let mut suffix = [0u8; 3];
    if getrandom::fill(&mut suffix).is_err() {
        // No randomness: the process id still tells two processes apart.
        return format!("{host}-{}", std::process::id());
    }
    format!(
        "{host}-{}",
        suffix
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    )
}

impl StartError {
    /// A setting that cannot work (exit 2, as a bad value does), rather
    /// than a failure while serving.
    pub fn is_bad_config(&self) -> bool {
        matches!(
            self,
            StartError::Store(crate::store::StoreError::Connect { .. })
        )
    }
}

pub fn init_tracing(filter: &str) -> Result<(), String> {
    let filter = tracing_subscriber::EnvFilter::try_new(filter).map_err(|e| e.to_string())?;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .try_init()
        .map_err(|e| e.to_string())
}

/// `IMAGE_VERIFY_<OS>` and `IMAGE_KEYRING_<OS>` as the engine holds them:
/// each keyring read once, here, so that a file that cannot be read or
/// holds no key stops the start instead of failing every install.
fn image_policy(
    config: &Config,
) -> Result<BTreeMap<pvedeck_domain::os::Os, crate::engine::images::Policy>, StartError> {
    use crate::engine::images::Policy;
    use pvedeck_config::ImageVerify;
    let mut policy = BTreeMap::new();
    for (os, verify) in &config.image_verify {
        let rule = match verify {
            ImageVerify::Checksum => Policy::Checksum,
            ImageVerify::Unchecked => Policy::Unchecked,
            ImageVerify::Signed(path) => {
                let keyring = pvedeck_mirror::signature::Keyring::load(path).map_err(|source| {
                    StartError::Keyring {
                        var: format!("IMAGE_KEYRING_{}", os.name().to_ascii_uppercase()),
                        source,
                    }
                })?;
                tracing::info!(
                    os = %os,
                    keyring = %path.display(),
                    keys = %keyring.fingerprints().join(", "),
                    "checksum lists must be signed"
                );
                Policy::Signed(Arc::new(keyring))
            }
        };
        policy.insert(*os, rule);
    }
    Ok(policy)
}

/// Builds the whole application for a configuration.
pub fn build(config: Config) -> Result<Router, StartError> {
    assemble(config).map(|(router, _)| router)
}

/// What can be checked of a real cluster before anyone asks: with the
/// `api` backend, a wrong certificate, token or privilege stops the start
/// with what to change.
async fn preflight(config: &Config) -> Result<(), StartError> {
    for cluster in std::iter::once(config).chain(config.other_clusters.iter()) {
        if cluster.backend != BackendKind::Api {
            continue;
        }
        api_backend(cluster)?
            .preflight(cluster)
            .await
            .map_err(StartError::Preflight)?;
    }
    Ok(())
}

fn api_backend(config: &Config) -> Result<pvedeck_proxmox::api::backend::ApiBackend, StartError> {
    let settings = config.pve_api.as_ref().ok_or(StartError::NoApiSettings)?;
    let client = pvedeck_proxmox::api::client::ApiClient::new(settings)?;
    Ok(pvedeck_proxmox::api::backend::ApiBackend::new(
        client,
        config.import_storage.clone(),
        config.image_fetch,
        pvedeck_proxmox::cli::CliBackend::new(config),
    ))
}

/// One cluster's way to Proxmox: its backend, where its images come from,
/// its clock, and the simulated cluster when it is one.
type Backend = (
    Arc<dyn Pve>,
    Arc<dyn Mirror>,
    Clock,
    Option<Arc<SimCluster>>,
);

fn backend(config: &Config, web: &Http) -> Result<Backend, StartError> {
    // The simulated cluster brings its own clock and internet; a real one
    // runs on wall-clock time and the web.
    Ok(match config.backend {
        BackendKind::Sim => {
            let sim = Arc::new(SimCluster::open(config)?);
            let names = sim.node_names();
            if !names.contains(&config.main_node) {
                return Err(StartError::NoSuchSimNode(
                    config.main_node.clone(),
                    names.join(", "),
                ));
            }
            let clock = Clock::new(config.sim_speed);
            let internet =
                SimInternet::new(clock, web.clone(), config.image_base.values().cloned());
            (sim.clone(), Arc::new(internet), clock, Some(sim))
        }
        BackendKind::Cli => (
            Arc::new(pvedeck_proxmox::cli::CliBackend::new(config)),
            Arc::new(web.clone()),
            Clock::real(),
            None,
        ),
        BackendKind::Api => {
            let settings = config.pve_api.as_ref().ok_or(StartError::NoApiSettings)?;
            if matches!(settings.trust, pvedeck_config::pve_api::Trust::Insecure) {
                tracing::warn!(
                    cluster = config.cluster,
                    "PVE_API_INSECURE=1: the Proxmox API's certificate is not checked; whoever \
                     answers at {} gets the API token. Set PVE_API_FINGERPRINT instead.",
                    settings.url
                );
            }
            let backend = api_backend(config)?;
            (
                Arc::new(backend),
                Arc::new(web.clone()),
                Clock::real(),
                None,
            )
        }
    })
}

/// The application and its clusters' engines (which the SIGTERM sequence
/// stops). The jobs a killed predecessor left running are reconciled from
/// here on.
fn assemble(config: Config) -> Result<(Router, Arc<Clusters>), StartError> {
    let config = Arc::new(config);
    let web = Http::new()?;
    let sqlite = config.data_dir.join("pvedeck.db");
    let store = crate::store::open(match &config.database_url {
        Some(url) => crate::store::Location::Postgres(url.expose()),
        None => crate::store::Location::Sqlite(&sqlite),
    })?;
    match &config.database_url {
        Some(url) => tracing::info!(database = %url, "store: PostgreSQL"),
        None => tracing::info!(database = %sqlite.display(), "store: SQLite"),
    }
    let replica = crate::jobs::Replica {
        name: config.replica_name.clone().unwrap_or_else(replica_name),
        lease: config.job_lease,
    };
    if store.shared() {
        tracing::info!(
            replica = replica.name,
            lease_secs = replica.lease.as_secs(),
            "replica"
        );
    }
    let jobs = Jobs::on_store(store, config.job_limits, replica)?;
    let audit_cut =
        pvedeck_support::clock::now_ms() - i64::from(config.audit_keep_days) * 86_400_000;
    let pruned = jobs.store().prune_audit(audit_cut)?;
    if pruned > 0 {
        tracing::info!(
            pruned,
            keep_days = config.audit_keep_days,
            "old audit entries removed"
        );
    }
    let image_policy = image_policy(&config)?;
    let mut oidc = config
        .oidc
        .clone()
        .map(crate::engine::signin::Oidc::new)
        .transpose()?;
    let each =
        std::iter::once(config.clone()).chain(config.other_clusters.iter().cloned().map(Arc::new));
    let mut engines = Vec::new();
    let mut sims = BTreeMap::new();
    let consoles = Arc::new(crate::engine::console::Consoles::new(config.consoles));
    for cluster in each {
        let (pve, mirror, clock, sim) = backend(&cluster, &web)?;
        if let Some(sim) = sim {
            sims.insert(cluster.cluster.clone(), sim);
        }
        let directory = Arc::new(crate::engine::directory::Directory::open(
            jobs.store().clone(),
            &cluster.cluster,
        )?);
        directory.start_refresher();
        let engine = Arc::new(Engine::new(
            cluster.clone(),
            Parts {
                pve,
                mirror,
                clock,
                jobs: jobs.clone(),
                directory,
                // Sign-in is the default cluster's, for all of them.
                oidc: oidc.take(),
                image_policy: image_policy.clone(),
                consoles: consoles.clone(),
            },
        ));
        engine.adopt_owners();
        let orphans = engine.reconcile()?;
        if orphans > 0 {
            tracing::warn!(
                orphans,
                cluster = cluster.cluster,
                "reconciling jobs a previous process left running"
            );
        }
        engine.start_replica();
        engines.push(engine);
    }
    if !config.other_clusters.is_empty() {
        let names: Vec<&str> = engines
            .iter()
            .map(|e| e.config().cluster.as_str())
            .collect();
        tracing::info!(clusters = %names.join(", "), "serving several clusters");
    }
    let clusters = Arc::new(Clusters::new(engines)?);
    let engine = clusters.first().clone();

    let leptos = LeptosOptions::builder()
        .output_name(OUTPUT_NAME)
        .site_root(config.site_root.to_string_lossy().as_ref())
        .site_pkg_dir("pkg")
        .build();
    let state = AppState {
        leptos: leptos.clone(),
        engine: engine.clone(),
        clusters: clusters.clone(),
        config,
        sims: Arc::new(sims),
    };

    let backend = SharedBackend(Arc::new(crate::ui::UiBackend(clusters.clone())));
    let context = move || {
        provide_context(backend.clone());
        // The page's nonce, the one its Content-Security-Policy names
        // (`api::headers`), in place of the one Leptos made up.
        let nonce = use_context::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<api::headers::CspNonce>().cloned());
        if let Some(api::headers::CspNonce(nonce)) = nonce {
            provide_context(leptos::nonce::Nonce::from_value(nonce));
        }
    };
    let routes = generate_route_list(App);

    let router = Router::new()
        .nest("/api", api::router())
        .route("/sh/{name}", axum::routing::get(api::sh::script))
        .route("/metrics", axum::routing::get(api::metrics))
        .route("/auth/login", axum::routing::get(api::auth::login))
        .route("/auth/callback", axum::routing::get(api::auth::callback))
        .leptos_routes_with_context(&state, routes, context.clone(), move || {
            shell(leptos.clone())
        })
        .fallback(leptos_axum::file_and_error_handler_with_context::<
            AppState,
            _,
        >(context, shell))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            api::middleware::identify,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            api::middleware::guard_cross_site,
        ))
        .layer(axum::middleware::from_fn(api::middleware::limit_body))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            api::headers::security_headers,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            api::middleware::log_request,
        ))
        .with_state(state);
    Ok((router, clusters))
}

/// The address to print for people: a wildcard bind is reachable on loopback.
fn url_for(addr: SocketAddr, https: bool) -> String {
    let ip = match addr.ip() {
        ip if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        ip => ip,
    };
    let scheme = if https { "https" } else { "http" };
    format!("{scheme}://{}", SocketAddr::new(ip, addr.port()))
}

/// Where connections come from: the TCP listener, or its TLS sessions.
enum Listening {
    Plain(TcpListener),
    Tls(crate::tls::TlsListener),
}

impl Listening {
    fn new(tcp: TcpListener, config: &Config) -> Result<Listening, StartError> {
        Ok(match config.tls.clone() {
            None => Listening::Plain(tcp),
            Some(files) => Listening::Tls(crate::tls::TlsListener::new(tcp, files)?),
        })
    }
}

/// Serves `router` on `listener` until `stop` resolves (then lets open
/// connections finish).
async fn serve_on<L>(
    listener: L,
    router: Router,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()>
where
    L: axum::serve::Listener<Addr = SocketAddr>,
{
    use axum::serve::ListenerExt;
    // Tapped (with nothing): axum gives the peer's address as
    // `ConnectInfo` for any listener so wrapped, the TLS one included.
    axum::serve(
        listener.tap_io(|_: &mut L::Io| {}),
        router.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(stop)
    .await
}

async fn serve_listening(
    listening: Listening,
    router: Router,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    match listening {
        Listening::Plain(tcp) => serve_on(tcp, router, stop).await,
        Listening::Tls(tls) => serve_on(tls, router, stop).await,
    }
}

/// A server running in the background (tests, benchmarks).
pub struct Running {
    pub addr: SocketAddr,
    pub url: String,
    pub task: tokio::task::JoinHandle<()>,
}

pub async fn bind(config: &Config) -> Result<TcpListener, StartError> {
    let addr = SocketAddr::new(config.bind, config.port);
    TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Bind { addr, source })
}

fn local_addr(listener: &TcpListener) -> Result<SocketAddr, StartError> {
    listener.local_addr().map_err(StartError::Serve)
}

/// Starts serving on a task and returns at once.
pub async fn spawn(config: Config) -> Result<Running, StartError> {
    let listener = bind(&config).await?;
    let addr = local_addr(&listener)?;
    let https = config.tls.is_some();
    preflight(&config).await?;
    let listening = Listening::new(listener, &config)?;
    let router = build(config)?;
    let task = tokio::spawn(async move {
        let forever = std::future::pending::<()>();
        if let Err(e) = serve_listening(listening, router, forever).await {
            tracing::error!("server stopped: {e}");
        }
    });
    Ok(Running {
        addr,
        url: url_for(addr, https),
        task,
    })
}

/// Serves until Ctrl-C or SIGTERM.
pub async fn serve(config: Config) -> Result<(), StartError> {
    let listener = bind(&config).await?;
    let addr = local_addr(&listener)?;
    let backend = config.backend;
    if let Some(risk) = config.exposure() {
        // Before the listening line: whoever starts it reads this first.
        eprintln!("WARNING: {risk}");
        tracing::warn!("{risk}");
    }
    preflight(&config).await?;
    let https = config.tls.is_some();
    let listening = Listening::new(listener, &config)?;
    let (router, clusters) = assemble(config)?;
    let mut notes = Vec::new();
    for engine in clusters.all() {
        let several = clusters.all().len() > 1;
        for (level, note) in engine.startup_notes().await {
            notes.push(match several {
                true => (
                    level,
                    format!("cluster {}: {note}", engine.config().cluster),
                ),
                false => (level, note),
            });
        }
    }
    for (level, note) in notes {
        match level {
            crate::engine::startup::Level::Warning => {
                eprintln!("WARNING: {note}");
                tracing::warn!("{note}");
            }
            crate::engine::startup::Level::Note => tracing::info!("{note}"),
        }
    }
    // Scripts (and the test runner) wait for this line rather than poll.
    println!(
        "pvedeck listening on {} (backend: {backend})",
        url_for(addr, https)
    );
    tracing::info!(%addr, %backend, "listening");
    // The server keeps answering through the grace (new jobs get 503,
    // streams go on); it stops accepting once the engine has stopped.
    let stopped = Arc::new(tokio::sync::Notify::new());
    let stop = {
        let stopped = stopped.clone();
        async move {
            shutdown_signal().await;
            futures_util::future::join_all(clusters.all().iter().map(|e| e.shut_down())).await;
            stopped.notify_one();
        }
    };
    let server = serve_listening(listening, router, stop);
    // Every job stream has had its last event by now; a connection that
    // stays open (a page's cluster view) does not hold the exit.
    let linger = async {
        stopped.notified().await;
        tokio::time::sleep(CONNECTIONS_GRACE).await;
    };
    tokio::select! {
        served = server => served.map_err(StartError::Serve)?,
        () = linger => tracing::info!("connections still open at exit: closed"),
    }
    println!("pvedeck stopped");
    Ok(())
}

/// How long open connections may finish after the jobs have.
const CONNECTIONS_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("shutting down");
}
