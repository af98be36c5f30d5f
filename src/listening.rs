//! Whether the proxy's listeners accept connections yet.
//!
//! Pingora binds each service's listeners on that service's own thread, so
//! the admin listener may answer before the proxy's sockets are bound. A
//! load balancer or an orchestrator that reads "ready" sends traffic at
//! once, so `/readyz` first checks that every proxy listener accepts a
//! connection; once they all did, the answer is kept (listeners are bound
//! for the life of the process).

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::config::Role;
use crate::state::GatewayState;

/// Longest wait for one listener to accept.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

#[derive(Default)]
pub struct ProxyListening {
    confirmed: AtomicBool,
}

impl ProxyListening {
    /// True once every proxy listener (plaintext and TLS) accepted a
    /// connection; a control node has none and is always listening.
    pub async fn check(&self, state: &GatewayState) -> bool {
        if self.confirmed.load(Ordering::Acquire) {
            return true;
        }
        let snapshot = state.snapshot();
        if snapshot.config.server.role == Role::Control {
            return true;
        }
        let plain = snapshot.config.server.listen.iter().map(String::as_str);
        let tls = state.tls.resolvers().iter().map(|r| r.listen());
        for address in plain.chain(tls) {
            if !accepts(address).await {
                return false;
            }
        }
        self.confirmed.store(true, Ordering::Release);
        true
    }
}

async fn accepts(address: &str) -> bool {
    // Validated at load; an address that does not parse cannot be checked
    // and does not hold readiness back.
    let Ok(address) = address.parse::<SocketAddr>() else {
        return true;
    };
    let address = reachable(address);
    matches!(
        tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(address)).await,
        Ok(Ok(_))
    )
}

/// A wildcard listener is reached through the loopback address of its family.
fn reachable(mut address: SocketAddr) -> SocketAddr {
    if address.ip().is_unspecified() {
        address.set_ip(match address {
            SocketAddr::V4(_) => Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => Ipv6Addr::LOCALHOST.into(),
        });
    }
    address
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_are_reached_on_loopback_and_others_as_written() {
        let v4: SocketAddr = "0.0.0.0:8080".parse().unwrap();
        let v6: SocketAddr = "[::]:8443".parse().unwrap();
        let host: SocketAddr = "10.1.2.3:80".parse().unwrap();
        assert_eq!(reachable(v4), "127.0.0.1:8080".parse().unwrap());
        assert_eq!(reachable(v6), "[::1]:8443".parse().unwrap());
        assert_eq!(reachable(host), host);
    }

    #[tokio::test]
    async fn a_bound_listener_accepts_and_a_free_port_does_not() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let bound = listener.local_addr().unwrap().to_string();
        assert!(accepts(&bound).await);
        drop(listener);
        assert!(!accepts(&bound).await);
    }
}
