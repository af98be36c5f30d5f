//! The structure drawn from the code's own imports: no module imports its
//! way back to itself, file by file and top-level module by top-level
//! module, in every crate of the workspace (docs/design/README.md, "Shape").
//!
//! An edge is a path a file names: `crate::a::b` (resolved to the longest
//! module that exists), `super::x`, or a `mod` it declares is not an edge
//! (a parent owns its children, it does not import them). Test code
//! (`tests.rs`, `testing.rs`, anything after `#[cfg(test)] mod tests`) is
//! left out: tests may reach anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module path (`proxy::ctx`) of every non-test source file under `root`.
fn modules(root: &Path) -> BTreeMap<String, PathBuf> {
    fn walk(dir: &Path, root: &Path, out: &mut BTreeMap<String, PathBuf>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.expect("dir entry").path())
            .collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(&path, root, out);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let relative = path.strip_prefix(root).expect("under root");
            let mut parts: Vec<String> = relative
                .with_extension("")
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if parts.last().is_some_and(|p| p == "mod") {
                parts.pop();
            }
            if parts.iter().any(|p| p == "tests" || p == "testing") {
                continue;
            }
            if parts == ["lib"] || parts == ["main"] {
                continue;
            }
            out.insert(parts.join("::"), path);
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// The source of `path` without its test module.
fn non_test_source(path: &Path) -> String {
    let text = std::fs::read_to_string(path).expect("source file");
    match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

/// Every `crate::…` and `super::…` path in `text`, as segments.
fn named_paths(text: &str, module: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    for (prefix, base) in [("crate::", Vec::new()), ("super::", parent_of(module))] {
        let mut rest = text;
        while let Some(at) = rest.find(prefix) {
            let before = rest[..at].chars().next_back();
            rest = &rest[at + prefix.len()..];
            if before.is_some_and(ident) {
                continue;
            }
            let mut path = base.clone();
            let mut tail = rest;
            loop {
                let end = tail.find(|c: char| !ident(c)).unwrap_or(tail.len());
                if end == 0 {
                    break;
                }
                path.push(tail[..end].to_string());
                match tail[end..].strip_prefix("::") {
                    Some(next) => tail = next,
                    None => break,
                }
            }
            paths.push(path);
        }
    }
    paths
}

fn parent_of(module: &str) -> Vec<String> {
    let mut parts: Vec<String> = module.split("::").map(str::to_string).collect();
    parts.pop();
    parts
}

/// Edges from each module to the modules it names, at `depth` segments
/// (`usize::MAX`: files).
fn graph(modules: &BTreeMap<String, PathBuf>, depth: usize) -> BTreeMap<String, BTreeSet<String>> {
    let cut = |m: &str| m.split("::").take(depth).collect::<Vec<_>>().join("::");
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, path) in modules {
        let from = cut(module);
        for named in named_paths(&non_test_source(path), module) {
            let Some(target) = (1..=named.len())
                .rev()
                .map(|n| named[..n].join("::"))
                .find(|candidate| modules.contains_key(candidate))
            else {
                continue;
            };
            let related = target == *module
                || target.starts_with(&format!("{module}::"))
                || module.starts_with(&format!("{target}::"));
            let to = cut(&target);
            if !related && to != from {
                edges.entry(from.clone()).or_default().insert(to);
            }
        }
    }
    edges
}

/// A cycle of `edges`, if there is one.
fn cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        done: &mut BTreeSet<String>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = stack.iter().position(|n| n == node) {
            let mut found = stack[at..].to_vec();
            found.push(node.to_string());
            return Some(found);
        }
        if done.contains(node) {
            return None;
        }
        stack.push(node.to_string());
        for next in edges.get(node).into_iter().flatten() {
            if let Some(found) = visit(next, edges, done, stack) {
                return Some(found);
            }
        }
        stack.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    edges
        .keys()
        .find_map(|node| visit(node, edges, &mut done, &mut Vec::new()))
}

fn assert_acyclic(root: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(root);
    let modules = modules(&root);
    assert!(modules.len() > 5, "no sources under {}", root.display());
    for (depth, what) in [(1, "top-level modules"), (usize::MAX, "files")] {
        if let Some(found) = cycle(&graph(&modules, depth)) {
            panic!(
                "{}: {what} import each other in a circle: {}",
                root.display(),
                found.join(" -> ")
            );
        }
    }
}

#[test]
fn the_gateway_s_modules_import_downwards_only() {
    assert_acyclic("src");
}

#[test]
fn the_balancer_s_modules_import_downwards_only() {
    assert_acyclic("crates/rolter-balancer/src");
}

#[test]
fn the_fake_engine_s_modules_import_downwards_only() {
    assert_acyclic("crates/rolter-fake-llm/src");
}

#[test]
fn a_cycle_is_found_and_named() {
    let edges: BTreeMap<String, BTreeSet<String>> = [
        ("state", vec!["snapshot"]),
        ("snapshot", vec!["metrics"]),
        ("metrics", vec!["state"]),
        ("config", vec![]),
    ]
    .into_iter()
    .map(|(from, to)| {
        (
            from.to_string(),
            to.into_iter().map(str::to_string).collect(),
        )
    })
    .collect();
    let found = cycle(&edges).expect("the cycle");
    assert_eq!(found.first(), found.last());
    assert_eq!(found.len(), 4, "{found:?}");
    let paths = named_paths(
        "use crate::tracker::{A, B};\nuse super::ctx::X; let y = crate::clock::now_ms();",
        "proxy::select",
    );
    assert_eq!(
        paths,
        [
            vec!["tracker".to_string()],
            vec!["clock".into(), "now_ms".into()],
            vec!["proxy".into(), "ctx".into(), "X".into()],
        ]
    );
}
