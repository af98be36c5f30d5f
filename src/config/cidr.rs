//! An IP network in CIDR notation, for `server.trusted_proxies`.
//!
//! Written by hand rather than with a crate: the gateway only needs "is this
//! peer inside one of these networks", once per request, and the parser's
//! messages should say what to change. `10.0.0.0/8` and `fd00::/8` are
//! networks; a bare address (`10.0.0.7`, `::1`) is a single host, /32 or
//! /128.
//!
//! A network written with host bits set (`10.0.0.7/8`) is taken as the
//! network it lies in (`10.0.0.0/8`), as nginx's `set_real_ip_from` does;
//! [`Cidr::had_host_bits`] lets validation warn about it, because the writer
//! most likely meant a single host.
//!
//! A dual-stack listener reports an IPv4 peer as `::ffff:a.b.c.d`; IPv4
//! networks match such a peer, and IPv6 networks match an IPv4 peer through
//! its mapped form, so a rule works whichever socket the peer came in on.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// An IP network: `addr` is the network address (host bits zero), `prefix`
/// at most 32 for IPv4 and 128 for IPv6.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl Cidr {
    /// The network of `addr` with `prefix` bits; `None` when the prefix is
    /// longer than the address. Host bits are cleared.
    pub fn new(addr: IpAddr, prefix: u8) -> Option<Cidr> {
        let addr = match addr {
            IpAddr::V4(v4) if prefix <= 32 => {
                IpAddr::V4(Ipv4Addr::from(u32::from(v4) & v4_mask(prefix)))
            }
            IpAddr::V6(v6) if prefix <= 128 => {
                IpAddr::V6(Ipv6Addr::from(u128::from(v6) & v6_mask(prefix)))
            }
            _ => return None,
        };
        Some(Cidr { addr, prefix })
    }

    /// Whether `ip` lies in this network (see the module doc for
    /// IPv4-mapped IPv6 addresses).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => self.contains_v4(net, ip),
            (IpAddr::V4(net), IpAddr::V6(ip)) => ip
                .to_ipv4_mapped()
                .is_some_and(|ip| self.contains_v4(net, ip)),
            (IpAddr::V6(net), IpAddr::V6(ip)) => self.contains_v6(net, ip),
            (IpAddr::V6(net), IpAddr::V4(ip)) => self.contains_v6(net, ip.to_ipv6_mapped()),
        }
    }

    /// Whether `written` (a string this type parses) names an address with
    /// host bits set, such as `10.0.0.7/8`.
    pub fn had_host_bits(written: &str) -> bool {
        let address = written.trim().split('/').next().unwrap_or("");
        match (address.parse::<IpAddr>(), written.parse::<Cidr>()) {
            (Ok(address), Ok(cidr)) => address != cidr.addr,
            _ => false,
        }
    }

    fn contains_v4(&self, net: Ipv4Addr, ip: Ipv4Addr) -> bool {
        debug_assert!(self.prefix <= 32);
        u32::from(ip) & v4_mask(self.prefix) == u32::from(net)
    }

    fn contains_v6(&self, net: Ipv6Addr, ip: Ipv6Addr) -> bool {
        debug_assert!(self.prefix <= 128);
        u128::from(ip) & v6_mask(self.prefix) == u128::from(net)
    }
}

fn v4_mask(prefix: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0)
}

fn v6_mask(prefix: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0)
}

/// `addr/prefix`, always with the prefix.
impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// Why a string is not a CIDR.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CidrError {
    #[error(
        "{0:?} is not an IP address or CIDR (e.g. \"10.0.0.0/8\", \"fd00::/8\", \"192.0.2.7\")"
    )]
    Address(String),
    #[error("prefix length {prefix:?} of {written:?} is not a number from 0 to {max}")]
    Prefix {
        written: String,
        prefix: String,
        max: u8,
    },
}

impl FromStr for Cidr {
    type Err = CidrError;

    fn from_str(written: &str) -> Result<Self, Self::Err> {
        let text = written.trim();
        let (address, prefix) = match text.split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (text, None),
        };
        let address: IpAddr = address
            .parse()
            .map_err(|_| CidrError::Address(written.to_owned()))?;
        let max = if address.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(digits) => {
                let bad = || CidrError::Prefix {
                    written: written.to_owned(),
                    prefix: digits.to_owned(),
                    max,
                };
                // Digits only: no sign, no spaces, no leading "+".
                if digits.is_empty()
                    || digits.len() > 3
                    || !digits.bytes().all(|b| b.is_ascii_digit())
                {
                    return Err(bad());
                }
                digits.parse::<u8>().map_err(|_| bad())?
            }
        };
        Cidr::new(address, prefix).ok_or_else(|| CidrError::Prefix {
            written: written.to_owned(),
            prefix: prefix.to_string(),
            max,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cidr(text: &str) -> Cidr {
        text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn bare_addresses_are_single_hosts() {
        assert_eq!(
            cidr("10.0.0.7"),
            Cidr {
                addr: ip("10.0.0.7"),
                prefix: 32
            }
        );
        assert_eq!(cidr("::1").prefix, 128);
        assert!(cidr("10.0.0.7").contains(ip("10.0.0.7")));
        assert!(!cidr("10.0.0.7").contains(ip("10.0.0.8")));
        assert!(cidr("::1").contains(ip("::1")));
        assert!(!cidr("::1").contains(ip("::2")));
    }

    #[test]
    fn ipv4_networks_contain_their_hosts_only() {
        let net = cidr("10.1.0.0/16");
        assert!(net.contains(ip("10.1.0.0")));
        assert!(net.contains(ip("10.1.255.255")));
        assert!(!net.contains(ip("10.2.0.0")));
        assert!(!net.contains(ip("10.0.255.255")));
        let odd = cidr("192.168.1.128/25");
        assert!(odd.contains(ip("192.168.1.200")));
        assert!(!odd.contains(ip("192.168.1.127")));
    }

    #[test]
    fn ipv6_networks_contain_their_hosts_only() {
        let net = cidr("fd00::/8");
        assert!(net.contains(ip("fd12:3456::1")));
        assert!(!net.contains(ip("fe80::1")));
        let net = cidr("2001:db8:0:1::/64");
        assert!(net.contains(ip("2001:db8:0:1:ffff:ffff:ffff:ffff")));
        assert!(!net.contains(ip("2001:db8:0:2::")));
    }

    #[test]
    fn prefix_zero_contains_the_whole_family() {
        let all4 = cidr("0.0.0.0/0");
        assert!(all4.contains(ip("255.255.255.255")) && all4.contains(ip("1.2.3.4")));
        assert!(!all4.contains(ip("2001:db8::1")));
        let all6 = cidr("::/0");
        assert!(all6.contains(ip("2001:db8::1")));
    }

    #[test]
    fn ipv4_mapped_peers_match_ipv4_networks_and_back() {
        // A peer on a dual-stack [::] listener.
        assert!(cidr("10.0.0.0/8").contains(ip("::ffff:10.9.8.7")));
        assert!(!cidr("10.0.0.0/8").contains(ip("::ffff:11.0.0.1")));
        assert!(!cidr("10.0.0.0/8").contains(ip("::10.9.8.7")));
        assert!(cidr("::ffff:10.0.0.0/104").contains(ip("10.1.2.3")));
        assert!(!cidr("fd00::/8").contains(ip("10.1.2.3")));
    }

    #[test]
    fn host_bits_are_cleared_and_detectable() {
        assert_eq!(cidr("10.0.0.7/8").to_string(), "10.0.0.0/8");
        assert!(cidr("10.0.0.7/8").contains(ip("10.200.0.1")));
        assert_eq!(cidr("2001:db8::1/32").to_string(), "2001:db8::/32");
        assert!(Cidr::had_host_bits("10.0.0.7/8"));
        assert!(!Cidr::had_host_bits("10.0.0.0/8"));
        assert!(!Cidr::had_host_bits("10.0.0.7"));
        assert!(!Cidr::had_host_bits("nonsense"));
    }

    #[test]
    fn display_round_trips() {
        for text in ["10.0.0.0/8", "192.0.2.7/32", "::/0", "fd00::/8"] {
            assert_eq!(cidr(text).to_string(), text);
            assert_eq!(cidr(&cidr(text).to_string()), cidr(text));
        }
        assert_eq!(cidr(" 10.0.0.1 ").to_string(), "10.0.0.1/32");
    }

    #[test]
    fn bad_cidrs_are_rejected_with_a_reason() {
        for bad in [
            "",
            "10.0.0",
            "10.0.0.0/",
            "localhost",
            "10.0.0.0/8/8",
            "[::1]",
        ] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad:?}");
        }
        assert!(matches!(
            "10.0.0.0/33".parse::<Cidr>(),
            Err(CidrError::Prefix { max: 32, .. })
        ));
        assert!(matches!(
            "::/129".parse::<Cidr>(),
            Err(CidrError::Prefix { max: 128, .. })
        ));
        for bad_prefix in ["10.0.0.0/+8", "10.0.0.0/-1", "10.0.0.0/ 8", "10.0.0.0/0008"] {
            assert!(
                matches!(bad_prefix.parse::<Cidr>(), Err(CidrError::Prefix { .. })),
                "{bad_prefix:?}"
            );
        }
        assert_eq!(
            "10.0.0.0/33".parse::<Cidr>().unwrap_err().to_string(),
            "prefix length \"33\" of \"10.0.0.0/33\" is not a number from 0 to 32"
        );
        assert_eq!(
            "localhost".parse::<Cidr>().unwrap_err().to_string(),
            "\"localhost\" is not an IP address or CIDR (e.g. \"10.0.0.0/8\", \"fd00::/8\", \"192.0.2.7\")"
        );
    }
}
