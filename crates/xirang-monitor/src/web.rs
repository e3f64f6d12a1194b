//! The exporter's web configuration file, in the Prometheus exporter-toolkit format
//! (what node_exporter reads with `--web.config.file`): TLS (`tls_server_config`) and
//! basic authentication (`basic_auth_users`, bcrypt hashes).
//!
//! Supported: `tls_server_config.{cert_file, key_file, client_auth_type, client_ca_file,
//! min_version, max_version}` and `basic_auth_users`. The toolkit's other keys are
//! refused with an error naming them, rather than ignored: a security setting that is
//! silently dropped is worse than a server that does not start. Relative file names are
//! resolved against the configuration file's directory, as the toolkit does.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde::Deserialize;

/// A web configuration file that could not be used. Every variant names the file and
/// the key path in it.
#[derive(Debug, thiserror::Error)]
pub enum WebConfigError {
    /// The file could not be read (missing, not a file, too large, not UTF-8).
    #[error(transparent)]
    Read(#[from] xirang_files::ReadError),
    /// Not YAML of the expected shape (the message carries the line when the YAML
    /// library knows it).
    #[error("{file}: {key}: {message}")]
    Syntax {
        /// The web configuration file.
        file: PathBuf,
        /// Key path (`tls_server_config.cert_file`), `.` for the top level.
        key: String,
        /// What is wrong.
        message: String,
    },
    /// An exporter-toolkit key or value this exporter does not implement.
    #[error("{file}: {key}: {what} is not supported by xirang monitor")]
    Unsupported {
        /// The web configuration file.
        file: PathBuf,
        /// Key path.
        key: String,
        /// The setting, as written.
        what: String,
    },
    /// A value that is not valid.
    #[error("{file}: {key}: {message}")]
    Invalid {
        /// The web configuration file.
        file: PathBuf,
        /// Key path.
        key: String,
        /// What is wrong.
        message: String,
    },
    /// A certificate or key file named by the configuration could not be used.
    #[error("{file}: {key}: {path}: {message}")]
    KeyMaterial {
        /// The web configuration file.
        file: PathBuf,
        /// Key path.
        key: String,
        /// The certificate or key file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// `tls_server_config.client_auth_type`, as the exporter-toolkit (Go's
/// `tls.ClientAuthType`) names them; only the ones that verify a certificate when one is
/// sent are supported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// No client certificate is asked for (the default).
    NoClientCert,
    /// A client certificate is asked for and verified against `client_ca_file` when the
    /// client sends one; clients without one are let in.
    VerifyClientCertIfGiven,
    /// A client certificate verified against `client_ca_file` is required.
    RequireAndVerifyClientCert,
}

/// A TLS protocol version of `min_version` / `max_version`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TlsVersion {
    /// `TLS12`.
    Tls12,
    /// `TLS13`.
    Tls13,
}

/// The checked `tls_server_config` (file names resolved, files not yet read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// Server certificate chain (PEM).
    pub cert_file: PathBuf,
    /// Server private key (PEM).
    pub key_file: PathBuf,
    /// Client certificate policy.
    pub client_auth: ClientAuth,
    /// CAs that client certificates are verified against (PEM).
    pub client_ca_file: Option<PathBuf>,
    /// Lowest version offered (default TLS 1.2).
    pub min_version: TlsVersion,
    /// Highest version offered (default TLS 1.3).
    pub max_version: TlsVersion,
}

/// A parsed and checked web configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebSettings {
    /// The file it came from (for messages).
    pub file: PathBuf,
    /// TLS, if configured.
    pub tls: Option<TlsSettings>,
    /// User name → bcrypt hash; empty when basic authentication is off.
    pub basic_auth_users: BTreeMap<String, String>,
}

/// The web configuration ready to serve with: the rustls configuration built from the
/// key material, and the basic-auth checker.
#[derive(Clone)]
pub struct Web {
    /// The TLS server configuration, when TLS is on.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// The basic-auth checker, when users are configured.
    pub basic_auth: Option<Arc<BasicAuth>>,
}

impl Web {
    /// Whether the configuration protects the exporter at all (TLS or basic auth).
    pub fn protects(&self) -> bool {
        self.tls.is_some() || self.basic_auth.is_some()
    }
}

// What serde reads; every exporter-toolkit key is listed, so the ones not supported are
// recognised and refused by name, and anything else is an unknown key.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawFile {
    tls_server_config: Option<RawTls>,
    basic_auth_users: Option<BTreeMap<String, String>>,
    http_server_config: Option<serde_yaml_ng::Value>,
    rate_limit: Option<serde_yaml_ng::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
    client_auth_type: Option<String>,
    client_ca_file: Option<PathBuf>,
    min_version: Option<String>,
    max_version: Option<String>,
    cert: Option<serde_yaml_ng::Value>,
    key: Option<serde_yaml_ng::Value>,
    client_ca: Option<serde_yaml_ng::Value>,
    client_allowed_sans: Option<serde_yaml_ng::Value>,
    cipher_suites: Option<serde_yaml_ng::Value>,
    prefer_server_cipher_suites: Option<serde_yaml_ng::Value>,
    curve_preferences: Option<serde_yaml_ng::Value>,
}

fn parse_version(
    file: &Path,
    key: &str,
    v: Option<&str>,
    default: TlsVersion,
) -> Result<TlsVersion, WebConfigError> {
    match v {
        None => Ok(default),
        Some("TLS12") => Ok(TlsVersion::Tls12),
        Some("TLS13") => Ok(TlsVersion::Tls13),
        Some(v @ ("TLS10" | "TLS11")) => Err(WebConfigError::Unsupported {
            file: file.to_owned(),
            key: key.into(),
            what: format!("`{v}` (TLS below 1.2)"),
        }),
        Some(v) => Err(WebConfigError::Invalid {
            file: file.to_owned(),
            key: key.into(),
            message: format!("`{v}`: expected TLS12 or TLS13"),
        }),
    }
}

/// Parses web configuration text; `file` names it in errors and anchors relative file
/// names. Checks the keys and values; does not read the certificate files
/// ([`WebSettings::build`] does).
pub fn parse(text: &str, file: &Path) -> Result<WebSettings, WebConfigError> {
    let raw: RawFile = if text.trim().is_empty() {
        RawFile::default()
    } else {
        serde_path_to_error::deserialize(serde_yaml_ng::Deserializer::from_str(text)).map_err(|e| {
            let key = e.path().to_string();
            WebConfigError::Syntax {
                file: file.to_owned(),
                key,
                message: e.into_inner().to_string(),
            }
        })?
    };
    if raw.http_server_config.is_some() {
        return Err(unsupported(file, "http_server_config"));
    }
    if raw.rate_limit.is_some() {
        return Err(unsupported(file, "rate_limit"));
    }
    let tls = match raw.tls_server_config {
        None => None,
        Some(t) => Some(parse_tls(t, file)?),
    };
    let basic_auth_users = raw.basic_auth_users.unwrap_or_default();
    check_users(&basic_auth_users, file)?;
    Ok(WebSettings {
        file: file.to_owned(),
        tls,
        basic_auth_users,
    })
}

/// An exporter-toolkit key this exporter recognises but does not support.
fn unsupported(file: &Path, key: &str) -> WebConfigError {
    WebConfigError::Unsupported {
        file: file.to_owned(),
        key: key.into(),
        what: format!("`{key}`"),
    }
}

/// `p` as the exporter opens it: relative to the configuration file's directory.
fn resolve(file: &Path, p: &Path) -> PathBuf {
    let dir = file.parent().unwrap_or(Path::new("."));
    if p.is_absolute() {
        p.to_owned()
    } else {
        dir.join(p)
    }
}

/// The checked `tls_server_config`: the keys not supported refused by name, the files
/// resolved, the client policy consistent with its CA file, the versions in order.
fn parse_tls(t: RawTls, file: &Path) -> Result<TlsSettings, WebConfigError> {
    for (set, key) in [
        (t.cert.is_some(), "tls_server_config.cert"),
        (t.key.is_some(), "tls_server_config.key"),
        (t.client_ca.is_some(), "tls_server_config.client_ca"),
        (
            t.client_allowed_sans.is_some(),
            "tls_server_config.client_allowed_sans",
        ),
        (t.cipher_suites.is_some(), "tls_server_config.cipher_suites"),
        (
            t.prefer_server_cipher_suites.is_some(),
            "tls_server_config.prefer_server_cipher_suites",
        ),
        (
            t.curve_preferences.is_some(),
            "tls_server_config.curve_preferences",
        ),
    ] {
        if set {
            return Err(unsupported(file, key));
        }
    }
    let required = |v: Option<PathBuf>, key: &str| {
        v.filter(|p| !p.as_os_str().is_empty())
            .map(|p| resolve(file, &p))
            .ok_or_else(|| WebConfigError::Invalid {
                file: file.to_owned(),
                key: key.into(),
                message: "missing: TLS needs a certificate and a key file".into(),
            })
    };
    let cert_file = required(t.cert_file, "tls_server_config.cert_file")?;
    let key_file = required(t.key_file, "tls_server_config.key_file")?;
    let client_auth = parse_client_auth(file, t.client_auth_type.as_deref())?;
    let client_ca_file = t
        .client_ca_file
        .filter(|p| !p.as_os_str().is_empty())
        .map(|p| resolve(file, &p));
    match (client_auth, &client_ca_file) {
        (ClientAuth::NoClientCert, Some(_)) => {
            return Err(WebConfigError::Invalid {
                file: file.to_owned(),
                key: "tls_server_config.client_ca_file".into(),
                message: "set without a client_auth_type that verifies client \
                          certificates (VerifyClientCertIfGiven or \
                          RequireAndVerifyClientCert)"
                    .into(),
            });
        }
        (ClientAuth::VerifyClientCertIfGiven | ClientAuth::RequireAndVerifyClientCert, None) => {
            return Err(WebConfigError::Invalid {
                file: file.to_owned(),
                key: "tls_server_config.client_ca_file".into(),
                message: "missing: client_auth_type verifies client certificates \
                          against it"
                    .into(),
            });
        }
        _ => {}
    }
    let min_version = parse_version(
        file,
        "tls_server_config.min_version",
        t.min_version.as_deref(),
        TlsVersion::Tls12,
    )?;
    let max_version = parse_version(
        file,
        "tls_server_config.max_version",
        t.max_version.as_deref(),
        TlsVersion::Tls13,
    )?;
    if min_version > max_version {
        return Err(WebConfigError::Invalid {
            file: file.to_owned(),
            key: "tls_server_config.min_version".into(),
            message: "above max_version".into(),
        });
    }
    Ok(TlsSettings {
        cert_file,
        key_file,
        client_auth,
        client_ca_file,
        min_version,
        max_version,
    })
}

/// `client_auth_type`: the policies that verify a client certificate they accept, or
/// none; the two that accept one unverified are refused.
fn parse_client_auth(file: &Path, v: Option<&str>) -> Result<ClientAuth, WebConfigError> {
    let key = "tls_server_config.client_auth_type";
    match v {
        None | Some("NoClientCert") => Ok(ClientAuth::NoClientCert),
        Some("VerifyClientCertIfGiven") => Ok(ClientAuth::VerifyClientCertIfGiven),
        Some("RequireAndVerifyClientCert") => Ok(ClientAuth::RequireAndVerifyClientCert),
        Some(v @ ("RequestClientCert" | "RequireAnyClientCert")) => Err(WebConfigError::Unsupported {
            file: file.to_owned(),
            key: key.into(),
            what: format!(
                "`{v}` (it accepts client certificates without verifying them; use \
                 VerifyClientCertIfGiven or RequireAndVerifyClientCert)"
            ),
        }),
        Some(v) => Err(WebConfigError::Invalid {
            file: file.to_owned(),
            key: key.into(),
            message: format!(
                "`{v}`: expected NoClientCert, VerifyClientCertIfGiven or \
                 RequireAndVerifyClientCert"
            ),
        }),
    }
}

/// Each basic-auth user: a name basic authentication can carry, and a bcrypt hash.
fn check_users(users: &BTreeMap<String, String>, file: &Path) -> Result<(), WebConfigError> {
    for (user, hash) in users {
        if user.contains(':') {
            return Err(WebConfigError::Invalid {
                file: file.to_owned(),
                key: format!("basic_auth_users.{user}"),
                message: "a user name cannot contain `:` in basic authentication".into(),
            });
        }
        if hash.parse::<bcrypt::HashParts>().is_err() {
            return Err(WebConfigError::Invalid {
                file: file.to_owned(),
                key: format!("basic_auth_users.{user}"),
                message: "not a bcrypt hash (make one with `htpasswd -nBC 10 \"\" | tr -d ':\\n'`)".into(),
            });
        }
    }
    Ok(())
}

/// Largest web configuration file read (a few lines in practice).
pub const WEB_CONFIG_LIMIT: xirang_files::Limit = xirang_files::Limit::new(1 << 20, "web configuration file");
/// Largest certificate or key file read: a chain of a few certificates is a few KB.
pub const PEM_LIMIT: xirang_files::Limit = xirang_files::Limit::new(1 << 20, "PEM file");

/// Reads and parses a web configuration file.
pub fn load(file: &Path) -> Result<WebSettings, WebConfigError> {
    let text = xirang_files::read_text(file, WEB_CONFIG_LIMIT)?;
    parse(&text, file)
}

impl WebSettings {
    /// Reads the certificate and key files and builds what the server runs with.
    pub fn build(&self) -> Result<Web, WebConfigError> {
        let tls = match &self.tls {
            None => None,
            Some(t) => Some(Arc::new(self.server_config(t)?)),
        };
        let basic_auth = if self.basic_auth_users.is_empty() {
            None
        } else {
            Some(Arc::new(BasicAuth::new(self.basic_auth_users.clone())))
        };
        Ok(Web { tls, basic_auth })
    }

    fn material(&self, key: &str, path: &Path, message: impl std::fmt::Display) -> WebConfigError {
        WebConfigError::KeyMaterial {
            file: self.file.clone(),
            key: key.into(),
            path: path.to_owned(),
            message: message.to_string(),
        }
    }

    /// A PEM file's bytes, read with a cap and without waiting on a FIFO.
    fn pem(&self, key: &str, path: &Path) -> Result<Vec<u8>, WebConfigError> {
        xirang_files::read_bytes(path, PEM_LIMIT).map_err(|e| self.material(key, path, e))
    }

    fn certs(&self, key: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, WebConfigError> {
        let pem = self.pem(key, path)?;
        let certs = CertificateDer::pem_slice_iter(&pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.material(key, path, e))?;
        if certs.is_empty() {
            return Err(self.material(key, path, "no PEM certificate in it"));
        }
        Ok(certs)
    }

    fn server_config(&self, t: &TlsSettings) -> Result<rustls::ServerConfig, WebConfigError> {
        let certs = self.certs("tls_server_config.cert_file", &t.cert_file)?;
        let key = PrivateKeyDer::from_pem_slice(&self.pem("tls_server_config.key_file", &t.key_file)?)
            .map_err(|e| self.material("tls_server_config.key_file", &t.key_file, e))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let versions: Vec<&'static rustls::SupportedProtocolVersion> = [
            (TlsVersion::Tls12, &rustls::version::TLS12),
            (TlsVersion::Tls13, &rustls::version::TLS13),
        ]
        .into_iter()
        .filter(|(v, _)| (t.min_version..=t.max_version).contains(v))
        .map(|(_, p)| p)
        .collect();
        let tls_error = |key: &str, e: &dyn std::fmt::Display| WebConfigError::Invalid {
            file: self.file.clone(),
            key: key.into(),
            message: e.to_string(),
        };
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&versions)
            .map_err(|e| tls_error("tls_server_config.min_version", &e))?;
        let builder = match (t.client_auth, &t.client_ca_file) {
            (ClientAuth::NoClientCert, _) | (_, None) => builder.with_no_client_auth(),
            (auth, Some(ca_file)) => {
                let ca_key = "tls_server_config.client_ca_file";
                let mut roots = rustls::RootCertStore::empty();
                for c in self.certs(ca_key, ca_file)? {
                    roots.add(c).map_err(|e| self.material(ca_key, ca_file, e))?;
                }
                let v =
                    rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
                let v = if auth == ClientAuth::VerifyClientCertIfGiven {
                    v.allow_unauthenticated()
                } else {
                    v
                };
                builder.with_client_cert_verifier(v.build().map_err(|e| self.material(ca_key, ca_file, e))?)
            }
        };
        let mut cfg = builder
            .with_single_cert(certs, key)
            .map_err(|e| self.material("tls_server_config.key_file", &t.key_file, e))?;
        // The server speaks HTTP/1.1 only.
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(cfg)
    }
}

/// Successful verifications kept before the cache is emptied: a bound on its memory (a
/// handful of scrapers use a handful of credentials; each entry is 32 bytes).
const AUTH_CACHE_MAX_ENTRIES: usize = 1024;

/// Checks `Authorization: Basic` headers against bcrypt hashes. A bcrypt verification
/// costs tens of milliseconds at the usual cost factors, so successful ones are cached
/// (keyed by a SHA-256 of user, password and hash) and a scraper every few seconds costs
/// one verification, not one a scrape. Unknown users are verified against a dummy hash
/// of the same cost, so the time taken does not tell whether a user exists.
pub struct BasicAuth {
    users: BTreeMap<String, String>,
    dummy_hash: String,
    verified: Mutex<HashSet<[u8; 32]>>,
}

impl BasicAuth {
    /// A checker for these users (name → bcrypt hash).
    pub fn new(users: BTreeMap<String, String>) -> Self {
        let cost = users
            .values()
            .filter_map(|h| h.parse::<bcrypt::HashParts>().ok())
            .map(|p| p.get_cost())
            .max()
            .unwrap_or(bcrypt::DEFAULT_COST);
        let dummy_hash = bcrypt::hash("xirang: not a user", cost)
            .map(|h| h.to_string())
            .unwrap_or_default();
        BasicAuth {
            users,
            dummy_hash,
            verified: Mutex::new(HashSet::new()),
        }
    }

    /// Splits an `Authorization` header value into user and password.
    fn credentials(header: &str) -> Option<(String, String)> {
        let (scheme, b64) = header.trim().split_once(' ')?;
        if !scheme.eq_ignore_ascii_case("basic") {
            return None;
        }
        let raw = base64::engine::general_purpose::STANDARD
            .decode(b64.trim())
            .ok()?;
        let text = String::from_utf8(raw).ok()?;
        let (u, p) = text.split_once(':')?;
        Some((u.to_owned(), p.to_owned()))
    }

    fn cache_key(user: &str, password: &str, hash: &str) -> [u8; 32] {
        let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
        for part in [user, password, hash] {
            ctx.update(&(part.len() as u64).to_le_bytes());
            ctx.update(part.as_bytes());
        }
        let mut key = [0u8; 32];
        key.copy_from_slice(ctx.finish().as_ref());
        key
    }

    /// Whether an `Authorization` header value (or its absence) grants access. Blocks
    /// for a bcrypt verification on a cache miss.
    pub fn check(&self, authorization: Option<&str>) -> bool {
        let Some((user, password)) = authorization.and_then(Self::credentials) else {
            return false;
        };
        let (hash, known) = match self.users.get(&user) {
            Some(h) => (h.as_str(), true),
            None => (self.dummy_hash.as_str(), false),
        };
        let key = Self::cache_key(&user, &password, hash);
        if known
            && self
                .verified
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(&key)
        {
            return true;
        }
        let ok = bcrypt::verify(&password, hash).unwrap_or(false) && known;
        if ok {
            let mut v = self.verified.lock().unwrap_or_else(|e| e.into_inner());
            if v.len() >= AUTH_CACHE_MAX_ENTRIES {
                v.clear();
            }
            v.insert(key);
        }
        ok
    }

    /// Successful verifications currently cached.
    pub fn cached(&self) -> usize {
        self.verified.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f() -> PathBuf {
        PathBuf::from("/etc/xirang/web.yml")
    }

    fn err(text: &str) -> String {
        parse(text, &f()).unwrap_err().to_string()
    }

    /// bcrypt's lowest cost: fast enough for tests.
    const TEST_COST: u32 = 4;

    #[test]
    fn a_good_file_parses() {
        let hash = bcrypt::hash("s3cret", TEST_COST).unwrap();
        let text = format!(
            "tls_server_config:\n  cert_file: server.crt\n  key_file: /abs/server.key\n  \
             client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n  \
             min_version: TLS13\nbasic_auth_users:\n  prom: '{hash}'\n"
        );
        let s = parse(&text, &f()).unwrap();
        let t = s.tls.unwrap();
        assert_eq!(t.cert_file, PathBuf::from("/etc/xirang/server.crt"));
        assert_eq!(t.key_file, PathBuf::from("/abs/server.key"));
        assert_eq!(t.client_ca_file, Some(PathBuf::from("/etc/xirang/ca.crt")));
        assert_eq!(t.client_auth, ClientAuth::RequireAndVerifyClientCert);
        assert_eq!(
            (t.min_version, t.max_version),
            (TlsVersion::Tls13, TlsVersion::Tls13)
        );
        assert_eq!(s.basic_auth_users["prom"], hash);
        // Basic auth alone, and an empty file, are valid as in the toolkit.
        let s = parse(&format!("basic_auth_users:\n  prom: '{hash}'\n"), &f()).unwrap();
        assert!(s.tls.is_none());
        let s = parse("", &f()).unwrap();
        assert!(s.tls.is_none() && s.basic_auth_users.is_empty());
    }

    #[test]
    fn every_unsupported_key_is_refused_by_name() {
        for (key, yaml) in [
            (
                "tls_server_config.cipher_suites",
                "  cipher_suites: [TLS_AES_128_GCM_SHA256]\n",
            ),
            (
                "tls_server_config.curve_preferences",
                "  curve_preferences: [X25519]\n",
            ),
            (
                "tls_server_config.prefer_server_cipher_suites",
                "  prefer_server_cipher_suites: true\n",
            ),
            (
                "tls_server_config.client_allowed_sans",
                "  client_allowed_sans: [a]\n",
            ),
            ("tls_server_config.cert", "  cert: PEM\n"),
            ("tls_server_config.key", "  key: PEM\n"),
            ("tls_server_config.client_ca", "  client_ca: PEM\n"),
        ] {
            let e = err(&format!(
                "tls_server_config:\n  cert_file: c\n  key_file: k\n{yaml}"
            ));
            assert_eq!(
                e,
                format!("/etc/xirang/web.yml: {key}: `{key}` is not supported by xirang monitor")
            );
        }
        let e = err("http_server_config:\n  http2: false\n");
        assert_eq!(
            e,
            "/etc/xirang/web.yml: http_server_config: `http_server_config` is not supported by xirang monitor"
        );
        assert!(err("rate_limit:\n  burst: 1\n").contains("rate_limit"));
    }

    #[test]
    fn client_auth_types_that_do_not_verify_are_refused() {
        for v in ["RequestClientCert", "RequireAnyClientCert"] {
            let e = err(&format!(
                "tls_server_config:\n  cert_file: c\n  key_file: k\n  client_auth_type: {v}\n  client_ca_file: ca\n"
            ));
            assert!(
                e.starts_with(&format!(
                    "/etc/xirang/web.yml: tls_server_config.client_auth_type: `{v}`"
                )) && e.contains("not supported"),
                "{e}"
            );
        }
        let e = err("tls_server_config:\n  cert_file: c\n  key_file: k\n  client_auth_type: Sometimes\n");
        assert!(
            e.contains("tls_server_config.client_auth_type: `Sometimes`: expected NoClientCert"),
            "{e}"
        );
        let e = err(
            "tls_server_config:\n  cert_file: c\n  key_file: k\n  client_auth_type: VerifyClientCertIfGiven\n",
        );
        assert!(e.contains("tls_server_config.client_ca_file: missing"), "{e}");
        let e = err("tls_server_config:\n  cert_file: c\n  key_file: k\n  client_ca_file: ca\n");
        assert!(e.contains("tls_server_config.client_ca_file: set without"), "{e}");
    }

    #[test]
    fn unknown_keys_bad_values_and_bad_yaml_name_the_key() {
        let e = err("tls_server_config:\n  cert_file: c\n  key_file: k\n  certfile: x\n");
        assert!(
            e.starts_with("/etc/xirang/web.yml: tls_server_config")
                && e.contains("unknown field `certfile`")
                && e.contains("line 4"),
            "{e}"
        );
        let e = err("basic_auth_user:\n  a: b\n");
        assert!(
            e.starts_with("/etc/xirang/web.yml: basic_auth_user: unknown field `basic_auth_user`"),
            "{e}"
        );
        let e = err("tls_server_config:\n  key_file: k\n");
        assert!(e.contains("tls_server_config.cert_file: missing"), "{e}");
        let e = err("tls_server_config:\n  cert_file: c\n  key_file: k\n  min_version: TLS10\n");
        assert!(
            e.contains("tls_server_config.min_version: `TLS10`") && e.contains("not supported"),
            "{e}"
        );
        let e = err("tls_server_config:\n  cert_file: c\n  key_file: k\n  max_version: SSL3\n");
        assert!(
            e.contains("tls_server_config.max_version: `SSL3`: expected TLS12 or TLS13"),
            "{e}"
        );
        let e = err(
            "tls_server_config:\n  cert_file: c\n  key_file: k\n  min_version: TLS13\n  max_version: TLS12\n",
        );
        assert!(
            e.contains("tls_server_config.min_version: above max_version"),
            "{e}"
        );
        let e = err("basic_auth_users:\n  prom: plain-password\n");
        assert!(e.contains("basic_auth_users.prom: not a bcrypt hash"), "{e}");
        let e = err("basic_auth_users: [a, b]\n");
        assert!(e.contains("/etc/xirang/web.yml: basic_auth_users:"), "{e}");
    }

    #[test]
    fn a_missing_cert_file_is_named() {
        let dir = std::env::temp_dir().join(format!("xirang-web-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("web.yml");
        std::fs::write(
            &file,
            "tls_server_config:\n  cert_file: nope.crt\n  key_file: nope.key\n",
        )
        .unwrap();
        let e = load(&file).unwrap().build().err().unwrap().to_string();
        let cert = dir.join("nope.crt");
        assert!(
            e.starts_with(&format!(
                "{}: tls_server_config.cert_file: {}: ",
                file.display(),
                cert.display()
            )),
            "{e}"
        );
        std::fs::write(&cert, "not PEM\n").unwrap();
        let e = load(&file).unwrap().build().err().unwrap().to_string();
        assert!(e.contains("no PEM certificate"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
        let e = load(Path::new("/no/such/web.yml")).unwrap_err().to_string();
        assert!(e.starts_with("/no/such/web.yml: "), "{e}");
    }

    #[test]
    fn basic_auth_checks_and_caches() {
        let hash = bcrypt::hash("s3cret", TEST_COST).unwrap();
        let auth = BasicAuth::new(BTreeMap::from([("prom".to_string(), hash)]));
        let b64 = |s: &str| format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(s));
        assert!(!auth.check(None));
        assert!(!auth.check(Some("Bearer x")));
        assert!(!auth.check(Some(&b64("prom:wrong"))));
        assert!(!auth.check(Some(&b64("nobody:s3cret"))));
        assert_eq!(auth.cached(), 0);
        assert!(auth.check(Some(&b64("prom:s3cret"))));
        assert_eq!(auth.cached(), 1);
        assert!(auth.check(Some(&b64("prom:s3cret"))));
        assert_eq!(auth.cached(), 1);
        assert!(!auth.check(Some(&b64("prom:s3cret2"))));
    }
}
