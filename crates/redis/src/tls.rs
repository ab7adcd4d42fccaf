//! TLS for `rediss://` and `rediss+cluster://`: the PEM files named in
//! [`RedisConfig`] (a CA bundle to trust, a client certificate and key for
//! mutual TLS), read and checked once when the store opens and handed to
//! redis-rs as [`TlsCertificates`]; and the crypto provider rustls needs.
//!
//! A file that cannot be read, holds no certificate (or key), or a
//! certificate whose key does not match it, is a [`TlsError`] naming the
//! file, before any connection is made. This module does not connect; the
//! store does, through redis-rs.

use std::path::{Path, PathBuf};

use redis::{ClientTlsConfig, TlsCertificates};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::endpoint::Endpoint;
use crate::store::RedisConfig;

/// Unusable TLS settings.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read the TLS {what} file {}: {error}", path.display())]
    Read {
        /// Which file: `CA`, `client certificate` or `client key`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why (in the message, so not also a `source()`).
        error: std::io::Error,
    },
    /// A file holds no PEM certificate (or key), or a malformed one.
    #[error("the TLS {what} file {} is not usable: {reason}", path.display())]
    Pem {
        /// Which file: `CA`, `client certificate` or `client key`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A client certificate without its private key.
    #[error("the TLS client certificate {} is given without its private key", cert.display())]
    CertWithoutKey {
        /// The certificate file.
        cert: PathBuf,
    },
    /// A private key without its client certificate.
    #[error("the TLS client key {} is given without its certificate", key.display())]
    KeyWithoutCert {
        /// The key file.
        key: PathBuf,
    },
    /// The certificate and the key do not make a client identity (the key
    /// is not the certificate's, or of an unsupported kind).
    #[error("the TLS client certificate {} and key {} do not go together: {reason}", cert.display(), key.display())]
    Identity {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// rustls's reason.
        reason: String,
    },
    /// TLS files for a store URL that is not TLS.
    #[error(
        "TLS files are given, but {url} is not a TLS URL (use rediss:// or rediss+cluster://)"
    )]
    NotTls {
        /// The URL, with any password masked.
        url: String,
    },
}

/// The certificates to use for `endpoint`: None when the configuration
/// names no TLS file (a TLS endpoint then trusts the system's roots).
pub(crate) fn certificates(
    config: &RedisConfig,
    endpoint: &Endpoint,
) -> Result<Option<TlsCertificates>, TlsError> {
    let (ca, cert, key) = (
        config.tls_ca.as_deref(),
        config.tls_cert.as_deref(),
        config.tls_key.as_deref(),
    );
    let identity = match (cert, key) {
        (Some(cert), Some(key)) => Some((cert, key)),
        (Some(cert), None) => {
            return Err(TlsError::CertWithoutKey {
                cert: cert.to_owned(),
            })
        }
        (None, Some(key)) => {
            return Err(TlsError::KeyWithoutCert {
                key: key.to_owned(),
            })
        }
        (None, None) => None,
    };
    if ca.is_none() && identity.is_none() {
        return Ok(None);
    }
    if !endpoint.is_tls() {
        return Err(TlsError::NotTls {
            url: endpoint.masked_url(),
        });
    }
    let root_cert = ca.map(read_ca).transpose()?;
    let client_tls = identity
        .map(|(cert, key)| read_identity(cert, key))
        .transpose()?;
    Ok(Some(TlsCertificates {
        client_tls,
        root_cert,
    }))
}

/// Gives rustls a process-wide crypto provider (ring) unless the program
/// chose one: redis-rs builds its TLS configurations with rustls's default
/// provider, and rustls has none of its own in this build.
pub(crate) fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Another thread may install one between the check and here; then
        // its choice stands.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|error| TlsError::Read {
        what,
        path: path.to_owned(),
        error,
    })
}

/// The certificates of `pem`, at least one, all well-formed.
fn read_certificates(
    what: &'static str,
    path: &Path,
    pem: &[u8],
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let unusable = |reason: String| TlsError::Pem {
        what,
        path: path.to_owned(),
        reason,
    };
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| unusable(e.to_string()))?;
    if certs.is_empty() {
        return Err(unusable("it holds no PEM certificate".to_owned()));
    }
    Ok(certs)
}

/// The CA bundle, checked to hold trust anchors.
fn read_ca(path: &Path) -> Result<Vec<u8>, TlsError> {
    let pem = read("CA", path)?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in read_certificates("CA", path, &pem)? {
        roots.add(cert).map_err(|e| TlsError::Pem {
            what: "CA",
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
    }
    Ok(pem)
}

/// The client certificate and key, checked to go together.
fn read_identity(cert: &Path, key: &Path) -> Result<ClientTlsConfig, TlsError> {
    let cert_pem = read("client certificate", cert)?;
    let key_pem = read("client key", key)?;
    let chain = read_certificates("client certificate", cert, &cert_pem)?;
    let private_key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| TlsError::Pem {
        what: "client key",
        path: key.to_owned(),
        reason: e.to_string(),
    })?;
    install_crypto_provider();
    rustls::ClientConfig::builder()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_client_auth_cert(chain, private_key)
        .map_err(|e| TlsError::Identity {
            cert: cert.to_owned(),
            key: key.to_owned(),
            reason: e.to_string(),
        })?;
    Ok(ClientTlsConfig {
        client_cert: cert_pem,
        client_key: key_pem,
    })
}
