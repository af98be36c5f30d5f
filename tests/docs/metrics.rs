//! `docs/metrics.md` against the metrics the code registers and a running
//! gateway exposes, and its example alerts against the shipped rules.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use crate::markdown::{code_spans, fenced_block, table_rows};
use crate::support::*;
use crate::tools::yaml_documents;
use crate::{read, root};

/// Documented metrics: name -> (type, labels).
fn documented_metrics() -> BTreeMap<String, (String, BTreeSet<String>)> {
    let doc = read("docs/metrics.md");
    let mut out = BTreeMap::new();
    for row in table_rows(&doc, "metric") {
        assert_eq!(row.cells.len(), 4, "not 4 cells: {:?}", row.cells);
        let name = code_spans(&row.cells[0])
            .into_iter()
            .next()
            .unwrap_or_else(|| panic!("metric cell without `code`: {:?}", row.cells));
        let labels: BTreeSet<String> = code_spans(&row.cells[2]).into_iter().collect();
        let previous = out.insert(name.clone(), (row.cells[1].clone(), labels));
        assert!(previous.is_none(), "{name} documented twice");
    }
    out
}

/// Every metric name the code registers: the `"rolter_..."` string
/// literals under `src/`.
fn metric_names_in_source() -> BTreeSet<String> {
    fn walk(dir: &Path, out: &mut BTreeSet<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                for piece in text.split("\"rolter_").skip(1) {
                    let name: String = piece
                        .chars()
                        .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                        .collect();
                    if piece[name.len()..].starts_with('"') {
                        out.insert(format!("rolter_{name}"));
                    }
                }
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(&root().join("src"), &mut out);
    out
}

#[test]
fn metrics_reference_lists_exactly_the_metrics_the_code_registers() {
    let code = metric_names_in_source();
    assert!(code.len() > 20, "found only {code:?}");
    let docs: BTreeSet<String> = documented_metrics().into_keys().collect();
    let missing: Vec<&String> = code.difference(&docs).collect();
    let extra: Vec<&String> = docs.difference(&code).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "docs/metrics.md and the code disagree.\nregistered, not documented: {missing:?}\ndocumented, not registered: {extra:?}"
    );
}

/// Families of a Prometheus text exposition: name -> (type, label names).
fn exposition_families(text: &str) -> BTreeMap<String, (String, BTreeSet<String>)> {
    let mut families: BTreeMap<String, (String, BTreeSet<String>)> = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut words = rest.split_whitespace();
            let (name, kind) = (words.next().unwrap(), words.next().unwrap());
            families.insert(name.to_string(), (kind.to_string(), BTreeSet::new()));
        } else if !line.starts_with('#') && !line.is_empty() {
            let series = line.split(' ').next().unwrap();
            let (name, labels) = series.split_once('{').unwrap_or((series, ""));
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suffix| {
                    let base = name.strip_suffix(suffix)?;
                    (families.get(base)?.0 == "histogram").then_some(base)
                })
                .unwrap_or(name);
            let entry = families
                .get_mut(family)
                .unwrap_or_else(|| panic!("sample of an undeclared family: {line}"));
            for pair in labels.trim_end_matches('}').split("\",") {
                if let Some((label, _)) = pair.split_once("=\"") {
                    if label != "le" {
                        entry.1.insert(label.trim_start_matches(',').to_string());
                    }
                }
            }
        }
    }
    families
}

#[tokio::test]
async fn metrics_reference_matches_a_running_gateways_exposition() {
    let engine = FakeEngine::start(
        "engine",
        &[
            "--kv-events",
            "tcp://127.0.0.1:0",
            "--kv-replay",
            "tcp://127.0.0.1:0",
        ],
    );
    let config = format!(
        "{}[providers.kv_events]\nendpoint = \"{}\"\nreplay_endpoint = \"{}\"\n\n\
         [providers.lmcache]\nendpoint = \"{}/fake/occupancy\"\npoll_interval_secs = 1\n\n\
         [providers.engine_metrics]\npoll_interval_ms = 100\n\n\
         [[routes]]\nmodel = \"chat\"\nstrategy = \"round_robin\"\ntargets = [{{ provider = \"engine\", model = \"m\" }}]\n",
        provider("engine", &engine.url()),
        engine.kv_events.as_deref().unwrap(),
        engine.kv_replay.as_deref().unwrap(),
        engine.url(),
    );
    let gateway = Gateway::start(&config).await;
    assert_eq!(gateway.chat("chat", "hello").await.status(), 200);
    assert_eq!(gateway.chat("no-such-model", "hello").await.status(), 404);
    let (status, _) = gateway.reload().await;
    assert_eq!(status, 200);
    // The telemetry families appear once the subscriber and the poller have
    // reported.
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let text = loop {
        let text = gateway.metrics().await;
        if text.contains("rolter_kv_index_usable{")
            && text.contains("rolter_lmcache_occupancy{")
            && text.contains("rolter_engine_metrics_fresh{provider=\"engine\"} 1")
        {
            break text;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no telemetry metrics after 15 s:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let live = exposition_families(&text);
    let docs = documented_metrics();
    for expected in [
        "rolter_requests_total",
        "rolter_upstream_latency_seconds",
        "rolter_config_reloads_total",
        "rolter_kv_events_total",
        "rolter_lmcache_occupancy",
        "rolter_engine_metrics_polls_total",
        "rolter_target_load",
    ] {
        assert!(
            live.contains_key(expected),
            "{expected} not exposed:\n{text}"
        );
    }
    let mut wrong = Vec::new();
    for (name, (kind, labels)) in live.iter().filter(|(n, _)| n.starts_with("rolter_")) {
        match docs.get(name) {
            None => wrong.push(format!("{name}: exposed, not documented")),
            Some((doc_kind, doc_labels)) => {
                if doc_kind != kind {
                    wrong.push(format!("{name}: a {kind}, documented as {doc_kind}"));
                }
                if doc_labels != labels {
                    wrong.push(format!(
                        "{name}: labels {labels:?}, documented as {doc_labels:?}"
                    ));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "docs/metrics.md:\n{wrong:#?}");
}

#[test]
fn documented_alerts_are_the_shipped_rules_and_use_documented_metrics() {
    let doc = read("docs/metrics.md");
    let block = fenced_block(&doc, "## Example alerts", "yaml");
    let shipped = read("docker/compose/alerts.yml");
    assert_eq!(
        block, shipped,
        "the alerts in docs/metrics.md differ from docker/compose/alerts.yml"
    );
    let metrics = documented_metrics();
    let rules = yaml_documents(&shipped);
    let mut unknown = Vec::new();
    for rule in rules[0]["groups"][0]["rules"].as_array().unwrap() {
        let expr = rule["expr"].as_str().unwrap();
        for piece in expr.split("rolter_").skip(1) {
            let name: String = piece
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            let name = format!("rolter_{name}");
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s).filter(|b| metrics.contains_key(*b)))
                .unwrap_or(&name);
            if !metrics.contains_key(family) {
                unknown.push(format!("{}: {name}", rule["alert"]));
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "alerts on undocumented metrics: {unknown:?}"
    );
}
