//! `https://` and `wss://` served directly: a rustls acceptor from PEM files, reloaded when the
//! files change (checked at most once a second, on accept), so renewed certificates take effect
//! without a restart. A new pair that does not load keeps the old one in service.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use prometheus_client::metrics::counter::Counter;
use tokio_rustls::rustls::pki_types::pem::{self, PemObject};
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::{self, ServerConfig};
use tokio_rustls::TlsAcceptor;

use crate::lock::Recover;

/// How often the files' modification times are looked at.
const RECHECK: Duration = Duration::from_secs(1);

/// What identifies one version of the two files: modification time and length of each.
type Stamp = [Option<(SystemTime, u64)>; 2];

struct Current {
    acceptor: TlsAcceptor,
    stamp: Stamp,
    checked: Instant,
}

/// A TLS acceptor that follows its certificate and key files.
pub struct ReloadingTls {
    cert: PathBuf,
    key: PathBuf,
    current: Mutex<Current>,
    failures: Counter,
}

impl std::fmt::Debug for ReloadingTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReloadingTls")
            .field("cert", &self.cert)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl ReloadingTls {
    /// Loads the certificate chain and key; an error names the file that is wrong.
    /// Failed reloads are counted in `failures`.
    pub fn open(cert: &Path, key: &Path, failures: Counter) -> Result<Self, TlsError> {
        let stamp = stamp(cert, key);
        let acceptor = load(cert, key)?;
        Ok(ReloadingTls {
            cert: cert.to_owned(),
            key: key.to_owned(),
            current: Mutex::new(Current {
                acceptor,
                stamp,
                checked: Instant::now(),
            }),
            failures,
        })
    }

    /// The acceptor to use now, reloaded first if the files changed since the last look.
    pub fn acceptor(&self) -> TlsAcceptor {
        let mut current = self.current.lock_or_recover();
        if current.checked.elapsed() >= RECHECK {
            current.checked = Instant::now();
            let now = stamp(&self.cert, &self.key);
            if now != current.stamp {
                // Remembered either way: a bad pair is logged once, not at every accept, and
                // the next change to either file is tried again.
                current.stamp = now;
                match load(&self.cert, &self.key) {
                    Ok(acceptor) => {
                        current.acceptor = acceptor;
                        tracing::info!(cert = %self.cert.display(), "TLS certificate reloaded");
                    }
                    Err(error) => {
                        self.failures.inc();
                        tracing::warn!(%error, "TLS certificate not reloaded; serving the previous one");
                    }
                }
            }
        }
        current.acceptor.clone()
    }
}

fn stamp(cert: &Path, key: &Path) -> Stamp {
    let one = |path: &Path| {
        std::fs::metadata(path)
            .ok()
            .and_then(|m| Some((m.modified().ok()?, m.len())))
    };
    [one(cert), one(key)]
}

/// Why a certificate and key could not be served; each names the file that is wrong.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The certificate file could not be read as PEM.
    #[error("TLS certificate {}: {source}", path.display())]
    Certificate {
        /// The file.
        path: PathBuf,
        /// Why.
        source: pem::Error,
    },
    /// The certificate file holds no certificate.
    #[error("TLS certificate {}: no certificate in the file", path.display())]
    NoCertificate {
        /// The file.
        path: PathBuf,
    },
    /// The key file could not be read as a PEM private key.
    #[error("TLS key {}: {source}", path.display())]
    Key {
        /// The file.
        path: PathBuf,
        /// Why.
        source: pem::Error,
    },
    /// rustls refused the pair (a key that is not the certificate's, an unsupported algorithm).
    #[error("TLS certificate {}: {source}", path.display())]
    Refused {
        /// The certificate file.
        path: PathBuf,
        /// Why.
        source: rustls::Error,
    },
}

fn load(cert: &Path, key: &Path) -> Result<TlsAcceptor, TlsError> {
    let certs = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|source| TlsError::Certificate {
            path: cert.to_owned(),
            source,
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            path: cert.to_owned(),
        });
    }
    let key_der = PrivateKeyDer::from_pem_file(key).map_err(|source| TlsError::Key {
        path: key.to_owned(),
        source,
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|builder| {
            builder
                .with_no_client_auth()
                .with_single_cert(certs, key_der)
        })
        .map_err(|source| TlsError::Refused {
            path: cert.to_owned(),
            source,
        })?;
    // WebSocket upgrades are HTTP/1.1 requests, and this server speaks only HTTP/1.1.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}
