//! `docker/`: the Dockerfile, the compose fleet and its Prometheus
//! configuration, validated without a container engine.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use rolter::config::file::ConfigFile;
use serde_json::Value;

use crate::configuration::{
    env_vars_named, listen_ports, port_of, validate_pingora_yaml, validate_rolter_toml,
};
use crate::tools::*;
use crate::{read, root};

/// `docker compose config` where the plugin exists, else docker-compose:
/// both validate against the Compose schema without an engine.
fn compose_config() -> Value {
    let dir = root().join("docker");
    let args = ["-f", "compose.yaml", "config"];
    let plugin = Command::new("docker")
        .args(["compose", "version"])
        .output()
        .is_ok_and(|o| o.status.success());
    let output = if plugin {
        let mut all = vec!["compose"];
        all.extend(args);
        run("docker", &all, &dir)
    } else {
        run("docker-compose", &args, &dir)
    };
    assert_success("docker compose config", &output);
    yaml_documents(&String::from_utf8(output.stdout).unwrap()).remove(0)
}

/// Seconds of a Compose duration ("90s", "1m30s").
fn compose_seconds(duration: &str) -> u64 {
    let mut total = 0;
    let mut number = String::new();
    for c in duration.chars() {
        match c {
            '0'..='9' => number.push(c),
            'h' | 'm' | 's' => {
                let n: u64 = number.parse().unwrap();
                total += n * match c {
                    'h' => 3600,
                    'm' => 60,
                    _ => 1,
                };
                number.clear();
            }
            _ => panic!("unexpected duration {duration:?}"),
        }
    }
    total
}

/// A service's file mounted at `target`, read from the host side.
fn mounted_file(service: &Value, target: &str) -> Option<String> {
    service["volumes"].as_array()?.iter().find_map(|volume| {
        let (source, to) = match volume {
            Value::String(s) => {
                let mut parts = s.split(':');
                (parts.next()?.to_string(), parts.next()?.to_string())
            }
            v => (
                v["source"].as_str()?.to_string(),
                v["target"].as_str()?.to_string(),
            ),
        };
        (to == target).then(|| {
            let path = if Path::new(&source).is_absolute() {
                PathBuf::from(&source)
            } else {
                root().join("docker").join(&source)
            };
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{source}: {e}"))
        })
    })
}

/// Container ports a service publishes.
fn published_ports(service: &Value) -> BTreeSet<u16> {
    service["ports"]
        .as_array()
        .map(|ports| {
            ports
                .iter()
                .map(|p| match p {
                    Value::String(s) => s
                        .split('/')
                        .next()
                        .unwrap()
                        .rsplit(':')
                        .next()
                        .unwrap()
                        .parse()
                        .unwrap(),
                    v => v["target"].as_u64().unwrap() as u16,
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn compose_file_validates_and_wires_the_fleet() {
    let config = compose_config();
    let services = config["services"].as_object().unwrap();
    for name in [
        "postgres",
        "control",
        "gateway-1",
        "gateway-2",
        "engine-a",
        "engine-b",
        "engine-c",
        "prometheus",
    ] {
        assert!(services.contains_key(name), "no service {name}");
    }
    assert!(services["postgres"]["image"]
        .as_str()
        .unwrap()
        .starts_with("postgres:15"));

    // Engines: fake-llm with KV events on every interface, a health check
    // on their own port.
    let mut engines: BTreeMap<String, (u16, u16)> = BTreeMap::new();
    for (name, service) in services {
        let command = strings(&service["command"]);
        if command.first().map(String::as_str) != Some("fake-llm") {
            continue;
        }
        let listen = flag_value(&command, "--listen").expect("--listen");
        let events = flag_value(&command, "--kv-events").expect("--kv-events");
        let replay = flag_value(&command, "--kv-replay").expect("--kv-replay");
        assert!(listen.starts_with("0.0.0.0:"), "{name}: {listen}");
        assert!(events.starts_with("tcp://0.0.0.0:"), "{name}: {events}");
        assert!(replay.starts_with("tcp://0.0.0.0:"), "{name}: {replay}");
        let test = strings(&service["healthcheck"]["test"]).join(" ");
        assert!(
            test.contains(&format!(":{}/health", port_of(&listen))),
            "{name}: its health check does not probe its own port: {test}"
        );
        engines.insert(name.clone(), (port_of(&events), port_of(&replay)));
    }
    assert_eq!(engines.len(), 3, "three fake engines");

    // rolter nodes: the mounted files validate, every variable they name
    // is set, ports and grace periods fit.
    let mut admin_targets = BTreeSet::new();
    let mut admin_ports = BTreeMap::new();
    let mut roles = BTreeMap::new();
    for (name, service) in services {
        let command = strings(&service["command"]);
        if command.first().map(String::as_str) != Some("serve") {
            continue;
        }
        assert_eq!(
            service["build"]["dockerfile"], "docker/Dockerfile",
            "{name}"
        );
        let toml_path = flag_value(&command, "--config").expect("--config");
        let yaml_path = flag_value(&command, "-c").expect("-c");
        let text = mounted_file(service, &toml_path)
            .unwrap_or_else(|| panic!("{name}: {toml_path} is not mounted"));
        let file = validate_rolter_toml(&format!("{name} {toml_path}"), &text);
        let drain = validate_pingora_yaml(
            name,
            &mounted_file(service, &yaml_path)
                .unwrap_or_else(|| panic!("{name}: {yaml_path} is not mounted")),
        );
        let stop = compose_seconds(service["stop_grace_period"].as_str().unwrap_or("10s"));
        assert!(
            stop > drain,
            "{name}: stop_grace_period {stop} s does not cover the drain ({drain} s)"
        );
        let environment = service["environment"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        for var in env_vars_named(&file) {
            assert!(
                environment
                    .get(&var)
                    .and_then(Value::as_str)
                    .is_some_and(|v| !v.is_empty()),
                "{name}: {var} is named by its configuration but not set"
            );
        }
        let (proxy, admin) = listen_ports(&file);
        for port in published_ports(service) {
            assert!(
                port == admin || proxy.contains(&port),
                "{name} publishes {port}, where it does not listen"
            );
        }
        admin_targets.insert(format!("{name}:{admin}"));
        admin_ports.insert(name.clone(), admin);
        let role = file.server.role.clone().unwrap_or_default();
        if role == "control" {
            // The engines it names are the compose engines, KV ports included.
            for provider in &file.providers {
                let (host, port) = url_host_port(provider.base_url.as_deref().unwrap());
                let (events, replay) = engines
                    .get(&host)
                    .unwrap_or_else(|| panic!("{name}: provider host {host} is no engine"));
                assert_eq!(port, 8000);
                let kv = provider.kv_events.as_ref().expect("kv_events");
                assert_eq!(
                    url_host_port(kv.endpoint.as_deref().unwrap()),
                    (host.clone(), *events)
                );
                assert_eq!(
                    url_host_port(kv.replay_endpoint.as_deref().unwrap()),
                    (host.clone(), *replay)
                );
            }
            assert_eq!(
                service["depends_on"]["postgres"]["condition"], "service_healthy",
                "{name}"
            );
            assert!(
                service["healthcheck"]["test"].is_array(),
                "{name}: no health check"
            );
        }
        roles.insert(name.clone(), (role, file));
    }
    let controls: Vec<&String> = roles
        .iter()
        .filter(|(_, (r, _))| r == "control")
        .map(|(n, _)| n)
        .collect();
    let gateways: Vec<&String> = roles
        .iter()
        .filter(|(_, (r, _))| r == "gateway")
        .map(|(n, _)| n)
        .collect();
    assert_eq!((controls.len(), gateways.len()), (1, 2), "roles: {roles:?}");
    for gateway in &gateways {
        let file = &roles[*gateway].1;
        let url = file.control_plane.as_ref().unwrap().url.as_deref().unwrap();
        let (host, port) = url_host_port(url);
        assert_eq!(
            (&host, port),
            (controls[0], admin_ports[controls[0]]),
            "{gateway}: {url}"
        );
        assert_eq!(
            services[*gateway]["depends_on"][controls[0].as_str()]["condition"],
            "service_healthy",
            "{gateway}"
        );
    }

    // Prometheus scrapes the admin /metrics of every rolter node.
    let prometheus = &services["prometheus"];
    let scrape = yaml_documents(
        &mounted_file(prometheus, "/etc/prometheus/prometheus.yml")
            .expect("prometheus.yml mounted"),
    )
    .remove(0);
    assert!(
        mounted_file(prometheus, "/etc/prometheus/alerts.yml").is_some(),
        "alerts.yml mounted beside prometheus.yml"
    );
    let job = scrape["scrape_configs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["job_name"] == "rolter")
        .expect("a rolter job");
    assert_eq!(job["metrics_path"], "/metrics");
    let scraped: BTreeSet<String> = job["static_configs"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| strings(&c["targets"]))
        .collect();
    assert_eq!(
        scraped, admin_targets,
        "Prometheus scrapes every rolter node's admin port"
    );
}

#[test]
fn dockerfile_runs_unprivileged_with_health_check_and_drain_signal() {
    let dockerfile = read("docker/Dockerfile");
    let stages: Vec<&str> = dockerfile.split("\nFROM ").collect();
    assert!(stages.len() >= 3, "a multi-stage build");
    assert!(
        stages[1].contains("cmake"),
        "the build stage installs cmake for Pingora"
    );
    assert!(
        stages[1].contains("scripts/build-release") && stages[1].contains("target/pgo/rolter"),
        "the image ships the profile-guided build that `make release` makes"
    );
    let runtime = stages.last().unwrap();
    assert!(
        runtime.starts_with("debian:"),
        "runtime on Debian: {runtime:.40}"
    );
    assert!(runtime.contains("-slim"), "a slim runtime");
    assert!(runtime.contains("ca-certificates"));
    assert!(!dockerfile.contains("libssl"), "rustls only, no OpenSSL");
    let instruction = |name: &str| -> Vec<&str> {
        runtime
            .lines()
            .filter_map(|l| l.strip_prefix(name).map(str::trim))
            .collect()
    };
    let user = instruction("USER ");
    assert_eq!(user.len(), 1, "one USER in the runtime stage");
    assert!(!["root", "0", "0:0"].contains(&user[0]), "runs as root");
    assert_eq!(instruction("STOPSIGNAL "), ["SIGTERM"]);
    let healthcheck = runtime
        .split("HEALTHCHECK")
        .nth(1)
        .expect("a HEALTHCHECK")
        .split("\n\n")
        .next()
        .unwrap();
    assert!(healthcheck.contains("/healthz"), "{healthcheck}");
    // It probes the admin port every shipped rolter node configuration uses.
    for path in ["docker/compose/control.toml", "docker/compose/gateway.toml"] {
        let file: ConfigFile = toml::from_str(&read(path)).unwrap();
        let (_, admin) = listen_ports(&file);
        assert!(
            healthcheck.contains(&format!("127.0.0.1:{admin}/healthz")),
            "the health check does not probe {path}'s admin port {admin}"
        );
    }
    assert!(runtime.contains("ROLTER_UI_DIR=/usr/share/rolter/ui"));
    assert!(
        runtime.contains("/usr/share/rolter/ui\n") || runtime.contains("/usr/share/rolter/ui \\")
    );
    let ignore = read("docker/Dockerfile.dockerignore");
    for path in [".git", "target", "ui/node_modules"] {
        assert!(
            ignore.lines().any(|l| l == path),
            "{path} is not kept out of the context"
        );
    }
}

#[test]
fn prometheus_config_and_alerts_pass_promtool() {
    let dir = root().join("docker/compose");
    assert_success(
        "promtool check config",
        &run("promtool", &["check", "config", "prometheus.yml"], &dir),
    );
    assert_success(
        "promtool test rules",
        &run("promtool", &["test", "rules", "alerts.test.yml"], &dir),
    );
}

/// The fenced block of `lang` under `heading` in docs/operations.md.
fn operations_block(heading: &str, lang: &str) -> String {
    crate::markdown::fenced_block(&read("docs/operations.md"), heading, lang)
}

#[test]
fn systemd_unit_of_the_operations_guide_verifies() {
    let unit = operations_block("### With systemd", "ini")
        .replace("/usr/local/bin/rolter", crate::support::ROLTER);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rolter@blue.service");
    std::fs::write(&path, unit).unwrap();
    let output = run(
        "systemd-analyze",
        &["verify", "--man=no", path.to_str().unwrap()],
        dir.path(),
    );
    assert_success("systemd-analyze verify", &output);
    // Unknown keys are warnings, not failures.
    assert!(
        output.stderr.is_empty(),
        "systemd-analyze verify warns:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
