//! TLS to an `https://` upstream: which certificate authorities are
//! trusted, and the errors of setting that up.
//!
//! The upstream's certificate is verified against the system's CA
//! certificates, or, when a CA file is given, against that file's
//! certificates instead (an upstream whose certificate a private CA
//! signed). The name checked is the upstream URL's host. Client
//! certificates are not offered.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::{ClientConfig, RootCertStore};

/// Why TLS to the upstream cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamTlsError {
    /// The CA file cannot be read.
    #[error("upstream CA file {path}: {error}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// The CA file holds no usable certificate.
    #[error("upstream CA file {path}: {reason}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The system has no CA certificates to trust, and no CA file was
    /// given.
    #[error(
        "no CA certificates found on this system to verify the https:// upstream; give a CA file (--upstream-tls-ca)"
    )]
    NoSystemRoots,
    /// TLS configuration refused by rustls.
    #[error("TLS to the upstream: {0}")]
    Config(String),
}

/// The TLS client configuration for an `https://` upstream: trusting the
/// certificates of the PEM file `ca`, or the system's when `None`.
pub(crate) fn client_config(ca: Option<&Path>) -> Result<ClientConfig, UpstreamTlsError> {
    let roots = match ca {
        Some(path) => file_roots(path)?,
        None => system_roots()?,
    };
    with_roots(roots)
}

/// A configuration that trusts nothing: for `http://` upstreams, where the
/// connector needs one but never uses it.
pub(crate) fn unused_config() -> Result<ClientConfig, UpstreamTlsError> {
    with_roots(RootCertStore::empty())
}

fn with_roots(roots: RootCertStore) -> Result<ClientConfig, UpstreamTlsError> {
    // ring, explicitly: the tree has no other provider, and rustls will
    // not guess one.
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| UpstreamTlsError::Config(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

fn file_roots(path: &Path) -> Result<RootCertStore, UpstreamTlsError> {
    let unusable = |reason: String| UpstreamTlsError::Pem {
        path: path.to_owned(),
        reason,
    };
    let pem = std::fs::read(path).map_err(|error| UpstreamTlsError::Read {
        path: path.to_owned(),
        error,
    })?;
    let certificates = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| unusable(e.to_string()))?;
    if certificates.is_empty() {
        return Err(unusable("it holds no PEM certificate".to_owned()));
    }
    let mut roots = RootCertStore::empty();
    for certificate in certificates {
        roots
            .add(certificate)
            .map_err(|e| unusable(e.to_string()))?;
    }
    Ok(roots)
}

fn system_roots() -> Result<RootCertStore, UpstreamTlsError> {
    let found = rustls_native_certs::load_native_certs();
    for error in &found.errors {
        tracing::warn!(%error, "a system CA certificate could not be read");
    }
    let mut roots = RootCertStore::empty();
    let (_added, ignored) = roots.add_parsable_certificates(found.certs);
    if ignored > 0 {
        tracing::warn!(
            ignored,
            "system CA certificates rustls cannot use were skipped"
        );
    }
    if roots.is_empty() {
        return Err(UpstreamTlsError::NoSystemRoots);
    }
    Ok(roots)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unusable_ca_files_are_errors_naming_them() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let error = client_config(Some(&missing)).unwrap_err().to_string();
        assert!(error.contains("missing.pem"), "{error}");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let error = client_config(Some(&empty)).unwrap_err().to_string();
        assert!(
            error.contains("empty.pem") && error.contains("no PEM"),
            "{error}"
        );
        let broken = dir.path().join("broken.pem");
        std::fs::write(
            &broken,
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let error = client_config(Some(&broken)).unwrap_err().to_string();
        assert!(error.contains("broken.pem"), "{error}");
    }
}
