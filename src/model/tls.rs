//! The TLS client configuration the model backends dial with: the Mozilla roots built in, plus the
//! certificates of the PEM file named by `SSL_CERT_FILE`, if set (a private CA, a corporate proxy,
//! or `livegate mock-gemini --tls-cert` in tests and benchmarks).
//!
//! Made once per process and shared: building a root store per connection parsed the same
//! certificates again for every session.

use std::sync::{Arc, OnceLock};

use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::CertificateDer;
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore};

/// The environment variable naming extra trusted certificates (as OpenSSL and Python read it).
pub const EXTRA_ROOTS_ENV: &str = "SSL_CERT_FILE";

/// The shared client configuration. A certificate file that cannot be used is logged once and
/// left out, so the built-in roots still work.
pub fn client_config() -> Result<Arc<ClientConfig>, String> {
    static CONFIG: OnceLock<Result<Arc<ClientConfig>, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let extra = std::env::var_os(EXTRA_ROOTS_ENV).map(std::path::PathBuf::from);
            build(extra.as_deref()).or_else(|error| {
                tracing::warn!(%error, "{EXTRA_ROOTS_ENV} not used");
                build(None)
            })
        })
        .clone()
}

/// A configuration trusting the built-in roots and the certificates in `extra_roots`.
pub fn build(extra_roots: Option<&std::path::Path>) -> Result<Arc<ClientConfig>, String> {
    let mut roots = RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(path) = extra_roots {
        let certs = CertificateDer::pem_file_iter(path)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .map_err(|e| format!("{}: {e}", path.display()))?;
        if certs.is_empty() {
            return Err(format!("{}: no certificates", path.display()));
        }
        let (_, ignored) = roots.add_parsable_certificates(certs);
        if ignored > 0 {
            tracing::warn!(ignored, path = %path.display(), "certificates not usable as roots");
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
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
        assert!(build(Some(&empty)).unwrap_err().contains("no certificates"));
        assert!(build(Some(&dir.path().join("missing.pem"))).is_err());
        assert!(build(None).is_ok());
    }
}
