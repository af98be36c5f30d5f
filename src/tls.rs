//! TLS with rustls: the certificates of TLS listeners, chosen by SNI and
//! replaceable on reload, and the CA files of `https://` providers.
//!
//! A TLS listener is bound once, at start (or handed over by an upgrade);
//! its certificates are not. Each listener gets a [`SniResolver`] whose
//! certificate set sits behind an `ArcSwap`: a reload loads the files again
//! and swaps the set in, so new handshakes use the new certificate while
//! connections already established keep theirs.

use std::path::Path;
use std::sync::Arc;

use arc_swap::ArcSwap;
use pingora::listeners::TlsAccept;
use pingora::tls::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use crate::config::{Certificate, TlsListener};

/// Why a certificate, key or CA file cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {reason}")]
pub struct TlsFileError {
    pub path: String,
    pub reason: String,
}

fn file_error(path: &Path, reason: impl ToString) -> TlsFileError {
    TlsFileError {
        path: path.display().to_string(),
        reason: reason.to_string(),
    }
}

/// Reads every certificate of a PEM file, each checked to parse as X.509.
fn read_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsFileError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_error(path, e))?
        .collect::<Result<_, _>>()
        .map_err(|e| file_error(path, e))?;
    if certs.is_empty() {
        return Err(file_error(path, "no certificate in the file"));
    }
    for cert in &certs {
        x509_parser::parse_x509_certificate(cert.as_ref())
            .map_err(|e| file_error(path, format!("not an X.509 certificate: {e}")))?;
    }
    Ok(certs)
}

/// One listener certificate, loaded and ready to sign.
struct LoadedCertificate {
    key: Arc<CertifiedKey>,
    /// The end-entity certificate, to match SNI names against.
    leaf: CertificateDer<'static>,
}

fn load_certificate(certificate: &Certificate) -> Result<LoadedCertificate, TlsFileError> {
    let chain = read_certificates(&certificate.cert_path)?;
    let key = PrivateKeyDer::from_pem_file(&certificate.key_path)
        .map_err(|e| file_error(&certificate.key_path, e))?;
    let signing_key = rustls::crypto::ring::sign::any_supported_type(&key)
        .map_err(|e| file_error(&certificate.key_path, e))?;
    let leaf = chain[0].clone();
    webpki::EndEntityCert::try_from(&leaf).map_err(|e| {
        file_error(
            &certificate.cert_path,
            format!("unusable certificate: {e:?}"),
        )
    })?;
    Ok(LoadedCertificate {
        key: Arc::new(CertifiedKey::new(chain, signing_key)),
        leaf,
    })
}

/// A listener's certificates; the first is the default.
struct CertificateSet {
    certificates: Vec<LoadedCertificate>,
}

impl CertificateSet {
    fn load(listener: &TlsListener) -> Result<Self, TlsFileError> {
        let certificates = listener
            .certificates
            .iter()
            .map(load_certificate)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { certificates })
    }

    /// The first certificate valid for `name`, else the default.
    fn choose(&self, name: Option<&str>) -> Option<Arc<CertifiedKey>> {
        let chosen = name
            .and_then(|name| ServerName::try_from(name).ok())
            .and_then(|name| {
                self.certificates.iter().find(|c| {
                    webpki::EndEntityCert::try_from(&c.leaf)
                        .is_ok_and(|leaf| leaf.verify_is_valid_for_subject_name(&name).is_ok())
                })
            })
            .or_else(|| self.certificates.first())?;
        Some(Arc::clone(&chosen.key))
    }
}

/// Chooses a listener's certificate by SNI; reloadable.
pub struct SniResolver {
    listen: String,
    set: ArcSwap<CertificateSet>,
}

impl std::fmt::Debug for SniResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SniResolver")
            .field("listen", &self.listen)
            .finish()
    }
}

impl SniResolver {
    pub fn load(listener: &TlsListener) -> Result<Arc<Self>, TlsFileError> {
        Ok(Arc::new(Self {
            listen: listener.listen.clone(),
            set: ArcSwap::from_pointee(CertificateSet::load(listener)?),
        }))
    }

    pub fn listen(&self) -> &str {
        &self.listen
    }
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.set.load().choose(hello.server_name())
    }
}

/// The certificate resolvers of every TLS listener of this process.
#[derive(Debug, Default)]
pub struct TlsListeners {
    resolvers: Vec<Arc<SniResolver>>,
}

/// New certificate sets, loaded but not yet in use.
pub struct PendingCertificates(Vec<(Arc<SniResolver>, CertificateSet)>);

impl TlsListeners {
    pub fn load(listeners: &[TlsListener]) -> Result<Self, TlsFileError> {
        Ok(Self {
            resolvers: listeners
                .iter()
                .map(SniResolver::load)
                .collect::<Result<_, _>>()?,
        })
    }

    pub fn resolvers(&self) -> &[Arc<SniResolver>] {
        &self.resolvers
    }

    /// Loads the certificates `listeners` name for the listeners bound at
    /// start; a listener added since needs a restart and is skipped here.
    pub fn prepare_reload(
        &self,
        listeners: &[TlsListener],
    ) -> Result<PendingCertificates, TlsFileError> {
        let mut pending = Vec::new();
        for resolver in &self.resolvers {
            if let Some(listener) = listeners.iter().find(|l| l.listen == resolver.listen) {
                pending.push((Arc::clone(resolver), CertificateSet::load(listener)?));
            }
        }
        Ok(PendingCertificates(pending))
    }
}

impl PendingCertificates {
    /// Puts the loaded certificates in use for new handshakes.
    pub fn apply(self) {
        for (resolver, set) in self.0 {
            resolver.set.store(Arc::new(set));
        }
    }
}

/// Pingora requires accept callbacks to build rustls settings; rolter
/// needs none (certificates come from the resolver).
pub struct NoAcceptCallbacks;

#[async_trait::async_trait]
impl TlsAccept for NoAcceptCallbacks {}

/// Reads a CA file for an `https://` provider, in the form Pingora's
/// connector takes.
pub fn load_ca_file(path: &Path) -> Result<Arc<pingora::protocols::tls::CaType>, TlsFileError> {
    let certificates = read_certificates(path)?;
    let wrapped: Vec<_> = certificates
        .into_iter()
        .map(|cert| {
            pingora::utils::tls::WrappedX509::new(cert.as_ref().to_vec(), |raw| {
                pingora::utils::tls::parse_x509(raw)
            })
        })
        .collect();
    Ok(Arc::from(wrapped.into_boxed_slice()))
}
