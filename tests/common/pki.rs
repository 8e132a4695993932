//! A test CA made at test time and the certificates it signs, for Gantry's TLS
//! listener and the HTTPS backends behind it.

use super::Scratch;
use std::sync::Arc;
use std::time::Duration;

/// A test CA and a certificate it signs for 127.0.0.1 / localhost.
pub struct Pki {
    ca: rcgen::Certificate,
    ca_key: rcgen::KeyPair,
    pub dir: Scratch,
}

impl Pki {
    pub fn new() -> Self {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "Gantry test CA");
        let ca = params.self_signed(&ca_key).unwrap();
        let dir = Scratch::new("tls");
        std::fs::write(dir.file("ca.pem"), ca.pem()).unwrap();
        Self { ca, ca_key, dir }
    }

    /// Writes a new leaf certificate named `cn` to cert.pem / key.pem (key first,
    /// then the certificate, each replaced whole).
    pub fn issue(&self, cn: &str) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params =
            rcgen::CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
                .unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        let cert = params.signed_by(&key, &self.ca, &self.ca_key).unwrap();
        for (name, text) in [("key.pem", key.serialize_pem()), ("cert.pem", cert.pem())] {
            let tmp = self.dir.file(&format!("{name}.tmp"));
            std::fs::write(&tmp, text).unwrap();
            std::fs::rename(&tmp, self.dir.file(name)).unwrap();
        }
    }

    pub fn server_line(&self) -> String {
        format!(
            "tls = {{ cert = {:?}, key = {:?} }}",
            self.dir.file("cert.pem"),
            self.dir.file("key.pem")
        )
    }

    /// The CA certificate's PEM file.
    pub fn ca_file(&self) -> std::path::PathBuf {
        self.dir.file("ca.pem")
    }

    pub fn ca_pem(&self) -> String {
        self.ca.pem()
    }

    /// A reqwest client trusting the test CA.
    pub fn http(&self) -> reqwest::Client {
        reqwest::Client::builder()
            .add_root_certificate(reqwest::Certificate::from_pem(self.ca_pem().as_bytes()).unwrap())
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap()
    }

    /// A TLS connection to Gantry offering `alpn`.
    pub async fn connect(
        &self,
        addr: &str,
        alpn: &[&[u8]],
    ) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca.der().clone()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
        tokio_rustls::TlsConnector::from(Arc::new(cfg))
            .connect(name, tcp)
            .await
            .unwrap()
    }

    /// A TLS handshake with Gantry offering `alpn`: the protocol it chose and the
    /// common name of the certificate it served.
    pub async fn handshake(&self, addr: &str, alpn: &[&[u8]]) -> (Option<Vec<u8>>, String) {
        let tls = self.connect(addr, alpn).await;
        let (_, conn) = tls.get_ref();
        let cert = conn.peer_certificates().unwrap()[0].clone();
        let cn = String::from_utf8_lossy(cert.as_ref()).into_owned();
        (conn.alpn_protocol().map(<[u8]>::to_vec), cn)
    }
}
