//! HTTPS served by pvedeck itself (`TLS_CERT_FILE`, `TLS_KEY_FILE`): rustls
//! with ring, as everywhere in pvedeck. The certificate is read at start
//! (a bad one stops the start, naming the file) and again on `SIGHUP`, so
//! a renewed certificate (certbot, an ACME hook) is taken without a
//! restart; a reload that fails keeps the certificate in use and says why.
//!
//! Handshakes run on tasks of their own, each under a deadline: a client
//! that opens a connection and says nothing holds neither the accept loop
//! nor anyone else's handshake.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pvedeck_config::TlsFiles;
use rustls::crypto::ring as provider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// How long a client may take to finish its handshake.
const HANDSHAKE: Duration = Duration::from_secs(10);
/// Finished handshakes waiting for the server to take them.
const READY: usize = 256;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{}: {source}", file.display())]
    Pem {
        file: PathBuf,
        source: rustls::pki_types::pem::Error,
    },
    #[error("{}: holds no certificate", .0.display())]
    NoCertificate(PathBuf),
    #[error("{}: not a key rustls can sign with: {source}", file.display())]
    Key {
        file: PathBuf,
        source: rustls::Error,
    },
    #[error("{}: the key is not the certificate's: {source}", file.display())]
    Mismatch {
        file: PathBuf,
        source: rustls::Error,
    },
    #[error("TLS: {0}")]
    Rustls(#[from] rustls::Error),
}

/// The certificate and key of `files`, checked to belong together.
pub fn load(files: &TlsFiles) -> Result<Arc<CertifiedKey>, TlsError> {
    fn pem(file: &Path) -> impl Fn(rustls::pki_types::pem::Error) -> TlsError + '_ {
        move |source| TlsError::Pem {
            file: file.to_path_buf(),
            source,
        }
    }
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .map_err(pem(&files.cert))?
        .collect::<Result<_, _>>()
        .map_err(pem(&files.cert))?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate(files.cert.clone()));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(pem(&files.key))?;
    let signer = provider::sign::any_supported_type(&key).map_err(|source| TlsError::Key {
        file: files.key.clone(),
        source,
    })?;
    let certified = CertifiedKey::new(chain, signer);
    certified
        .keys_match()
        .map_err(|source| TlsError::Mismatch {
            file: files.key.clone(),
            source,
        })?;
    Ok(Arc::new(certified))
}

/// The certificate in use, replaced whole by a reload.
#[derive(Debug)]
struct Current(Mutex<Arc<CertifiedKey>>);

impl ResolvesServerCert for Current {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(pvedeck_support::sync::lock(&self.0).clone())
    }
}

/// A TCP listener whose connections come out as finished TLS sessions.
pub struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    addr: SocketAddr,
}

impl TlsListener {
    /// Serves `files`' certificate on `tcp`, read again on every `SIGHUP`.
    pub fn new(tcp: TcpListener, files: TlsFiles) -> Result<TlsListener, TlsError> {
        let addr = tcp.local_addr().map_err(|e| {
            TlsError::Rustls(rustls::Error::General(format!("no local address: {e}")))
        })?;
        let current = Arc::new(Current(Mutex::new(load(&files)?)));
        let config =
            rustls::ServerConfig::builder_with_provider(Arc::new(provider::default_provider()))
                .with_safe_default_protocol_versions()?
                .with_no_client_auth()
                .with_cert_resolver(current.clone());
        let mut config = config;
        // HTTP/1.1 only: the server speaks nothing else.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let acceptor = TlsAcceptor::from(Arc::new(config));
        tokio::spawn(reload_on_hangup(files, current));
        let (sender, ready) = mpsc::channel(READY);
        tokio::spawn(accept_loop(tcp, acceptor, sender));
        Ok(TlsListener { ready, addr })
    }
}

async fn reload_on_hangup(files: TlsFiles, current: Arc<Current>) {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut hangups) = signal(SignalKind::hangup()) else {
        tracing::warn!("no SIGHUP handler: the certificate is read at start only");
        return;
    };
    while hangups.recv().await.is_some() {
        match load(&files) {
            Ok(fresh) => {
                *pvedeck_support::sync::lock(&current.0) = fresh;
                tracing::info!(cert = %files.cert.display(), "SIGHUP: certificate reloaded");
            }
            Err(e) => tracing::error!("SIGHUP: certificate not reloaded, the old one stays: {e}"),
        }
    }
}

async fn accept_loop(
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    ready: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
) {
    loop {
        let (stream, peer) = match tcp.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors and the like: axum's own loop
                // waits a moment too, rather than spin.
                tracing::warn!("accept: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let (acceptor, handed) = (acceptor.clone(), ready.clone());
        tokio::spawn(async move {
            match tokio::time::timeout(HANDSHAKE, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => {
                    let _ = handed.send((tls, peer)).await;
                }
                Ok(Err(e)) => tracing::debug!(%peer, "TLS handshake failed: {e}"),
                Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
            }
        });
        if ready.is_closed() {
            return;
        }
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(accepted) => accepted,
            // The accept loop ended: nothing will come again.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.addr)
    }
}
