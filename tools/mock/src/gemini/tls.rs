//! `wss://` for the mock: a rustls acceptor from PEM files and an axum listener that hands out
//! connections once their handshake is done (handshakes run in their own tasks, so a client that
//! stalls in one never holds up the others).

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::serve::Listener;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::{self, ServerConfig};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use super::TlsFiles;

/// Longest a client may take to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshaken connections waiting for axum to take them.
const ACCEPTED_BACKLOG: usize = 64;

/// A TLS acceptor serving the certificate and key in `files`.
pub(super) fn acceptor(files: &TlsFiles) -> io::Result<TlsAcceptor> {
    let invalid = |what: &str, path: &std::path::Path, error: &dyn std::fmt::Display| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{what} {}: {error}", path.display()),
        )
    };
    let certs = CertificateDer::pem_file_iter(&files.cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| invalid("TLS certificate", &files.cert, &e))?;
    let key =
        PrivateKeyDer::from_pem_file(&files.key).map_err(|e| invalid("TLS key", &files.key, &e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|builder| builder.with_no_client_auth().with_single_cert(certs, key))
        .map_err(|e| invalid("TLS certificate", &files.cert, &e))?;
    // WebSocket upgrades are HTTP/1.1 requests.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Accepts TCP connections and yields them to axum after their TLS handshake.
pub(super) struct TlsListener {
    addr: SocketAddr,
    accepted: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
}

impl TlsListener {
    /// Starts accepting on `listener`; stops when the returned listener is dropped.
    pub(super) fn new(listener: TcpListener, acceptor: TlsAcceptor) -> io::Result<Self> {
        let addr = listener.local_addr()?;
        let (sender, accepted) = mpsc::channel(ACCEPTED_BACKLOG);
        tokio::spawn(accept_loop(listener, acceptor, sender));
        Ok(TlsListener { addr, accepted })
    }
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    accepted: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
) {
    loop {
        let (tcp, peer) = tokio::select! {
            result = listener.accept() => match result {
                Ok(connection) => connection,
                Err(error) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(%error, "mock-gemini could not accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = accepted.closed() => return,
        };
        let acceptor = acceptor.clone();
        let accepted = accepted.clone();
        tokio::spawn(async move {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(stream)) => {
                    let _ = accepted.send((stream, peer)).await;
                }
                Ok(Err(error)) => tracing::debug!(%error, %peer, "TLS handshake failed"),
                Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
            }
        });
    }
}

impl Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.accepted.recv().await {
            Some(connection) => connection,
            // The accept loop only ends once this listener is gone, so this is never reached.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.addr)
    }
}
