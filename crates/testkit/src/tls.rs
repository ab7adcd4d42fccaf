//! TLS for test servers: [`TestCertificates`] makes a private CA, a server
//! certificate for `127.0.0.1` and `localhost` and a client certificate, both
//! signed by that CA, and writes them as PEM files; [`exchange`] talks to a
//! TLS server with them, so a TLS-only `redis-server` can be asked whether it
//! answers. Everything is generated at test time (rcgen); no key material is
//! checked in.
//!
//! This module does not configure tollgate: tests hand the files' paths to
//! the store under test, as an operator would.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// PEM files of a private CA, and of a server and a client certificate it
/// signed.
#[derive(Debug, Clone)]
pub struct TestCertificates {
    /// The CA's certificate: what a client must trust.
    pub ca: PathBuf,
    /// The server's certificate, for `127.0.0.1` and `localhost`.
    pub server_cert: PathBuf,
    /// The server's private key.
    pub server_key: PathBuf,
    /// A client certificate, for servers that require one (mutual TLS).
    pub client_cert: PathBuf,
    /// The client certificate's private key.
    pub client_key: PathBuf,
}

impl TestCertificates {
    /// Generates the CA and both certificates into `dir` (`ca.pem`,
    /// `server.pem`, `server.key`, `client.pem`, `client.key`).
    pub fn generate(dir: &Path) -> TestCertificates {
        let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "tollgate test CA");
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_key = KeyPair::generate().expect("a CA key");
        let ca_cert = ca.self_signed(&ca_key).expect("the CA certificate");
        let issuer = Issuer::new(ca, ca_key);

        let leaf = |names: Vec<String>, name: &str, usage| {
            let mut params = CertificateParams::new(names).expect("certificate parameters");
            params.distinguished_name.push(DnType::CommonName, name);
            params.use_authority_key_identifier_extension = true;
            params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
            params.extended_key_usages = vec![usage];
            let key = KeyPair::generate().expect("a key");
            let cert = params
                .signed_by(&key, &issuer)
                .expect("a signed certificate");
            (cert.pem(), key.serialize_pem())
        };
        let (server_cert, server_key) = leaf(
            vec!["127.0.0.1".to_owned(), "localhost".to_owned()],
            "localhost",
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        let (client_cert, client_key) = leaf(
            Vec::new(),
            "tollgate test client",
            ExtendedKeyUsagePurpose::ClientAuth,
        );

        let write = |name: &str, pem: &str| {
            let path = dir.join(name);
            std::fs::write(&path, pem).expect("writing a PEM file");
            path
        };
        TestCertificates {
            ca: write("ca.pem", &ca_cert.pem()),
            server_cert: write("server.pem", &server_cert),
            server_key: write("server.key", &server_key),
            client_cert: write("client.pem", &client_cert),
            client_key: write("client.key", &client_key),
        }
    }

    /// A client configuration that trusts the CA and presents the client
    /// certificate when asked.
    fn client_config(&self) -> Arc<rustls::ClientConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(&self.ca).expect("the CA file") {
            roots
                .add(cert.expect("a CA certificate"))
                .expect("a trust anchor");
        }
        let chain = CertificateDer::pem_file_iter(&self.client_cert)
            .expect("the client certificate file")
            .collect::<Result<Vec<_>, _>>()
            .expect("client certificates");
        let key = PrivateKeyDer::from_pem_file(&self.client_key).expect("the client key");
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .expect("a client identity");
        Arc::new(config)
    }
}

/// Sends `request` over TLS to `127.0.0.1:port` and returns the first
/// chunk of the answer (None when the server is unreachable or the
/// handshake fails).
pub(crate) fn exchange(certs: &TestCertificates, port: u16, request: &[u8]) -> Option<Vec<u8>> {
    let socket = TcpStream::connect(("127.0.0.1", port)).ok()?;
    socket.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    socket
        .set_write_timeout(Some(Duration::from_secs(2)))
        .ok()?;
    let name = ServerName::try_from("127.0.0.1").ok()?;
    let connection = rustls::ClientConnection::new(certs.client_config(), name).ok()?;
    let mut stream = rustls::StreamOwned::new(connection, socket);
    stream.write_all(request).ok()?;
    let mut reply = vec![0; 64 * 1024];
    let n = stream.read(&mut reply).ok()?;
    reply.truncate(n);
    Some(reply)
}
