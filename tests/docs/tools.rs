//! The external validators and YAML, through their command-line tools.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

fn tool_missing(tool: &str, error: std::io::Error) -> ! {
    panic!(
        "{tool} is needed for this test ({error}): run docker/install-check-tools (make test does)"
    )
}

pub fn run(program: &str, args: &[&str], dir: &Path) -> Output {
    Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| tool_missing(program, e))
}

pub fn assert_success(what: &str, output: &Output) {
    assert!(
        output.status.success(),
        "{what} failed ({}):\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Every document of a YAML stream, as JSON (PyYAML's safe loader, anchors
/// and merge keys resolved).
pub fn yaml_documents(text: &str) -> Vec<Value> {
    let mut child = Command::new("python3")
        .args([
            "-c",
            "import json, sys, yaml\njson.dump([d for d in yaml.safe_load_all(sys.stdin) if d is not None], sys.stdout)",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| tool_missing("python3", e));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert_success("parsing YAML with python3 + PyYAML", &output);
    serde_json::from_slice(&output.stdout).unwrap()
}

/// A JSON array of strings as a Vec (empty when absent).
pub fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|a| a.iter().map(|v| v.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

/// The value after `flag` in a command line.
pub fn flag_value(command: &[String], flag: &str) -> Option<String> {
    let at = command.iter().position(|a| a == flag)?;
    command.get(at + 1).cloned()
}

/// Host and port of `scheme://host:port[/...]`.
pub fn url_host_port(url: &str) -> (String, u16) {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split('/').next().unwrap();
    let (host, port) = authority.rsplit_once(':').expect("an explicit port");
    (host.to_string(), port.parse().unwrap())
}
