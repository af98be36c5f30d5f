//! A Pingora 0.9.1 passthrough and nothing else: every request goes to one
//! upstream over pooled keep-alive connections, headers and body as they
//! came. What the framework costs before any gateway logic; the side-by-side
//! benchmark puts it beside nginx and rolter.
//!
//! `bare-pingora -c pingora.yaml` with `BARE_LISTEN` (`127.0.0.1:PORT`) and
//! `BARE_UPSTREAM` (`127.0.0.1:PORT`) in the environment.

use async_trait::async_trait;
use pingora::prelude::*;
use pingora::proxy::{http_proxy_service, ProxyHttp, Session};
use pingora::upstreams::peer::HttpPeer;

struct Passthrough {
    upstream: String,
}

#[async_trait]
impl ProxyHttp for Passthrough {
    type CTX = ();

    fn new_ctx(&self) {}

    async fn upstream_peer(&self, _session: &mut Session, _ctx: &mut ()) -> Result<Box<HttpPeer>> {
        Ok(Box::new(HttpPeer::new(
            self.upstream.as_str(),
            false,
            String::new(),
        )))
    }
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        eprintln!("bare-pingora: set {name} (host:port)");
        std::process::exit(2)
    })
}

fn main() {
    let listen = env("BARE_LISTEN");
    let upstream = env("BARE_UPSTREAM");
    let mut server = Server::new(Some(Opt::parse_args())).expect("the Pingora configuration");
    server.bootstrap();
    let mut proxy = http_proxy_service(&server.configuration, Passthrough { upstream });
    proxy.add_tcp(&listen);
    server.add_service(proxy);
    println!("bare-pingora listening on http://{listen}");
    server.run_forever();
}
