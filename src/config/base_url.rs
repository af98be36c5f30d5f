//! A provider's `base_url`: the root of an OpenAI-compatible server.
//!
//! rolter appends the client's request path (`/v1/chat/completions`, ...)
//! to the base URL, so the base URL names the server root plus an optional
//! path prefix (for engines mounted under a sub-path behind another proxy).
//! A prefix that ends in `/v1` would produce `/v1/v1/...` upstream, so it is
//! rejected with a hint instead of failing at the first request.
//!
//! Parsed by hand rather than with a general URL library: the accepted
//! shape is narrow (scheme, host, port, path; no credentials, query or
//! fragment), and each refusal gets a message that says what to change.

use std::fmt;
use std::net::Ipv6Addr;
use std::str::FromStr;

/// A validated `base_url`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BaseUrl {
    /// `https://` (true) or `http://` (false).
    pub tls: bool,
    /// Host name (lowercased) or IP address as written in a URL authority:
    /// IPv6 literals keep their brackets, so `format!("{host}:{port}")` is
    /// always a valid authority.
    pub host: String,
    /// Explicit port, else 443 for https and 80 for http.
    pub port: u16,
    /// "" or "/x/y": no trailing slash.
    pub path_prefix: String,
}

impl BaseUrl {
    /// The port the scheme implies when none is written.
    pub fn default_port(tls: bool) -> u16 {
        if tls {
            443
        } else {
            80
        }
    }

    /// `host:port`, always with the port: what to connect to.
    pub fn authority(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

/// The normalized URL: lowercase scheme and host, the port only when it is
/// not the scheme's default, then the path prefix.
impl fmt::Display for BaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.tls { "https" } else { "http" };
        write!(f, "{scheme}://{}", self.host)?;
        if self.port != Self::default_port(self.tls) {
            write!(f, ":{}", self.port)?;
        }
        f.write_str(&self.path_prefix)
    }
}

/// Why a string is not an acceptable `base_url`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BaseUrlError {
    #[error("{0:?} must start with http:// or https://")]
    Scheme(String),
    #[error("{0:?} has no host")]
    MissingHost(String),
    #[error("host {0:?} is not a valid host name or IP address")]
    Host(String),
    #[error("port {0:?} is not a number from 1 to 65535")]
    Port(String),
    #[error("must not carry credentials (user@host); name the upstream key with api_key_env")]
    Credentials,
    #[error("must not have a query (?) or fragment (#)")]
    QueryOrFragment,
    #[error("path {0:?} contains whitespace or control characters")]
    Path(String),
    #[error("base_url is the server root: drop the trailing \"/v1\" from {0:?} (rolter appends the request path, /v1/... included)")]
    TrailingV1(String),
}

impl FromStr for BaseUrl {
    type Err = BaseUrlError;

    fn from_str(url: &str) -> Result<Self, Self::Err> {
        let (tls, rest) = if let Some(rest) = strip_prefix_ignore_case(url, "https://") {
            (true, rest)
        } else if let Some(rest) = strip_prefix_ignore_case(url, "http://") {
            (false, rest)
        } else {
            return Err(BaseUrlError::Scheme(url.to_owned()));
        };
        if rest.contains(['?', '#']) {
            return Err(BaseUrlError::QueryOrFragment);
        }
        let (authority, path) = match rest.find('/') {
            Some(slash) => rest.split_at(slash),
            None => (rest, ""),
        };
        if authority.contains('@') {
            return Err(BaseUrlError::Credentials);
        }
        if authority.is_empty() {
            return Err(BaseUrlError::MissingHost(url.to_owned()));
        }
        let (host, port) = split_authority(authority)?;
        let port = match port {
            None => BaseUrl::default_port(tls),
            Some(port) => parse_port(port)?,
        };
        if path.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(BaseUrlError::Path(path.to_owned()));
        }
        let path_prefix = path.trim_end_matches('/');
        let lower = path_prefix.to_ascii_lowercase();
        if lower.ends_with("/v1") {
            return Err(BaseUrlError::TrailingV1(url.to_owned()));
        }
        Ok(BaseUrl {
            tls,
            host,
            port,
            path_prefix: path_prefix.to_owned(),
        })
    }
}

pub(super) fn strip_prefix_ignore_case<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let head = text.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &text[prefix.len()..])
}

/// Splits `host[:port]` or `[v6]:port`; checks the host. Shared with the
/// telemetry endpoints (`endpoint.rs`).
pub(super) fn split_authority(authority: &str) -> Result<(String, Option<&str>), BaseUrlError> {
    if let Some(inner) = authority.strip_prefix('[') {
        let Some(close) = inner.find(']') else {
            return Err(BaseUrlError::Host(authority.to_owned()));
        };
        let (address, after) = inner.split_at(close);
        let after = &after[1..];
        if address.parse::<Ipv6Addr>().is_err() {
            return Err(BaseUrlError::Host(authority.to_owned()));
        }
        let port = match after {
            "" => None,
            _ => match after.strip_prefix(':') {
                Some(port) => Some(port),
                None => return Err(BaseUrlError::Host(authority.to_owned())),
            },
        };
        return Ok((format!("[{}]", address.to_ascii_lowercase()), port));
    }
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (authority, None),
    };
    let valid = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
        && !host.starts_with(['-', '.'])
        && !host.contains("..");
    if !valid {
        return Err(BaseUrlError::Host(host.to_owned()));
    }
    Ok((host.to_ascii_lowercase(), port))
}

/// A port written in a URL: digits only, 1 to 65535.
pub(super) fn parse_port(port: &str) -> Result<u16, BaseUrlError> {
    let error = || BaseUrlError::Port(port.to_owned());
    if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
        return Err(error());
    }
    match port.parse::<u16>() {
        Ok(0) | Err(_) => Err(error()),
        Ok(port) => Ok(port),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> Result<BaseUrl, BaseUrlError> {
        url.parse()
    }

    #[test]
    fn http_with_explicit_port() {
        let url = parse("http://10.0.0.11:8000").unwrap();
        assert_eq!(
            url,
            BaseUrl {
                tls: false,
                host: "10.0.0.11".into(),
                port: 8000,
                path_prefix: String::new(),
            }
        );
        assert_eq!(url.to_string(), "http://10.0.0.11:8000");
        assert_eq!(url.authority(), "10.0.0.11:8000");
    }

    #[test]
    fn default_ports_are_80_and_443() {
        assert_eq!(parse("http://engine").unwrap().port, 80);
        let https = parse("https://api.example.com").unwrap();
        assert!(https.tls);
        assert_eq!(https.port, 443);
        assert_eq!(https.to_string(), "https://api.example.com");
    }

    #[test]
    fn display_omits_only_the_default_port() {
        assert_eq!(parse("https://h:443/").unwrap().to_string(), "https://h");
        assert_eq!(parse("https://h:80").unwrap().to_string(), "https://h:80");
        assert_eq!(
            parse("HTTP://Engine.Local:80").unwrap().to_string(),
            "http://engine.local"
        );
    }

    #[test]
    fn path_prefix_is_kept_without_trailing_slash() {
        let url = parse("https://gw.example.com/openai/team-a/").unwrap();
        assert_eq!(url.path_prefix, "/openai/team-a");
        assert_eq!(url.to_string(), "https://gw.example.com/openai/team-a");
        assert_eq!(parse("http://h:1/").unwrap().path_prefix, "");
    }

    #[test]
    fn trailing_v1_is_rejected_with_a_hint() {
        for url in [
            "http://h:8000/v1",
            "http://h:8000/v1/",
            "https://h/prefix/V1",
        ] {
            let error = parse(url).unwrap_err();
            assert!(matches!(error, BaseUrlError::TrailingV1(_)), "{url}");
            assert!(error.to_string().contains("drop the trailing \"/v1\""));
        }
        // Only a final /v1 segment is wrong.
        assert_eq!(parse("http://h/v1beta").unwrap().path_prefix, "/v1beta");
    }

    #[test]
    fn ipv6_literals_keep_their_brackets() {
        let url = parse("http://[::1]:8000").unwrap();
        assert_eq!(url.host, "[::1]");
        assert_eq!(url.port, 8000);
        assert_eq!(url.authority(), "[::1]:8000");
        assert_eq!(
            parse("https://[FE80::1]").unwrap().to_string(),
            "https://[fe80::1]"
        );
        assert!(parse("http://[nope]:1").is_err());
        assert!(parse("http://[::1]x").is_err());
    }

    #[test]
    fn bad_urls_are_rejected() {
        assert!(matches!(
            parse("10.0.0.1:8000"),
            Err(BaseUrlError::Scheme(_))
        ));
        assert!(matches!(parse("ftp://h"), Err(BaseUrlError::Scheme(_))));
        assert!(matches!(
            parse("http://"),
            Err(BaseUrlError::MissingHost(_))
        ));
        assert!(matches!(
            parse("http:///v2"),
            Err(BaseUrlError::MissingHost(_))
        ));
        assert!(matches!(parse("http://:80"), Err(BaseUrlError::Host(_))));
        assert!(matches!(parse("http://a b"), Err(BaseUrlError::Host(_))));
        assert!(matches!(parse("http://h:0"), Err(BaseUrlError::Port(_))));
        assert!(matches!(
            parse("http://h:65536"),
            Err(BaseUrlError::Port(_))
        ));
        assert!(matches!(parse("http://h:"), Err(BaseUrlError::Port(_))));
        assert!(matches!(parse("http://h:+80"), Err(BaseUrlError::Port(_))));
        assert!(matches!(
            parse("http://u:p@h"),
            Err(BaseUrlError::Credentials)
        ));
        assert!(matches!(
            parse("http://h/?x=1"),
            Err(BaseUrlError::QueryOrFragment)
        ));
        assert!(matches!(
            parse("http://h#top"),
            Err(BaseUrlError::QueryOrFragment)
        ));
        assert!(matches!(parse("http://h/a b"), Err(BaseUrlError::Path(_))));
        assert!(matches!(parse("http://h:1:2"), Err(BaseUrlError::Host(_))));
        assert!(matches!(parse("http://é"), Err(BaseUrlError::Host(_))));
        assert!(matches!(parse("httpé://h"), Err(BaseUrlError::Scheme(_))));
    }
}
