//! The shared harness of the gateway tests: real `rolter serve` and
//! `rolter fake-llm` processes on loopback, free ports, bounded waits, and
//! every process stopped when its handle drops.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub mod chunked;
mod database;
pub mod script;
#[allow(unused_imports)] // only the tests with a control node use it
pub use database::{TestDatabase, INTERNAL_TOKEN};

pub const ROLTER: &str = env!("CARGO_BIN_EXE_rolter");
pub const ADMIN_TOKEN: &str = "test-admin-token";

/// A port nobody listens on right now (bound, then released), and not one
/// this test process was already given: the kernel may hand a released
/// port out again at once, and a gateway whose listener and admin listener
/// got the same port refuses to start.
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    for _ in 0..1000 {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("no free loopback port");
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
    panic!("no loopback port this process was not already given");
}

/// Polls `check` every 25 ms until it is true or `limit` passes.
pub async fn wait_until<F, Fut>(limit: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("timed out after {limit:?} waiting for {what}");
}

/// Lines of the file at `path` (none when it does not exist).
pub fn lines_of(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Waits until the file at `path` (an access log) has a line containing
/// `needle`, and returns it.
pub async fn line_with(path: &Path, needle: &str) -> String {
    let mut found = None;
    wait_until(
        Duration::from_secs(10),
        &format!("{needle} in {}", path.display()),
        || {
            found = lines_of(path).into_iter().find(|l| l.contains(needle));
            let done = found.is_some();
            async move { done }
        },
    )
    .await;
    found.unwrap()
}

/// The sum of the `/metrics` series of `gateway` whose line starts with
/// `series` and holds `label`.
pub async fn series_sum(gateway: &Gateway, series: &str, label: &str) -> u64 {
    sum_series(&gateway.metrics().await, series, label)
}

/// [`series_sum`] over an exposition already read.
pub fn sum_series(metrics: &str, series: &str, label: &str) -> u64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(series) && l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// Runs `tests/python/<script> BASE_URL KEY MODEL` (an official SDK's
/// client) against `base_url` and checks it printed `ok:`; `package` names
/// the SDK, so a machine without it is told to run `make deps`.
pub async fn sdk_script(script: &str, package: &str, base_url: String, key: &str, model: &str) {
    let script = format!("{}/tests/python/{script}", env!("CARGO_MANIFEST_DIR"));
    let args = [script, base_url, key.to_owned(), model.to_owned()];
    let output = tokio::task::spawn_blocking(move || {
        Command::new("python3")
            .args(&args)
            .output()
            .expect("python3 must be installed")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !stderr.contains(&format!("No module named '{package}'")),
        "the {package} package is missing: run `make deps`"
    );
    assert!(
        output.status.success() && stdout.starts_with("ok:"),
        "{package} client failed:\n{stdout}\n{stderr}"
    );
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .pool_idle_timeout(Duration::from_secs(2))
        .build()
        .expect("http client")
}

/// Kills and reaps a child process when dropped.
pub struct Process {
    pub child: Child,
    pub log: PathBuf,
    pub name: String,
}

impl Process {
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on a pid we own; no memory is involved.
        unsafe {
            libc::kill(self.pid(), signal);
        }
    }

    /// Waits for the process to exit by itself, at most `limit`.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = self.log_text();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            eprintln!("--- last lines of {} ---", self.name);
            for line in tail.into_iter().rev() {
                eprintln!("{line}");
            }
        }
    }
}

/// A `rolter fake-llm` process.
pub struct FakeEngine {
    pub addr: SocketAddr,
    /// `tcp://…` of the KV-event PUB socket, with `--kv-events`.
    pub kv_events: Option<String>,
    /// `tcp://…` of the replay ROUTER socket, with `--kv-replay`.
    pub kv_replay: Option<String>,
    pub process: Process,
    _dir: tempfile::TempDir,
}

impl FakeEngine {
    /// An engine on a free loopback port.
    pub fn start(name: &str, extra: &[&str]) -> FakeEngine {
        let args: Vec<&str> = ["--listen", "127.0.0.1:0"]
            .into_iter()
            .chain(extra.iter().copied())
            .collect();
        Self::start_with(name, &args)
    }

    /// An engine with exactly these arguments (which must include `--listen`).
    pub fn start_with(name: &str, args: &[&str]) -> FakeEngine {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = dir.path().join("engine.log");
        let mut child = Command::new(ROLTER)
            .args(["fake-llm", "--name", name])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("spawn fake-llm");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            if let Some(Ok(line)) = lines.next() {
                let _ = tx.send(line);
            }
            for _ in lines {}
        });
        let process = Process {
            child,
            log,
            name: format!("fake engine {name}"),
        };
        let line = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("fake-llm did not print its address");
        // `fake-llm listening on http://ADDR[ kv-events tcp://ADDR replay tcp://ADDR]`
        let addr = line
            .split_once("http://")
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("unexpected first line from fake-llm: {line}"));
        let word_after = |key: &str| {
            let mut words = line.split_whitespace();
            words.find(|w| *w == key)?;
            words.next().map(str::to_string)
        };
        FakeEngine {
            addr,
            kv_events: word_after("kv-events"),
            kv_replay: word_after("replay"),
            process,
            _dir: dir,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Switches the engine's failure mode at run time.
    pub async fn control(&self, mode: serde_json::Value) {
        let response = client()
            .post(format!("{}/fake/control", self.url()))
            .json(&mode)
            .send()
            .await
            .expect("fake control");
        assert!(response.status().is_success());
    }

    /// Chat completions the engine received (health probes excluded).
    pub async fn chat_requests(&self) -> u64 {
        self.stats().await["by_path"]["/v1/chat/completions"]
            .as_u64()
            .expect("by_path counts")
    }

    pub async fn stats(&self) -> serde_json::Value {
        client()
            .get(format!("{}/fake/stats", self.url()))
            .send()
            .await
            .expect("fake stats")
            .json()
            .await
            .expect("stats json")
    }
}

/// The Pingora YAML of a test gateway: its own pid file and upgrade socket.
pub fn pingora_yaml(dir: &Path) -> String {
    format!(
        "---\nversion: 1\nthreads: 2\nwork_stealing: false\nfast_timeout_to_tokio_threshold_seconds: 0\npid_file: {}\nupgrade_sock: {}\ngrace_period_seconds: 60\ngraceful_shutdown_timeout_seconds: 10\n",
        dir.join("rolter.pid").display(),
        dir.join("upgrade.sock").display()
    )
}

/// A `rolter serve` process with its configuration files.
pub struct Gateway {
    pub listen: SocketAddr,
    pub admin: SocketAddr,
    pub process: Process,
    pub dir: tempfile::TempDir,
}

impl Gateway {
    /// Starts a gateway on `config` (rolter.toml without `[server]` listeners:
    /// they are added here on free ports) and waits until it is ready.
    pub async fn start(config: &str) -> Gateway {
        Self::start_with_env(config, &[]).await
    }

    pub async fn start_with_env(config: &str, env: &[(&str, &str)]) -> Gateway {
        let dir = tempfile::tempdir().expect("temp dir");
        let listen: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let config = with_listeners(config, listen, admin);
        std::fs::write(dir.path().join("rolter.toml"), config).expect("write rolter.toml");
        std::fs::write(dir.path().join("pingora.yaml"), pingora_yaml(dir.path()))
            .expect("write pingora.yaml");
        let process = spawn_serve(dir.path(), env, false, "gateway");
        let mut gateway = Gateway {
            listen,
            admin,
            process,
            dir,
        };
        wait_ready(&mut gateway.process, admin).await;
        gateway
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.listen)
    }

    pub fn admin_url(&self) -> String {
        format!("http://{}", self.admin)
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("rolter.toml")
    }

    /// Replaces the configuration file (listeners kept).
    pub fn write_config(&self, config: &str) {
        std::fs::write(
            self.config_path(),
            with_listeners(config, self.listen, self.admin),
        )
        .expect("write rolter.toml");
    }

    pub async fn reload(&self) -> (u16, serde_json::Value) {
        let response = client()
            .post(format!("{}/admin/reload", self.admin_url()))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .expect("reload request");
        let status = response.status().as_u16();
        (status, response.json().await.expect("reload json"))
    }

    pub async fn routes(&self) -> serde_json::Value {
        client()
            .get(format!("{}/admin/routes", self.admin_url()))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .expect("routes request")
            .json()
            .await
            .expect("routes json")
    }

    pub async fn metrics(&self) -> String {
        client()
            .get(format!("{}/metrics", self.admin_url()))
            .send()
            .await
            .expect("metrics request")
            .text()
            .await
            .expect("metrics text")
    }

    /// POSTs a chat completion for `model` and returns the response.
    pub async fn chat(&self, model: &str, content: &str) -> reqwest::Response {
        self.post_chat(&chat_body(model, content)).await
    }

    /// POSTs `body` to `/v1/chat/completions` and returns the response.
    pub async fn post_chat(&self, body: &serde_json::Value) -> reqwest::Response {
        client()
            .post(self.url("/v1/chat/completions"))
            .json(body)
            .send()
            .await
            .expect("chat request")
    }

    /// POSTs `body`, as it is (JSON or not), to `/v1/chat/completions`
    /// with a JSON content type, and returns the response.
    pub async fn post_chat_bytes(&self, body: impl Into<reqwest::Body>) -> reqwest::Response {
        client()
            .post(self.url("/v1/chat/completions"))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("chat request")
    }

    /// A completion of the token-id prompt `ids` for `model`, answered 200;
    /// the provider that served it.
    pub async fn complete_ids(&self, model: &str, ids: &[u32]) -> String {
        let response = client()
            .post(self.url("/v1/completions"))
            .json(&serde_json::json!({"model": model, "prompt": ids, "max_tokens": 2}))
            .send()
            .await
            .expect("completion request");
        assert_eq!(response.status(), 200);
        served_by(&response)
    }

    /// `provider`'s entry of `GET /admin/kv-index`, `null` when it has none.
    pub async fn kv_index(&self, provider: &str) -> serde_json::Value {
        let body: serde_json::Value = client()
            .get(format!("{}/admin/kv-index", self.admin_url()))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .expect("kv-index request")
            .json()
            .await
            .expect("kv-index json");
        body["kv_indexes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|i| i["provider"] == provider)
            .cloned()
            .unwrap_or(serde_json::Value::Null)
    }
}

/// Waits until the admin listener at `admin` answers `/readyz`; fails at
/// once with the log if the process exits instead.
pub async fn wait_ready(process: &mut Process, admin: SocketAddr) {
    let url = format!("http://{admin}/readyz");
    let http = client();
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Ok(Some(status)) = process.child.try_wait() {
            panic!(
                "{} exited with {status} before it was ready:\n{}",
                process.name,
                process.log_text()
            );
        }
        if http
            .get(&url)
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{} was not ready after 20 s", process.name);
}

/// Spawns `rolter serve -c pingora.yaml --config rolter.toml` in `dir`.
pub fn spawn_serve(dir: &Path, env: &[(&str, &str)], upgrade: bool, name: &str) -> Process {
    let log = dir.join(format!("{name}.log"));
    // stdout (the access log) and stderr (the log) share one file; both
    // append, or the one would write over the other's lines.
    std::fs::File::create(&log).expect("log file");
    let append = || {
        std::fs::OpenOptions::new()
            .append(true)
            .open(&log)
            .expect("log file")
    };
    let mut command = Command::new(ROLTER);
    command
        .arg("serve")
        .arg("-c")
        .arg(dir.join("pingora.yaml"))
        .arg("--config")
        .arg(dir.join("rolter.toml"))
        .env("ROLTER_ADMIN_TOKEN", ADMIN_TOKEN)
        .env("RUST_LOG", "info")
        .stdout(append())
        .stderr(append());
    if upgrade {
        command.arg("-u");
    }
    for (key, value) in env {
        command.env(key, value);
    }
    Process {
        child: command.spawn().expect("spawn rolter serve"),
        log,
        name: name.to_string(),
    }
}

/// Prepends a `[server]` table with the given listeners and the test admin
/// token, unless the configuration has its own `[server]` (then only the
/// listeners are inserted into it).
pub fn with_listeners(config: &str, listen: SocketAddr, admin: SocketAddr) -> String {
    let listeners = format!("listen = [\"{listen}\"]\nadmin_listen = \"{admin}\"\n");
    let config = if config.contains("[server]") {
        config.replacen("[server]\n", &format!("[server]\n{listeners}"), 1)
    } else {
        format!("[server]\n{listeners}require_api_key = false\n\n{config}")
    };
    format!(
        "{config}\n\n[[admin_tokens]]\nname = \"test\"\ntoken_env = \"ROLTER_ADMIN_TOKEN\"\nrole = \"superadmin\"\n"
    )
}

/// A `[[providers]]` table for an engine.
pub fn provider(name: &str, base_url: &str) -> String {
    format!("[[providers]]\nname = \"{name}\"\nbase_url = \"{base_url}\"\n\n")
}

/// Tokens per KV block of [`kv_engine`]s.
pub const KV_BLOCK: usize = 16;

/// A fake engine publishing KV events (and answering replays) in blocks of
/// [`KV_BLOCK`] tokens.
pub fn kv_engine(name: &str) -> FakeEngine {
    kv_engine_with(name, &[])
}

/// A [`kv_engine`] with `extra` arguments.
pub fn kv_engine_with(name: &str, extra: &[&str]) -> FakeEngine {
    let block = KV_BLOCK.to_string();
    let args: Vec<&str> = [
        "--kv-events",
        "tcp://127.0.0.1:0",
        "--kv-replay",
        "tcp://127.0.0.1:0",
        "--block-size",
        &block,
    ]
    .into_iter()
    .chain(extra.iter().copied())
    .collect();
    FakeEngine::start(name, &args)
}

/// A prompt of `blocks` full [`KV_BLOCK`]s of token ids, distinct per `seed`.
pub fn block_prompt(seed: u32, blocks: usize) -> Vec<u32> {
    (0..(blocks * KV_BLOCK) as u32)
        .map(|i| 1000 + seed * 10_000 + i)
        .collect()
}

/// `[[providers]]` for a [`kv_engine`], with its `[providers.kv_events]`.
pub fn kv_provider(name: &str, engine: &FakeEngine) -> String {
    format!(
        "{}[providers.kv_events]\nendpoint = \"{}\"\nreplay_endpoint = \"{}\"\nblock_size = {KV_BLOCK}\n\n",
        provider(name, &engine.url()),
        engine.kv_events.as_deref().expect("kv-events address"),
        engine.kv_replay.as_deref().expect("replay address"),
    )
}

pub fn chat_body(model: &str, content: &str) -> serde_json::Value {
    serde_json::json!({
        "model": model,
        "max_tokens": 4,
        "messages": [{"role": "user", "content": content}],
    })
}

/// The provider that served a response, from `x-rolter-target`.
pub fn served_by(response: &reqwest::Response) -> String {
    response
        .headers()
        .get("x-rolter-target")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-")
        .to_string()
}

/// The target each key (a session, a conversation) was first served by,
/// for the strategies that pin a key to a target: a key served elsewhere
/// later fails the test, and so do keys that all landed on one target.
#[derive(Debug, Default)]
pub struct Pins(std::collections::BTreeMap<String, String>);

impl Pins {
    /// `key` was served by `target`: where it was first served, if before.
    pub fn record(&mut self, key: impl std::fmt::Display, target: String) {
        let key = key.to_string();
        let first = self.0.entry(key.clone()).or_insert_with(|| target.clone());
        assert_eq!(*first, target, "{key} moved");
    }

    /// The keys landed on more than one target.
    pub fn assert_spread(&self) {
        let distinct: std::collections::HashSet<_> = self.0.values().collect();
        assert!(
            distinct.len() >= 2,
            "{} keys all on one target: {:?}",
            self.0.len(),
            self.0
        );
    }
}

/// Waits up to `limit` for the other end of `stream` to close it (end of
/// stream or reset); false if it is still open then. Data instead of a
/// close fails the test.
pub async fn closed_by_peer(stream: &mut tokio::net::TcpStream, limit: Duration) -> bool {
    use tokio::io::AsyncReadExt;
    let mut byte = [0u8; 1];
    match tokio::time::timeout(limit, stream.read(&mut byte)).await {
        Ok(Ok(0)) | Ok(Err(_)) => true,
        Ok(Ok(_)) => panic!("data arrived on a connection expected to close"),
        Err(_) => false,
    }
}
