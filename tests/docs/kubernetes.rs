//! `docker/k8s/`: strict schema validation, and the references between the
//! manifests and rolter's configuration that no schema knows.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use rolter::config::file::ConfigFile;
use serde_json::Value;

use crate::configuration::{
    env_vars_named, listen_ports, validate_pingora_yaml, validate_rolter_toml,
};
use crate::tools::*;
use crate::{read, root};

const KNOWN_KINDS: &[&str] = &[
    "Namespace",
    "Secret",
    "ConfigMap",
    "Deployment",
    "StatefulSet",
    "Service",
    "PodDisruptionBudget",
    "HorizontalPodAutoscaler",
];

/// Every manifest of docker/k8s/ (the kustomization apart), with its file.
pub fn k8s_manifests() -> Vec<(String, Value)> {
    let dir = root().join("docker/k8s");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .filter(|p| !p.ends_with("kustomization.yaml"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for path in files {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        for doc in yaml_documents(&std::fs::read_to_string(&path).unwrap()) {
            out.push((name.clone(), doc));
        }
    }
    out
}

#[test]
fn kubernetes_manifests_pass_strict_schema_validation() {
    let dir = root().join("docker/k8s");
    let kustomization = yaml_documents(&read("docker/k8s/kustomization.yaml")).remove(0);
    let listed: BTreeSet<String> = strings(&kustomization["resources"]).into_iter().collect();
    let files: BTreeSet<String> = k8s_manifests().into_iter().map(|(f, _)| f).collect();
    assert_eq!(listed, files, "kustomization.yaml lists every manifest");

    let built = run("kubectl", &["kustomize", "."], &dir);
    assert_success("kubectl kustomize docker/k8s", &built);
    let out_dir = tempfile::tempdir().unwrap();
    let built_path = out_dir.path().join("built.yaml");
    std::fs::write(&built_path, &built.stdout).unwrap();
    let mut args = vec!["--strict".to_string(), "--quiet".to_string()];
    args.extend(files.iter().cloned());
    args.push(built_path.display().to_string());
    // The oldest Kubernetes the manifests are meant for, and the newest the
    // schemas know.
    for version in ["1.30.0", "1.37.0"] {
        let mut all: Vec<&str> = vec!["-k", version];
        all.extend(args.iter().map(String::as_str));
        assert_success(
            &format!("kubernetes-validate --strict -k {version}"),
            &run("kubernetes-validate", &all, &dir),
        );
    }
}

fn labels_match(selector: &Value, labels: &Value) -> bool {
    selector
        .as_object()
        .is_some_and(|s| !s.is_empty() && s.iter().all(|(k, v)| &labels[k] == v))
}

/// The seconds of an exec preStop `sleep N`.
fn pre_stop_sleep(container: &Value) -> Option<u64> {
    let command = strings(&container["lifecycle"]["preStop"]["exec"]["command"]);
    (command.first().map(String::as_str) == Some("sleep")).then(|| command[1].parse().unwrap())
}

/// The manifests of docker/k8s/, looked up by kind and name.
struct Manifests(Vec<(String, Value)>);

impl Manifests {
    fn load() -> Self {
        Manifests(k8s_manifests())
    }

    fn of_kind(&self, kind: &str) -> Vec<&Value> {
        self.0
            .iter()
            .filter(|(_, m)| m["kind"] == kind)
            .map(|(_, m)| m)
            .collect()
    }

    fn named(&self, kind: &str, name: &str) -> &Value {
        self.of_kind(kind)
            .into_iter()
            .find(|m| m["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name}"))
    }

    /// Deployments and StatefulSets.
    fn workloads(&self) -> Vec<&Value> {
        let mut all = self.of_kind("Deployment");
        all.extend(self.of_kind("StatefulSet"));
        all
    }

    fn secret_keys(&self, name: &str) -> BTreeSet<String> {
        let secret = self.named("Secret", name);
        ["data", "stringData"]
            .iter()
            .filter_map(|field| secret[*field].as_object())
            .flat_map(|map| map.keys().cloned())
            .collect()
    }

    /// The rolter node (`rolter serve`) of each role: its workload's name,
    /// its configuration (from the ConfigMap it mounts) and the drain time
    /// its Pingora file allows.
    fn rolter_nodes(&self) -> BTreeMap<String, RolterNode<'_>> {
        let mut nodes = BTreeMap::new();
        for workload in self.workloads() {
            let name = workload["metadata"]["name"].as_str().unwrap();
            let pod = &workload["spec"]["template"]["spec"];
            for container in pod["containers"].as_array().unwrap() {
                let args = strings(&container["args"]);
                if args.first().map(String::as_str) != Some("serve") {
                    continue;
                }
                let volume = pod["volumes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|v| v["configMap"].is_object())
                    .unwrap_or_else(|| panic!("{name}: no ConfigMap volume"));
                let mount = container["volumeMounts"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|m| m["name"] == volume["name"])
                    .unwrap_or_else(|| panic!("{name}: the ConfigMap is not mounted"));
                let dir = mount["mountPath"].as_str().unwrap();
                let map = self.named("ConfigMap", volume["configMap"]["name"].as_str().unwrap());
                let file_of = |flag: &str| -> &str {
                    let path =
                        flag_value(&args, flag).unwrap_or_else(|| panic!("{name}: no {flag}"));
                    let key = path
                        .strip_prefix(&format!("{dir}/"))
                        .unwrap_or_else(|| panic!("{name}: {path} is not under {dir}"))
                        .to_string();
                    map["data"][key.as_str()]
                        .as_str()
                        .unwrap_or_else(|| panic!("{name}: the ConfigMap has no {key}"))
                };
                let file = validate_rolter_toml(name, file_of("--config"));
                let drain = validate_pingora_yaml(name, file_of("-c"));
                let role = file.server.role.clone().unwrap_or_default();
                let node = RolterNode {
                    name: name.to_string(),
                    workload,
                    container,
                    file,
                    drain,
                };
                assert!(
                    nodes.insert(role.clone(), node).is_none(),
                    "two {role} nodes"
                );
            }
        }
        assert!(
            nodes.contains_key("gateway") && nodes.contains_key("control"),
            "rolter nodes: {:?}",
            nodes.keys()
        );
        nodes
    }
}

struct RolterNode<'a> {
    name: String,
    workload: &'a Value,
    container: &'a Value,
    file: ConfigFile,
    drain: u64,
}

/// A container's ports by name.
fn container_ports(container: &Value) -> BTreeMap<String, u64> {
    container["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            (
                p["name"].as_str().unwrap().to_string(),
                p["containerPort"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn kubernetes_manifests_are_known_kinds_whose_references_exist() {
    let manifests = Manifests::load();
    for (file, m) in &manifests.0 {
        let kind = m["kind"]
            .as_str()
            .unwrap_or_else(|| panic!("{file}: no kind"));
        assert!(
            KNOWN_KINDS.contains(&kind),
            "{file}: unexpected kind {kind}"
        );
        assert!(m["apiVersion"].is_string(), "{file}: no apiVersion");
        assert!(
            m["metadata"]["name"].is_string(),
            "{file}: no metadata.name"
        );
        if kind != "Namespace" {
            assert_eq!(
                m["metadata"]["namespace"], "rolter",
                "{file}: {kind} namespace"
            );
        }
    }
    for workload in manifests.workloads() {
        let name = workload["metadata"]["name"].as_str().unwrap();
        let template = &workload["spec"]["template"];
        assert!(
            labels_match(
                &workload["spec"]["selector"]["matchLabels"],
                &template["metadata"]["labels"]
            ),
            "{name}: the selector does not select its own pods"
        );
        for container in template["spec"]["containers"].as_array().unwrap() {
            let ports = container_ports(container);
            for probe in ["readinessProbe", "livenessProbe", "startupProbe"] {
                let port = &container[probe]["httpGet"]["port"];
                assert!(
                    port.is_null()
                        || port.as_str().is_some_and(|p| ports.contains_key(p))
                        || port
                            .as_u64()
                            .is_some_and(|p| ports.values().any(|v| *v == p)),
                    "{name}: {probe} port {port} is not a container port"
                );
            }
            for env in container["env"].as_array().into_iter().flatten() {
                let secret = &env["valueFrom"]["secretKeyRef"];
                if secret.is_object() {
                    let key = secret["key"].as_str().unwrap();
                    assert!(
                        manifests
                            .secret_keys(secret["name"].as_str().unwrap())
                            .contains(key),
                        "{name}: secret key {key} does not exist"
                    );
                }
            }
        }
    }
    // Services select pods that have the ports they point at.
    for service in manifests.of_kind("Service") {
        let name = service["metadata"]["name"].as_str().unwrap();
        let pods: Vec<&Value> = manifests
            .workloads()
            .into_iter()
            .map(|w| &w["spec"]["template"])
            .filter(|t| labels_match(&service["spec"]["selector"], &t["metadata"]["labels"]))
            .collect();
        assert!(!pods.is_empty(), "Service {name} selects no pods");
        for port in service["spec"]["ports"].as_array().unwrap() {
            let target = &port["targetPort"];
            for pod in &pods {
                let found = pod["spec"]["containers"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .flat_map(|c| c["ports"].as_array().into_iter().flatten())
                    .any(|p| &p["name"] == target || p["containerPort"] == *target);
                assert!(
                    found,
                    "Service {name}: targetPort {target} is no container port"
                );
            }
        }
    }
    for hpa in manifests.of_kind("HorizontalPodAutoscaler") {
        let target = &hpa["spec"]["scaleTargetRef"];
        manifests.named(
            target["kind"].as_str().unwrap(),
            target["name"].as_str().unwrap(),
        );
    }
}

#[test]
fn kubernetes_rolter_pods_probe_readiness_and_outlast_their_drain() {
    let manifests = Manifests::load();
    for node in manifests.rolter_nodes().values() {
        let name = &node.name;
        let pod = &node.workload["spec"]["template"]["spec"];
        let container = node.container;
        let ports = container_ports(container);
        let (proxy, admin) = listen_ports(&node.file);
        for port in ports.values() {
            assert!(
                *port == u64::from(admin) || proxy.contains(&(*port as u16)),
                "{name}: container port {port} is not a listener of its configuration"
            );
        }
        assert_eq!(
            ports.get("admin"),
            Some(&u64::from(admin)),
            "{name}: admin port"
        );
        for (probe, path) in [("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")] {
            assert_eq!(container[probe]["httpGet"]["path"], path, "{name}: {probe}");
            assert_eq!(
                container[probe]["httpGet"]["port"], "admin",
                "{name}: {probe}"
            );
        }
        let sleep = pre_stop_sleep(container)
            .unwrap_or_else(|| panic!("{name}: no preStop sleep before the drain"));
        let grace = pod["terminationGracePeriodSeconds"].as_u64().unwrap_or(30);
        assert!(
            grace > sleep + node.drain,
            "{name}: terminationGracePeriodSeconds {grace} does not cover preStop ({sleep} s) + the drain ({} s)",
            node.drain
        );
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true, "{name}");
        let env: BTreeSet<String> = container["env"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| e["name"].as_str().unwrap().to_string())
            .collect();
        for var in env_vars_named(&node.file) {
            assert!(
                env.contains(&var),
                "{name}: {var} is named by its configuration but not set"
            );
        }
    }
}

#[test]
fn kubernetes_gateways_reach_the_control_service_and_have_a_disruption_budget() {
    let manifests = Manifests::load();
    let nodes = manifests.rolter_nodes();
    let (gateway, control) = (&nodes["gateway"], &nodes["control"]);
    let url = gateway
        .file
        .control_plane
        .as_ref()
        .and_then(|c| c.url.as_deref())
        .expect("control_plane.url");
    let (host, port) = url_host_port(url);
    let service = manifests.named("Service", &host);
    let (_, control_admin) = listen_ports(&control.file);
    assert!(
        labels_match(
            &service["spec"]["selector"],
            &control.workload["spec"]["template"]["metadata"]["labels"]
        ),
        "Service {host} does not select {}",
        control.name
    );
    assert!(
        service["spec"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["port"] == port
                && (p["targetPort"] == "admin" || p["targetPort"] == control_admin)),
        "control_plane.url {url} does not reach {}'s admin port",
        control.name
    );
    let gateway_labels = &gateway.workload["spec"]["template"]["metadata"]["labels"];
    assert!(
        manifests
            .of_kind("PodDisruptionBudget")
            .iter()
            .any(|p| labels_match(&p["spec"]["selector"]["matchLabels"], gateway_labels)),
        "no PodDisruptionBudget selects the gateways"
    );
    assert_eq!(
        gateway.workload["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"], 0,
        "a rolling update drains an old gateway only once its successor is ready"
    );
}
