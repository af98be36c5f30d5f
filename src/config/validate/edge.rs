//! The client-facing part of `[server]`: TLS listeners, trusted proxies and
//! the access log. (The connection limits are plain numbers, read in
//! `validate.rs`.)
//!
//! Two TLS rules look outside the file. The certificate and key files must
//! exist and be readable when the configuration is validated, so that
//! `rolter check` catches a wrong path and a reload with a missing file is
//! refused rather than half applied; their contents are left to the TLS
//! library. And a TLS listener must not overlap any other listener: the
//! same port with the same address, or with a wildcard address that covers
//! the other (`0.0.0.0` covers every IPv4 address; `[::]` is dual-stack on
//! Linux by default and covers every address), because the second bind
//! would fail at start. Port 0 (the OS picks a free port) overlaps nothing.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use super::super::file;
use super::super::{AccessLog, AccessLogFormat, Certificate, Cidr, TlsListener};
use super::Validator;

/// Whether two listeners cannot both be bound (see the module doc).
fn overlaps(a: SocketAddr, b: SocketAddr) -> bool {
    if a.port() != b.port() || a.port() == 0 {
        return false;
    }
    let covers = |wide: IpAddr, other: IpAddr| match wide {
        IpAddr::V6(v6) => v6.is_unspecified(),
        IpAddr::V4(v4) => v4.is_unspecified() && other.is_ipv4(),
    };
    a.ip() == b.ip() || covers(a.ip(), b.ip()) || covers(b.ip(), a.ip())
}

/// Words that look like an `access_log` keyword but would silently become a
/// file of that name in the working directory.
const ACCESS_LOG_LOOKALIKES: &[&str] = &["stdout", "stderr", "off", "none", "false", "-"];

impl Validator<'_> {
    /// `[[server.tls]]`. `taken` holds the plain listeners and their field
    /// paths.
    pub(super) fn tls_listeners(
        &mut self,
        tables: Vec<file::TlsListenerTable>,
        taken: &[(SocketAddr, String)],
    ) -> Vec<TlsListener> {
        let mut taken = taken.to_vec();
        let mut listeners = Vec::with_capacity(tables.len());
        for (i, table) in tables.into_iter().enumerate() {
            let here = format!("server.tls[{i}]");
            let errors_before = self.errors.len();

            let listen = self.required(&format!("{here}.listen"), table.listen);
            if let Some(listen) = &listen {
                match listen.parse::<SocketAddr>() {
                    Err(_) => self.error(
                        format!("{here}.listen"),
                        format!("{listen:?} is not an ip:port address (e.g. \"0.0.0.0:8443\")"),
                    ),
                    Ok(addr) => {
                        if let Some((other, field)) =
                            taken.iter().find(|(other, _)| overlaps(addr, *other))
                        {
                            self.error(
                                format!("{here}.listen"),
                                format!(
                                    "{listen:?} overlaps {field} = \"{other}\": both cannot be bound"
                                ),
                            );
                        }
                        taken.push((addr, format!("{here}.listen")));
                    }
                }
            }

            let mut certificates = Vec::new();
            match table.certificates {
                None => self.error(format!("{here}.certificates"), "is required"),
                Some(entries) if entries.is_empty() => self.error(
                    format!("{here}.certificates"),
                    "must name at least one { cert_path, key_path }",
                ),
                Some(entries) => {
                    for (j, entry) in entries.into_iter().enumerate() {
                        let at = |field: &str| format!("{here}.certificates[{j}].{field}");
                        let cert_path = self
                            .required(&at("cert_path"), entry.cert_path)
                            .and_then(|path| self.readable_file(&at("cert_path"), path));
                        let key_path = self
                            .required(&at("key_path"), entry.key_path)
                            .and_then(|path| self.readable_file(&at("key_path"), path));
                        if let (Some(cert_path), Some(key_path)) = (cert_path, key_path) {
                            certificates.push(Certificate {
                                cert_path,
                                key_path,
                            });
                        }
                    }
                }
            }

            if let Some(listen) = listen {
                if self.errors.len() == errors_before {
                    debug_assert!(!certificates.is_empty());
                    listeners.push(TlsListener {
                        listen,
                        certificates,
                    });
                }
            }
        }
        listeners
    }

    /// `server.trusted_proxies`.
    pub(super) fn trusted_proxies(&mut self, written: Vec<String>) -> Vec<Cidr> {
        let mut networks = Vec::with_capacity(written.len());
        for (k, text) in written.iter().enumerate() {
            let field = format!("server.trusted_proxies[{k}]");
            match text.parse::<Cidr>() {
                Err(error) => self.error(field, error.to_string()),
                Ok(cidr) => {
                    if cidr.prefix == 0 {
                        self.warn(
                            field,
                            format!(
                                "{text:?} trusts every peer: any client can then set the address rolter logs and limits by"
                            ),
                        );
                    } else if Cidr::had_host_bits(text) {
                        self.warn(
                            field,
                            format!(
                                "{text:?} has host bits set and means the network {cidr}; write {:?} for one host",
                                text.trim().split('/').next().unwrap_or_default()
                            ),
                        );
                    }
                    networks.push(cidr);
                }
            }
        }
        networks
    }

    /// `server.access_log` and `server.access_log_format`.
    pub(super) fn access_log(
        &mut self,
        log: Option<String>,
        format: Option<String>,
    ) -> (AccessLog, AccessLogFormat) {
        let format_written = format.is_some();
        let format = match format.as_deref().unwrap_or(file::DEFAULT_ACCESS_LOG_FORMAT) {
            "json" => AccessLogFormat::Json,
            "combined" => AccessLogFormat::Combined,
            other => {
                self.error(
                    "server.access_log_format",
                    format!("unknown format {other:?} (known: json, combined)"),
                );
                AccessLogFormat::Json
            }
        };

        let log = log.unwrap_or_else(|| file::DEFAULT_ACCESS_LOG.to_owned());
        let log = match log.as_str() {
            "stdout" => AccessLog::Stdout,
            "off" => {
                if format_written {
                    self.warn(
                        "server.access_log_format",
                        "has no effect: access_log = \"off\"",
                    );
                }
                AccessLog::Off
            }
            path => match self.access_log_file(path) {
                Some(path) => AccessLog::File(path),
                None => AccessLog::Stdout,
            },
        };
        (log, format)
    }

    /// An access-log path: not a mistyped keyword, not a directory, and in a
    /// directory that exists. The file itself is created at start.
    fn access_log_file(&mut self, path: &str) -> Option<PathBuf> {
        const FIELD: &str = "server.access_log";
        if path.trim().is_empty() {
            self.error(FIELD, "must be \"stdout\", \"off\" or a file path");
            return None;
        }
        if ACCESS_LOG_LOOKALIKES.contains(&path.to_ascii_lowercase().as_str()) {
            self.error(
                FIELD,
                format!(
                    "{path:?} is not \"stdout\" or \"off\"; for a file of that name, write \"./{path}\""
                ),
            );
            return None;
        }
        let file = Path::new(path);
        if file.is_dir() {
            self.error(FIELD, format!("{path:?} is a directory, not a file"));
            return None;
        }
        let directory = file.parent().filter(|dir| !dir.as_os_str().is_empty());
        if let Some(directory) = directory {
            if !directory.is_dir() {
                self.error(
                    FIELD,
                    format!(
                        "the directory {:?} of {path:?} does not exist",
                        directory.display().to_string()
                    ),
                );
                return None;
            }
        }
        Some(file.to_path_buf())
    }
}

#[cfg(test)]
mod tests {
    use super::overlaps;

    fn overlap(a: &str, b: &str) -> bool {
        let (a, b) = (a.parse().unwrap(), b.parse().unwrap());
        assert_eq!(overlaps(a, b), overlaps(b, a), "{a} {b}: not symmetric");
        overlaps(a, b)
    }

    #[test]
    fn same_port_overlaps_on_equal_or_covering_addresses() {
        assert!(overlap("127.0.0.1:8443", "127.0.0.1:8443"));
        assert!(overlap("0.0.0.0:8443", "127.0.0.1:8443"));
        assert!(overlap("[::]:8443", "10.0.0.1:8443"));
        assert!(overlap("[::]:8443", "[::1]:8443"));
        assert!(overlap("[::]:8443", "0.0.0.0:8443"));
        assert!(!overlap("127.0.0.1:8443", "127.0.0.2:8443"));
        assert!(!overlap("0.0.0.0:8443", "[::1]:8443"));
        assert!(!overlap("0.0.0.0:8443", "0.0.0.0:8444"));
        assert!(!overlap("127.0.0.1:0", "127.0.0.1:0"));
    }
}
