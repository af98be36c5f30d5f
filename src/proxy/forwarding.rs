//! What the engine is told about the client: `X-Forwarded-For`,
//! `X-Forwarded-Proto`, `X-Forwarded-Host`, `X-Real-IP`, and which headers
//! never cross the gateway (hop-by-hop ones).
//!
//! The reference is nginx's `realip` module configured as
//!
//! ```nginx
//! set_real_ip_from <each of server.trusted_proxies>;
//! real_ip_header   X-Forwarded-For;
//! real_ip_recursive on;
//! proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
//! ```
//!
//! - A direct peer outside `trusted_proxies` is the client. Whatever
//!   forwarding headers it sent are its own claims: the chain is replaced by
//!   the peer's address, the scheme is the one of our listener, and the host
//!   is the `Host` it asked for.
//! - A trusted peer (a load balancer in front of rolter) speaks for its
//!   client: its chain is kept and the peer appended, and the client is found
//!   by walking the chain from the right, skipping trusted addresses; the
//!   first untrusted one is the client. When every address is trusted, the
//!   left-most is. An entry that is not an address (`unknown`, a hostname)
//!   stops the walk at the last address read, as in nginx. Its
//!   `X-Forwarded-Proto` (`http` or `https`) and `X-Forwarded-Host` are kept.
//!
//! Unlike nginx (whose `$proxy_add_x_forwarded_for` appends the rewritten
//! `$remote_addr`), the appended address is always the direct peer: the chain
//! stays a faithful record of the hops.
//!
//! An IPv4 client on a dual-stack socket (`::ffff:10.0.0.1`) is written as
//! `10.0.0.1`. RFC 7239's `Forwarded` is passed on only from a trusted peer.

use std::net::{IpAddr, SocketAddr};

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use pingora::http::RequestHeader;
use pingora::proxy::Session;

use crate::config::{Cidr, Server};

// Parsed once: a custom name given as `&str` is parsed and copied on every
// insert (`RequestHeader::insert_header_static`, patches/README.md).
pub static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
pub static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
pub static X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
pub static X_REAL_IP: HeaderName = HeaderName::from_static("x-real-ip");
static FORWARDED: HeaderName = HeaderName::from_static("forwarded");

/// How many headers [`ClientOrigin::apply`] may add.
pub const FORWARDING_HEADERS: usize = 4;

/// Longest `X-Forwarded-Host` passed on; a longer one is replaced by `Host`.
const MAX_HOST_LEN: usize = 255;

/// Headers that describe one connection, not the request (RFC 9110 §7.6.1),
/// plus those that only make sense between a client and its proxy.
static HOP_BY_HOP: [HeaderName; 10] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::EXPECT,
];

/// Who sent a request and how, worked out once per request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientOrigin {
    /// The direct peer; `None` on a socket without an IP address.
    pub peer: Option<IpAddr>,
    /// Whether the peer is inside `server.trusted_proxies`.
    pub peer_trusted: bool,
    /// The client: the peer, or what a trusted peer's chain says.
    pub client: Option<IpAddr>,
    /// The `X-Forwarded-For` to send; `None` when there is no address at all.
    /// A header value from the start: it goes out on every attempt.
    pub forwarded_for: Option<HeaderValue>,
    /// `http` or `https`.
    pub proto: &'static str,
    /// The host the client asked for, for `X-Forwarded-Host`.
    pub host: Option<HeaderValue>,
}

impl ClientOrigin {
    /// Works out the origin of the request on `session`. `server` gives the
    /// trusted proxies and the TLS listeners (a connection accepted on one is
    /// HTTPS even when no TLS digest is attached to it).
    pub fn of(session: &Session, server: &Server) -> ClientOrigin {
        let peer = session
            .client_addr()
            .and_then(|a| a.as_inet())
            .map(|a| a.ip());
        let tls = session.digest().is_some_and(|d| d.ssl_digest.is_some())
            || session
                .server_addr()
                .and_then(|a| a.as_inet())
                .is_some_and(|local| on_tls_listener(local, server));
        let request = session.req_header();
        let host = request.headers.get(header::HOST).cloned().or_else(|| {
            let authority = request.uri.authority()?;
            HeaderValue::from_str(authority.as_str()).ok()
        });
        resolve(&request.headers, peer, tls, host, &server.trusted_proxies)
    }

    /// Sets the forwarding headers on the upstream request, replacing what
    /// the client sent.
    pub fn apply(&self, upstream: &mut RequestHeader) {
        let chain = self.forwarded_for.clone();
        // From an untrusted peer the chain is the client's address alone:
        // one value serves both headers.
        let real_ip = match (self.client, &chain) {
            (Some(_), Some(chain)) if !self.peer_trusted => Some(chain.clone()),
            (Some(client), _) => header_value(address_text(client)),
            (None, _) => None,
        };
        match chain {
            Some(chain) => upstream.insert_header_static(&X_FORWARDED_FOR, chain),
            None => {
                upstream.remove_header(&X_FORWARDED_FOR);
            }
        }
        match real_ip {
            Some(ip) => upstream.insert_header_static(&X_REAL_IP, ip),
            None => {
                upstream.remove_header(&X_REAL_IP);
            }
        }
        upstream.insert_header_static(&X_FORWARDED_PROTO, HeaderValue::from_static(self.proto));
        match &self.host {
            Some(host) => upstream.insert_header_static(&X_FORWARDED_HOST, host.clone()),
            None => {
                upstream.remove_header(&X_FORWARDED_HOST);
            }
        }
        if !self.peer_trusted {
            upstream.remove_header(&FORWARDED);
        }
    }
}

/// The origin from the request's headers, its peer and the listener's
/// scheme. `host` is the `Host` (or HTTP/2 authority) the client asked for.
pub fn resolve(
    headers: &HeaderMap,
    peer: Option<IpAddr>,
    tls: bool,
    host: Option<HeaderValue>,
    trusted: &[Cidr],
) -> ClientOrigin {
    let peer = peer.map(|ip| ip.to_canonical());
    let own_proto = if tls { "https" } else { "http" };
    let Some(peer_ip) = peer.filter(|ip| is_trusted(*ip, trusted)) else {
        return ClientOrigin {
            peer,
            peer_trusted: false,
            client: peer,
            forwarded_for: peer.and_then(|ip| header_value(address_text(ip))),
            proto: own_proto,
            host,
        };
    };

    let chain = joined(headers, &X_FORWARDED_FOR);
    let entries: Vec<&str> = chain
        .as_deref()
        .map(|c| {
            c.split(',')
                .map(|e| e.trim_matches([' ', '\t']))
                .filter(|e| !e.is_empty())
                .collect()
        })
        .unwrap_or_default();
    let client = real_client(peer_ip, &entries, trusted);
    let forwarded_for = match entries.is_empty() {
        true => address_text(peer_ip),
        false => format!("{}, {peer_ip}", entries.join(", ")),
    };
    let proto = match headers.get(&X_FORWARDED_PROTO).map(HeaderValue::as_bytes) {
        Some(v) if v.eq_ignore_ascii_case(b"https") => "https",
        Some(v) if v.eq_ignore_ascii_case(b"http") => "http",
        _ => own_proto,
    };
    let forwarded_host = headers
        .get(&X_FORWARDED_HOST)
        .filter(|v| is_sane_host(v.as_bytes()))
        .cloned();
    ClientOrigin {
        peer,
        peer_trusted: true,
        client: Some(client),
        forwarded_for: header_value(forwarded_for),
        proto,
        host: forwarded_host.or(host),
    }
}

/// nginx's recursive real-IP walk over `chain` (left to right as sent),
/// starting at the trusted `peer`.
fn real_client(peer: IpAddr, chain: &[&str], trusted: &[Cidr]) -> IpAddr {
    debug_assert!(is_trusted(peer, trusted));
    let mut client = peer;
    for entry in chain.iter().rev() {
        if !is_trusted(client, trusted) {
            break;
        }
        match parse_address(entry) {
            Some(ip) => client = ip,
            None => break,
        }
    }
    client
}

/// `ip` as `Display` writes it. An IPv4 address, every request's, is
/// written digit by digit: `to_string` goes through the formatting
/// machinery once per octet, ~1.6 k instructions (callgrind) of a chat
/// request's ~100 k.
fn address_text(ip: IpAddr) -> String {
    let IpAddr::V4(v4) = ip else {
        return ip.to_string();
    };
    let mut text = String::with_capacity("255.255.255.255".len());
    for (i, octet) in v4.octets().into_iter().enumerate() {
        if i > 0 {
            text.push('.');
        }
        if octet >= 100 {
            text.push(char::from(b'0' + octet / 100));
        }
        if octet >= 10 {
            text.push(char::from(b'0' + octet / 10 % 10));
        }
        text.push(char::from(b'0' + octet % 10));
    }
    text
}

fn is_trusted(ip: IpAddr, trusted: &[Cidr]) -> bool {
    trusted.iter().any(|cidr| cidr.contains(ip))
}

/// One chain entry: an address, optionally with a port (`1.2.3.4:80`,
/// `[::1]:80`) or in brackets (`[::1]`), as nginx's `ngx_parse_addr_port`
/// takes it.
fn parse_address(entry: &str) -> Option<IpAddr> {
    if let Ok(ip) = entry.parse::<IpAddr>() {
        return Some(ip.to_canonical());
    }
    if let Ok(addr) = entry.parse::<SocketAddr>() {
        return Some(addr.ip().to_canonical());
    }
    let inner = entry.strip_prefix('[')?.strip_suffix(']')?;
    inner.parse::<IpAddr>().ok().map(|ip| ip.to_canonical())
}

/// `text` as a header value, its allocation kept. What this module writes
/// always is one (addresses, and entries of values `to_str` accepted,
/// joined by ", "); were it not, the header would be left out rather than
/// sent broken.
fn header_value(text: String) -> Option<HeaderValue> {
    HeaderValue::from_maybe_shared(bytes::Bytes::from(text)).ok()
}

/// Every value of `name`, joined by ", " (a client may send a list header
/// as several lines); `None` when absent or not text.
fn joined(headers: &HeaderMap, name: &HeaderName) -> Option<String> {
    let mut out: Option<String> = None;
    for value in headers.get_all(name) {
        let value = value.to_str().ok()?.trim();
        if value.is_empty() {
            continue;
        }
        match &mut out {
            Some(out) => {
                out.push_str(", ");
                out.push_str(value);
            }
            None => out = Some(value.to_string()),
        }
    }
    out
}

fn is_sane_host(value: &[u8]) -> bool {
    !value.is_empty() && value.len() <= MAX_HOST_LEN && value.iter().all(|b| b.is_ascii_graphic())
}

/// Whether `local` is the address of one of the TLS listeners (a wildcard
/// listener matches any local address on its port).
fn on_tls_listener(local: &SocketAddr, server: &Server) -> bool {
    server.tls.iter().any(|listener| {
        listener.listen.parse::<SocketAddr>().is_ok_and(|addr| {
            addr.port() == local.port()
                && (addr.ip().is_unspecified()
                    || addr.ip().to_canonical() == local.ip().to_canonical())
        })
    })
}

/// Removes the hop-by-hop headers from the upstream request: the fixed set,
/// and every header the client's `Connection` names (RFC 9110 §7.6.1).
/// Run it before the gateway sets its own headers: a `Connection` naming one
/// of them must not remove what the gateway adds.
pub fn strip_hop_by_hop(upstream: &mut RequestHeader) {
    // Most requests carry none of them: one pass over what is there, rather
    // than a lookup (and a miss) per name.
    if !upstream
        .headers
        .keys()
        .any(|name| HOP_BY_HOP.contains(name))
    {
        return;
    }
    let named: Vec<HeaderName> = upstream
        .headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|token| HeaderName::from_bytes(token.trim().as_bytes()).ok())
        .collect();
    for name in named {
        upstream.remove_header(&name);
    }
    for name in &HOP_BY_HOP {
        upstream.remove_header(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cidrs(list: &[&str]) -> Vec<Cidr> {
        list.iter().map(|c| c.parse().unwrap()).collect()
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    fn host(s: &str) -> Option<HeaderValue> {
        Some(HeaderValue::from_str(s).unwrap())
    }

    #[test]
    fn addresses_are_written_as_display_writes_them() {
        let mut addresses: Vec<IpAddr> = ["::1", "::ffff:10.0.0.1", "2001:db8::7"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect();
        // Every octet value, in every position, and each digit count.
        for n in 0..=255u8 {
            addresses.push(IpAddr::from([n, 0, 9, 255]));
            addresses.push(IpAddr::from([255, n, 10, 99]));
            addresses.push(IpAddr::from([100, 1, n, 0]));
            addresses.push(IpAddr::from([7, 200, 55, n]));
        }
        for address in addresses {
            assert_eq!(address_text(address), address.to_string());
        }
    }

    #[test]
    fn untrusted_peer_replaces_the_chain_and_its_claims() {
        let h = headers(&[
            ("x-forwarded-for", "1.1.1.1, 2.2.2.2"),
            ("x-forwarded-proto", "https"),
            ("x-forwarded-host", "evil.example"),
        ]);
        let origin = resolve(
            &h,
            ip("203.0.113.9"),
            false,
            host("api.example"),
            &cidrs(&["10.0.0.0/8"]),
        );
        assert!(!origin.peer_trusted);
        assert_eq!(origin.client, ip("203.0.113.9"));
        assert_eq!(
            origin.forwarded_for.as_ref().map(|v| v.to_str().unwrap()),
            Some("203.0.113.9")
        );
        assert_eq!(origin.proto, "http");
        assert_eq!(origin.host, host("api.example"));
    }

    #[test]
    fn trusted_peer_keeps_the_chain_and_names_the_right_most_untrusted_client() {
        let h = headers(&[
            ("x-forwarded-for", "198.51.100.1, 203.0.113.5, 10.0.0.2"),
            ("x-forwarded-proto", "HTTPS"),
            ("x-forwarded-host", "api.example"),
        ]);
        let origin = resolve(
            &h,
            ip("10.0.0.1"),
            false,
            host("internal:8080"),
            &cidrs(&["10.0.0.0/8"]),
        );
        assert!(origin.peer_trusted);
        // 10.0.0.2 is trusted, 203.0.113.5 is not: it is the client, and
        // what it claims (198.51.100.1) is not believed.
        assert_eq!(origin.client, ip("203.0.113.5"));
        assert_eq!(
            origin.forwarded_for.as_ref().map(|v| v.to_str().unwrap()),
            Some("198.51.100.1, 203.0.113.5, 10.0.0.2, 10.0.0.1")
        );
        assert_eq!(origin.proto, "https");
        assert_eq!(origin.host, host("api.example"));
    }

    #[test]
    fn every_address_trusted_gives_the_left_most() {
        let h = headers(&[("x-forwarded-for", "10.0.0.3, 10.0.0.2")]);
        let origin = resolve(&h, ip("10.0.0.1"), true, None, &cidrs(&["10.0.0.0/8"]));
        assert_eq!(origin.client, ip("10.0.0.3"));
        assert_eq!(origin.proto, "https");
    }

    #[test]
    fn a_non_address_entry_stops_the_walk_at_the_last_address() {
        let h = headers(&[("x-forwarded-for", "203.0.113.7, unknown, 10.0.0.2")]);
        let origin = resolve(&h, ip("10.0.0.1"), false, None, &cidrs(&["10.0.0.0/8"]));
        assert_eq!(origin.client, ip("10.0.0.2"));
    }

    #[test]
    fn several_chain_headers_are_one_list_and_ports_are_allowed() {
        let h = headers(&[
            ("x-forwarded-for", "203.0.113.7:4711"),
            ("x-forwarded-for", "[2001:db8::1]:443, 10.0.0.2"),
        ]);
        let origin = resolve(&h, ip("10.0.0.1"), false, None, &cidrs(&["10.0.0.0/8"]));
        assert_eq!(origin.client, ip("2001:db8::1"));
        assert_eq!(
            origin.forwarded_for.as_ref().map(|v| v.to_str().unwrap()),
            Some("203.0.113.7:4711, [2001:db8::1]:443, 10.0.0.2, 10.0.0.1")
        );
    }

    #[test]
    fn trusted_peer_without_a_chain_is_the_client() {
        let origin = resolve(
            &HeaderMap::new(),
            ip("127.0.0.1"),
            false,
            None,
            &cidrs(&["127.0.0.1/32"]),
        );
        assert_eq!(origin.client, ip("127.0.0.1"));
        assert_eq!(
            origin.forwarded_for.as_ref().map(|v| v.to_str().unwrap()),
            Some("127.0.0.1")
        );
    }

    #[test]
    fn a_mapped_ipv4_peer_is_written_as_ipv4_and_matches_ipv4_networks() {
        let h = headers(&[("x-forwarded-for", "203.0.113.7")]);
        let origin = resolve(
            &h,
            ip("::ffff:10.0.0.1"),
            false,
            None,
            &cidrs(&["10.0.0.0/8"]),
        );
        assert_eq!(origin.peer, ip("10.0.0.1"));
        assert_eq!(origin.client, ip("203.0.113.7"));
        assert_eq!(
            origin.forwarded_for.as_ref().map(|v| v.to_str().unwrap()),
            Some("203.0.113.7, 10.0.0.1")
        );
    }

    #[test]
    fn a_trusted_proxys_odd_scheme_or_host_is_not_passed_on() {
        let h = headers(&[("x-forwarded-proto", "gopher"), ("x-forwarded-host", "a b")]);
        let origin = resolve(
            &h,
            ip("10.0.0.1"),
            true,
            host("api.example"),
            &cidrs(&["10.0.0.0/8"]),
        );
        assert_eq!(origin.proto, "https");
        assert_eq!(origin.host, host("api.example"));
    }

    #[test]
    fn no_peer_address_sends_no_address() {
        let origin = resolve(&HeaderMap::new(), None, false, None, &cidrs(&["0.0.0.0/0"]));
        assert_eq!(origin.client, None);
        assert_eq!(origin.forwarded_for, None);
    }

    #[test]
    fn hop_by_hop_and_connection_named_headers_are_stripped() {
        let mut request = RequestHeader::build("POST", b"/v1/chat/completions", None).unwrap();
        for (name, value) in [
            ("connection", "keep-alive, X-Custom , x-other"),
            ("connection", "x-third"),
            ("x-custom", "1"),
            ("x-other", "1"),
            ("x-third", "1"),
            ("keep-alive", "timeout=5"),
            ("te", "trailers"),
            ("upgrade", "websocket"),
            ("proxy-authorization", "Basic Zm9v"),
            ("x-kept", "1"),
        ] {
            request.append_header(name, value).unwrap();
        }
        strip_hop_by_hop(&mut request);
        let left: Vec<&str> = request.headers.keys().map(|k| k.as_str()).collect();
        assert_eq!(left, ["x-kept"]);
    }

    #[test]
    fn apply_sets_the_headers_and_drops_an_untrusted_forwarded() {
        let mut request = RequestHeader::build("POST", b"/", None).unwrap();
        request.insert_header("forwarded", "for=1.2.3.4").unwrap();
        request.insert_header("x-real-ip", "1.2.3.4").unwrap();
        let origin = resolve(
            &HeaderMap::new(),
            ip("192.0.2.1"),
            false,
            host("api.example"),
            &[],
        );
        origin.apply(&mut request);
        let h = &request.headers;
        assert_eq!(h["x-forwarded-for"], "192.0.2.1");
        assert_eq!(h["x-real-ip"], "192.0.2.1");
        assert_eq!(h["x-forwarded-proto"], "http");
        assert_eq!(h["x-forwarded-host"], "api.example");
        assert!(h.get("forwarded").is_none());
    }

    #[test]
    fn apply_replaces_the_clients_headers_on_the_wire_whatever_their_case() {
        let mut request = RequestHeader::build("POST", b"/", None).unwrap();
        request.append_header("X-Forwarded-For", "6.6.6.6").unwrap();
        request.append_header("X-REAL-IP", "6.6.6.6").unwrap();
        request
            .append_header("content-type", "application/json")
            .unwrap();
        let origin = resolve(&HeaderMap::new(), ip("192.0.2.1"), false, None, &[]);
        origin.apply(&mut request);
        let mut wire = Vec::new();
        request.header_to_h1_wire(&mut wire);
        let wire = String::from_utf8(wire).unwrap();
        let mut lines: Vec<&str> = wire.split("\r\n").filter(|l| !l.is_empty()).collect();
        lines.sort();
        assert_eq!(
            lines,
            [
                "content-type: application/json",
                "x-forwarded-for: 192.0.2.1",
                "x-forwarded-proto: http",
                "x-real-ip: 192.0.2.1",
            ]
        );
    }

    #[test]
    fn a_request_without_hop_by_hop_headers_keeps_every_header() {
        let mut request = RequestHeader::build("POST", b"/", None).unwrap();
        for (name, value) in [("host", "a"), ("content-type", "b"), ("x-custom", "c")] {
            request.append_header(name, value).unwrap();
        }
        strip_hop_by_hop(&mut request);
        let left: Vec<&str> = request.headers.keys().map(|k| k.as_str()).collect();
        assert_eq!(left, ["host", "content-type", "x-custom"]);
    }

    #[test]
    fn each_hop_by_hop_header_alone_is_stripped() {
        for name in &HOP_BY_HOP {
            let mut request = RequestHeader::build("POST", b"/", None).unwrap();
            request.append_header(name.as_str(), "x").unwrap();
            request.append_header("x-kept", "1").unwrap();
            strip_hop_by_hop(&mut request);
            let left: Vec<&str> = request.headers.keys().map(|k| k.as_str()).collect();
            assert_eq!(left, ["x-kept"], "{name}");
        }
    }

    #[test]
    fn behind_a_trusted_peer_the_real_ip_is_the_client_not_the_chain() {
        let mut request = RequestHeader::build("POST", b"/", None).unwrap();
        let h = headers(&[("x-forwarded-for", "203.0.113.7")]);
        let origin = resolve(&h, ip("10.0.0.1"), false, None, &cidrs(&["10.0.0.0/8"]));
        origin.apply(&mut request);
        let h = &request.headers;
        assert_eq!(h["x-forwarded-for"], "203.0.113.7, 10.0.0.1");
        assert_eq!(h["x-real-ip"], "203.0.113.7");
        assert!(h.get("x-forwarded-host").is_none());
    }
}
