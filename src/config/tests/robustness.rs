//! Validation never panics, whatever the text; what it accepts keeps the
//! invariants the gateway relies on.

use super::contract::{CONTRACT_EXAMPLE_IMPLEMENTED, CONTRACT_EXAMPLE_VERBATIM};
use super::*;

/// splitmix64: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const TOKENS: &[&str] = &[
    "[",
    "]",
    "[[",
    "]]",
    "{",
    "}",
    "=",
    ",",
    ".",
    "\"",
    "'",
    "\n",
    " ",
    "#",
    "-",
    "0",
    "65536",
    "-1",
    "1e9",
    "true",
    "\"\"",
    "\"x\"",
    "\u{e9}",
    "\u{0}",
    "\\",
    "\"\"\"",
    "server",
    "providers",
    "routes",
    "targets",
    "provider",
    "model",
    "weight",
    "slug",
    "name",
    "base_url",
    "\"http://h:1/v1\"",
    "\"https://[::1]\"",
    "api_keys",
    "key_sha256",
    "key_env",
    "listen",
    "\"0.0.0.0:1\"",
    "strategy",
    "\"weighted\"",
    "health",
    "role",
    "\"gpu-a\"",
    "retry",
    "timeouts",
    "18446744073709551615",
    "inf",
    "nan",
    "1979-05-27",
    "[a.b.c]",
    "x.y = 1",
    "provider_groups",
    "members",
    "catalog",
    "input_per_mtok",
    "adaptive_routing",
    "exploration_ratio",
    "max_loras",
    "-0.5",
    "\"round_robin\"",
    "breaker",
    "parking",
    "interval_secs",
    "timeout_secs",
    "healthy_after",
    "failure_threshold",
    "base_secs",
    "max_secs",
    "3600",
    "kv_events",
    "lmcache",
    "endpoint",
    "replay_endpoint",
    "\"tcp://*:1\"",
    "\"tcp://h:65535\"",
    "\"http://h/x?y\"",
    "block_size",
    "data_parallel_size",
    "poll_interval_secs",
    "stale_after_secs",
    "format",
    "\"prometheus\"",
    "metric",
    "trusted_proxies",
    "\"10.0.0.7/8\"",
    "\"::/0\"",
    "access_log",
    "\"off\"",
    "tls_verify",
    "ca_file",
    "rpm",
    "max_concurrent",
    "keepalive_timeout_secs",
    "header_read_timeout_secs",
    "control_plane",
    "\"gateway\"",
    "\"control\"",
    "url",
    "\"http://control:9090\"",
    "database_url_env",
    "internal_token_env",
    "\"TOKEN\"",
    "node_id",
    "poll_interval_secs",
    "key_salted",
    "token_salted",
    "admin_tokens",
    "id",
    "salt",
    "sha256",
    "\"0123456789abcdef\"",
];

fn check_never_panics(text: &str) {
    let env = |name: &str| (name.len() % 2 == 0).then(|| format!("v-{name}"));
    let lines = text.split('\n').count();
    match parse("fuzz.toml", text, &env) {
        Err(errors) => {
            assert!(!errors.0.is_empty());
            for error in &errors.0 {
                assert!(!error.message.is_empty());
                assert!(error.line.is_none_or(|l| l >= 1 && l <= lines), "{error}");
            }
        }
        Ok(config) => {
            for warning in &config.warnings {
                assert!(!warning.message.is_empty() && warning.field.is_some());
                assert!(
                    warning.line.is_none_or(|l| l >= 1 && l <= lines),
                    "{warning}"
                );
            }
            // Invariants the gateway relies on.
            for route in &config.routes {
                assert!(!route.targets.is_empty());
                for target in &route.targets {
                    assert!(config.providers.iter().any(|p| p.slug == target.provider));
                    assert!(target.weight >= 1);
                }
            }
            for provider in &config.providers {
                assert!(is_valid_slug(&provider.slug));
                assert!((1..=1024).contains(&provider.max_loras));
                if let Some(kv) = &provider.kv_events {
                    assert!((1..=1024).contains(&kv.block_size), "{kv:?}");
                    assert!((1..=64).contains(&kv.data_parallel_size), "{kv:?}");
                    // Every rank's port fits (shift_port debug-asserts it).
                    let last = kv.data_parallel_size - 1;
                    assert!(kv.endpoint_of_rank(last).starts_with("tcp://"));
                    assert!(kv
                        .replay_endpoint_of_rank(last)
                        .is_none_or(|e| e.starts_with("tcp://")));
                }
                if let Some(signal) = &provider.lmcache {
                    assert!(signal.poll_interval >= Duration::from_secs(1));
                    assert!(signal.stale_after > signal.poll_interval, "{signal:?}");
                }
            }
            let server = &config.server;
            assert!((1..=3600).contains(&server.header_read_timeout.as_secs()));
            assert!(server.keepalive_timeout <= Duration::from_secs(3600));
            assert!(server.tls.iter().all(|tls| !tls.certificates.is_empty()));
            for group in &config.provider_groups {
                assert!(is_valid_slug(&group.slug));
                assert!(config.providers.iter().all(|p| p.slug != group.slug));
                assert!(!group.members.is_empty());
                for (i, member) in group.members.iter().enumerate() {
                    assert!(config.providers.iter().any(|p| p.slug == member.provider));
                    assert!(member.weight >= 1);
                    assert!(group.members[..i]
                        .iter()
                        .all(|m| m.provider != member.provider));
                }
            }
            for entry in &config.catalog {
                for price in [entry.input_per_mtok, entry.output_per_mtok] {
                    assert!(price.is_finite() && price >= 0.0, "{entry:?}");
                }
            }
            let policy = &config.adaptive_routing;
            for weight in [
                policy.latency_weight,
                policy.cost_weight,
                policy.load_weight,
            ] {
                assert!(weight.is_finite() && weight >= 0.0, "{policy:?}");
            }
            assert!((0.0..=0.5).contains(&policy.exploration_ratio));
            assert!(
                !policy.enabled
                    || policy.latency_weight + policy.cost_weight + policy.load_weight > 0.0
            );
            let health = &config.health;
            assert!(health.timeout >= Duration::from_secs(1) && health.timeout < health.interval);
            assert!(health.interval <= Duration::from_secs(3600), "{health:?}");
            for count in [health.unhealthy_after, health.healthy_after] {
                assert!((1..=100).contains(&count), "{health:?}");
            }
            let breaker = &config.breaker;
            assert!((1..=1000).contains(&breaker.failure_threshold));
            assert!((1..=3600).contains(&breaker.open.as_secs()), "{breaker:?}");
            assert_eq!(
                config.control_plane.is_some(),
                config.server.role != Role::Standalone
            );
            if let Some(control_plane) = &config.control_plane {
                assert!(control_plane
                    .internal_token
                    .as_ref()
                    .is_some_and(|t| !t.is_empty()));
                assert_eq!(
                    control_plane.url.is_some(),
                    config.server.role == Role::Gateway
                );
                assert_eq!(
                    control_plane.database_url.is_some(),
                    config.server.role == Role::Control
                );
                assert!(super::control_plane::is_node_id(&control_plane.node_id));
                for interval in [
                    control_plane.poll_interval,
                    control_plane.telemetry_interval,
                ] {
                    assert!((1..=300).contains(&interval.as_secs()), "{control_plane:?}");
                }
            }
            if config.server.role == Role::Gateway {
                assert!(config.providers.is_empty() && config.routes.is_empty());
            }
            let parking = &config.parking;
            assert!(parking.base >= Duration::from_secs(1) && parking.base <= parking.max);
            assert!(parking.max <= Duration::from_secs(86_400), "{parking:?}");
        }
    }
}

#[test]
fn arbitrary_token_soup_never_panics() {
    let mut rng = Rng(0x5EED);
    for _ in 0..3000 {
        let len = rng.below(40);
        let text: String = (0..len).map(|_| TOKENS[rng.below(TOKENS.len())]).collect();
        check_never_panics(&text);
    }
}

#[test]
fn mutated_contract_examples_never_panic() {
    let mut rng = Rng(0x00C0_FFEE);
    for case in 0..3000 {
        let base = if case % 2 == 0 {
            CONTRACT_EXAMPLE_IMPLEMENTED
        } else {
            CONTRACT_EXAMPLE_VERBATIM
        };
        let mut text: Vec<char> = base.chars().collect();
        for _ in 0..1 + rng.below(4) {
            let at = rng.below(text.len() + 1);
            match rng.below(4) {
                0 => {
                    let end = (at + rng.below(20)).min(text.len());
                    text.drain(at..end);
                }
                1 => {
                    let token = TOKENS[rng.below(TOKENS.len())];
                    text.splice(at..at, token.chars());
                }
                2 => {
                    let end = (at + rng.below(60)).min(text.len());
                    let copy: Vec<char> = text[at..end].to_vec();
                    let to = rng.below(text.len() + 1);
                    text.splice(to..to, copy);
                }
                _ => {
                    if at < text.len() {
                        text[at] = char::from(rng.below(128) as u8);
                    }
                }
            }
        }
        check_never_panics(&text.into_iter().collect::<String>());
    }
}

#[test]
fn arbitrary_bytes_never_panic() {
    let mut rng = Rng(42);
    for _ in 0..2000 {
        let bytes: Vec<u8> = (0..rng.below(64)).map(|_| rng.next() as u8).collect();
        check_never_panics(&String::from_utf8_lossy(&bytes));
    }
}
