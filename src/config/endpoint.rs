//! The engine telemetry endpoints a provider may name: the ZeroMQ endpoints
//! of vLLM's KV-event publisher (`tcp://host:port`) and the HTTP URL of an
//! LMCache occupancy signal.
//!
//! vLLM's publisher binds when its endpoint has a wildcard host (`*`, `::`,
//! `0.0.0.0`) and rolter always connects (docs/design/wire-formats.md), so the
//! engine's own `--kv-events-config` endpoint (`tcp://*:5557`) is the most
//! likely thing to be pasted here; it is refused with a hint to name the
//! engine's host instead. Only TCP is accepted: `ipc://` and `inproc://`
//! endpoints are local to the engine's host or process.
//!
//! Hosts and ports are checked with the same rules as a `base_url`.

use std::net::IpAddr;

use super::base_url::{parse_port, split_authority, strip_prefix_ignore_case, BaseUrlError};

/// A validated `tcp://host:port`; the host as in [`super::BaseUrl::host`]
/// (lowercased, IPv6 literals in brackets).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct TcpEndpoint {
    pub(super) host: String,
    pub(super) port: u16,
}

impl TcpEndpoint {
    /// The endpoint `offset` ports above this one (data-parallel rank
    /// `offset`); `None` past 65535.
    pub(super) fn shifted(&self, offset: u16) -> Option<TcpEndpoint> {
        Some(TcpEndpoint {
            host: self.host.clone(),
            port: self.port.checked_add(offset)?,
        })
    }
}

impl std::fmt::Display for TcpEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "tcp://{}:{}", self.host, self.port)
    }
}

/// Why a string is not an acceptable telemetry endpoint.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum EndpointError {
    #[error("{0:?} is not a tcp://host:port endpoint (rolter subscribes over TCP; ipc:// and inproc:// are local to the engine)")]
    NotTcp(String),
    #[error("{0:?} has no port: write tcp://host:port")]
    MissingPort(String),
    #[error("{0:?} is the engine's bind address: the engine binds, rolter connects; name the engine's host (e.g. \"tcp://10.0.0.11:{1}\")")]
    Wildcard(String, String),
    #[error("{0:?} must start with http:// or https://")]
    HttpScheme(String),
    #[error("{0:?} has no host")]
    MissingHost(String),
    #[error("must not carry credentials (user@host)")]
    Credentials,
    #[error("must not have a fragment (#): it is never sent to the server")]
    Fragment,
    #[error("path or query {0:?} contains whitespace or control characters")]
    Path(String),
    #[error(transparent)]
    Authority(#[from] BaseUrlError),
}

/// Parses a ZeroMQ `tcp://host:port` endpoint that rolter connects to.
pub(super) fn parse_tcp(written: &str) -> Result<TcpEndpoint, EndpointError> {
    let text = written.trim();
    let Some(authority) = strip_prefix_ignore_case(text, "tcp://") else {
        return Err(EndpointError::NotTcp(written.to_owned()));
    };
    if authority.is_empty() || authority.contains(['/', '?', '#', '@']) {
        return Err(EndpointError::NotTcp(written.to_owned()));
    }
    // `*` is ZeroMQ's "every interface"; split_authority would call it a
    // bad host name.
    if let Some(port) = authority.strip_prefix("*:") {
        return Err(EndpointError::Wildcard(written.to_owned(), port.to_owned()));
    }
    let (host, port) = split_authority(authority)?;
    let Some(port) = port else {
        return Err(EndpointError::MissingPort(written.to_owned()));
    };
    let port = parse_port(port)?;
    let literal = host.trim_start_matches('[').trim_end_matches(']');
    if literal
        .parse::<IpAddr>()
        .is_ok_and(|ip| ip.is_unspecified())
    {
        return Err(EndpointError::Wildcard(
            written.to_owned(),
            port.to_string(),
        ));
    }
    Ok(TcpEndpoint { host, port })
}

/// Checks an `http(s)://host[:port][/path][?query]` URL that rolter polls.
pub(super) fn check_http(written: &str) -> Result<(), EndpointError> {
    let text = written.trim();
    let rest = strip_prefix_ignore_case(text, "https://")
        .or_else(|| strip_prefix_ignore_case(text, "http://"))
        .ok_or_else(|| EndpointError::HttpScheme(written.to_owned()))?;
    if rest.contains('#') {
        return Err(EndpointError::Fragment);
    }
    let (authority, path_and_query) = match rest.find(['/', '?']) {
        Some(at) => rest.split_at(at),
        None => (rest, ""),
    };
    if authority.contains('@') {
        return Err(EndpointError::Credentials);
    }
    if authority.is_empty() {
        return Err(EndpointError::MissingHost(written.to_owned()));
    }
    let (_, port) = split_authority(authority)?;
    if let Some(port) = port {
        parse_port(port)?;
    }
    if path_and_query
        .chars()
        .any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(EndpointError::Path(path_and_query.to_owned()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_endpoints_name_a_host_and_port() {
        let endpoint = parse_tcp("tcp://10.0.0.11:5557").unwrap();
        assert_eq!((endpoint.host.as_str(), endpoint.port), ("10.0.0.11", 5557));
        assert_eq!(endpoint.to_string(), "tcp://10.0.0.11:5557");
        let endpoint = parse_tcp(" TCP://Engine-A.local:1 ").unwrap();
        assert_eq!(endpoint.to_string(), "tcp://engine-a.local:1");
        let endpoint = parse_tcp("tcp://[FD00::11]:65535").unwrap();
        assert_eq!(endpoint.to_string(), "tcp://[fd00::11]:65535");
    }

    #[test]
    fn shifted_endpoints_stop_at_the_last_port() {
        let endpoint = parse_tcp("tcp://h:65534").unwrap();
        assert_eq!(endpoint.shifted(1).unwrap().to_string(), "tcp://h:65535");
        assert_eq!(endpoint.shifted(2), None);
    }

    #[test]
    fn bind_addresses_are_refused_with_a_hint() {
        for bind in [
            "tcp://*:5557",
            "tcp://0.0.0.0:5557",
            "tcp://[::]:5557",
            "tcp://[0:0::0]:5557",
        ] {
            let error = parse_tcp(bind).unwrap_err();
            assert!(matches!(error, EndpointError::Wildcard(..)), "{bind}");
            assert!(
                error
                    .to_string()
                    .ends_with("name the engine's host (e.g. \"tcp://10.0.0.11:5557\")"),
                "{error}"
            );
        }
    }

    #[test]
    fn other_transports_and_shapes_are_refused() {
        for bad in [
            "ipc:///tmp/kv",
            "inproc://kv",
            "10.0.0.1:5557",
            "tcp://",
            "tcp://h:1/x",
            "tcp://u@h:1",
            "http://h:1",
        ] {
            assert!(
                matches!(parse_tcp(bad), Err(EndpointError::NotTcp(_))),
                "{bad}"
            );
        }
        assert!(matches!(
            parse_tcp("tcp://h"),
            Err(EndpointError::MissingPort(_))
        ));
        for bad_port in ["tcp://h:0", "tcp://h:65536", "tcp://h:", "tcp://h:x"] {
            assert!(
                matches!(
                    parse_tcp(bad_port),
                    Err(EndpointError::Authority(BaseUrlError::Port(_)))
                ),
                "{bad_port}"
            );
        }
        for bad_host in ["tcp://:1", "tcp://a b:1", "tcp://::1:5557", "tcp://*"] {
            assert!(
                matches!(
                    parse_tcp(bad_host),
                    Err(EndpointError::Authority(BaseUrlError::Host(_)))
                ),
                "{bad_host}"
            );
        }
    }

    #[test]
    fn http_endpoints_may_have_a_path_and_query() {
        for good in [
            "http://10.0.0.11:9000/occupancy",
            "https://lmcache.internal/metrics?instance=a&x=1",
            "HTTP://h?only=query",
            "http://[::1]:9000",
            "http://h",
        ] {
            assert_eq!(check_http(good), Ok(()), "{good}");
        }
    }

    #[test]
    fn bad_http_endpoints_are_refused() {
        assert!(matches!(
            check_http("tcp://h:1"),
            Err(EndpointError::HttpScheme(_))
        ));
        assert!(matches!(
            check_http("http:///x"),
            Err(EndpointError::MissingHost(_))
        ));
        assert!(matches!(
            check_http("http://?q"),
            Err(EndpointError::MissingHost(_))
        ));
        assert!(matches!(
            check_http("http://u:p@h/"),
            Err(EndpointError::Credentials)
        ));
        assert!(matches!(
            check_http("http://h/x#y"),
            Err(EndpointError::Fragment)
        ));
        assert!(matches!(
            check_http("http://h/a b"),
            Err(EndpointError::Path(_))
        ));
        assert!(matches!(
            check_http("http://h:0/"),
            Err(EndpointError::Authority(BaseUrlError::Port(_)))
        ));
        assert!(matches!(
            check_http("http://a..b/"),
            Err(EndpointError::Authority(BaseUrlError::Host(_)))
        ));
    }
}
