//! The TLS client configuration the model backends dial with: the Mozilla roots built in, plus the
//! certificates of the PEM file named by `SSL_CERT_FILE`, if set (a private CA, a corporate proxy,
//! or `livegate mock-gemini --tls-cert` in tests and benchmarks).
//!
//! Made once per process and shared: building a root store per connection parsed the same
//! certificates again for every session.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use tokio_rustls::rustls::pki_types::pem::{self, PemObject};
use tokio_rustls::rustls::pki_types::CertificateDer;
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore};

/// The environment variable naming extra trusted certificates (as OpenSSL and Python read it).
pub const EXTRA_ROOTS_ENV: &str = "SSL_CERT_FILE";

/// Why a TLS client configuration could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsConfigError {
    /// The extra certificates' file could not be read as PEM.
    #[error("{}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: pem::Error,
    },
    /// The extra certificates' file holds none.
    #[error("{}: no certificates", path.display())]
    NoCertificates {
        /// The file.
        path: PathBuf,
    },
    /// The crypto provider offers none of the safe protocol versions.
    #[error("TLS protocol versions: {0}")]
    Protocols(#[source] rustls::Error),
}

/// For callers whose own errors are still strings (the MCP client's HTTP transport).
impl From<TlsConfigError> for String {
    fn from(error: TlsConfigError) -> Self {
        error.to_string()
    }
}

/// The shared client configuration. A certificate file that cannot be used is logged once and
/// left out, so the built-in roots still work.
pub fn client_config() -> Result<Arc<ClientConfig>, TlsConfigError> {
    static CONFIG: OnceLock<Result<Arc<ClientConfig>, rustls::Error>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let extra = std::env::var_os(EXTRA_ROOTS_ENV).map(PathBuf::from);
            let roots = roots(extra.as_deref()).unwrap_or_else(|error| {
                tracing::warn!(%error, "{EXTRA_ROOTS_ENV} not used");
                builtin_roots()
            });
            with_roots(roots)
        })
        .clone()
        .map_err(TlsConfigError::Protocols)
}

/// A configuration trusting the built-in roots and the certificates in `extra_roots`.
pub fn build(extra_roots: Option<&Path>) -> Result<Arc<ClientConfig>, TlsConfigError> {
    with_roots(roots(extra_roots)?).map_err(TlsConfigError::Protocols)
}

fn builtin_roots() -> RootCertStore {
    let mut roots = RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    roots
}

/// The built-in roots and the certificates in `extra_roots`.
fn roots(extra_roots: Option<&Path>) -> Result<RootCertStore, TlsConfigError> {
    let mut roots = builtin_roots();
    if let Some(path) = extra_roots {
        let certs = CertificateDer::pem_file_iter(path)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .map_err(|source| TlsConfigError::Read {
                path: path.to_owned(),
                source,
            })?;
        if certs.is_empty() {
            return Err(TlsConfigError::NoCertificates {
                path: path.to_owned(),
            });
        }
        let (_, ignored) = roots.add_parsable_certificates(certs);
        if ignored > 0 {
            tracing::warn!(ignored, path = %path.display(), "certificates not usable as roots");
        }
    }
    Ok(roots)
}

fn with_roots(roots: RootCertStore) -> Result<Arc<ClientConfig>, rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extra_roots_come_from_a_pem_file_and_a_bad_one_is_an_error() {
        let cert =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tls/cert.pem");
        assert!(build(Some(&cert)).is_ok());
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "").unwrap();
        assert!(build(Some(&empty))
            .unwrap_err()
            .to_string()
            .contains("no certificates"));
        assert!(build(Some(&dir.path().join("missing.pem"))).is_err());
        assert!(build(None).is_ok());
    }
}
