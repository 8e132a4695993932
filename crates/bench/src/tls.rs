//! The `shared+tls` rows: Gantry terminating TLS itself (`server.tls`) with a
//! self-signed certificate for 127.0.0.1 made at start, and the load generator's
//! connections speaking TLS 1.3 to it, trusting only that certificate.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// What the generator's connections trust, once `shared+tls` is measured.
static CLIENT: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();

/// The certificate and key Gantry serves, as PEM files.
pub(crate) struct Tls {
    cert: PathBuf,
    key: PathBuf,
}

impl Tls {
    /// Makes a certificate for 127.0.0.1 in `dir` and trusts it for the generator.
    pub(crate) fn make(dir: &Path) -> Result<Self> {
        let key = rcgen::KeyPair::generate().context("cannot make a TLS key")?;
        let mut params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
            .context("certificate parameters")?;
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "gantry-bench");
        let cert = params
            .self_signed(&key)
            .context("cannot sign the certificate")?;
        let paths = Self {
            cert: dir.join("tls-cert.pem"),
            key: dir.join("tls-key.pem"),
        };
        std::fs::write(&paths.cert, cert.pem()).context("cannot write the certificate")?;
        std::fs::write(&paths.key, key.serialize_pem()).context("cannot write the key")?;
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(cert.der().clone())
            .context("cannot trust the certificate")?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .context("TLS versions")?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let _ = CLIENT.set(Arc::new(config));
        Ok(paths)
    }

    /// The `tls = { … }` line of Gantry's `[server]`.
    pub(crate) fn server_line(&self) -> String {
        let cert = toml::Value::String(self.cert.display().to_string());
        let key = toml::Value::String(self.key.display().to_string());
        format!("tls = {{ cert = {cert}, key = {key} }}\n")
    }
}

/// A connector for `https://` URLs, once [`Tls::make`] has run.
pub(crate) fn connector() -> Option<tokio_rustls::TlsConnector> {
    CLIENT
        .get()
        .map(|c| tokio_rustls::TlsConnector::from(c.clone()))
}
