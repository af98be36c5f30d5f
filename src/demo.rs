//! `rolter demo`: five fake engines and the gateway in one process: three
//! whole engines, and a prefill and a decode engine for the disaggregated
//! route.
//!
//! The engines run on their own runtime thread; the gateway is the normal
//! Pingora server, on the embedded demo configuration (`conf/demo.toml`).

use std::net::SocketAddr;
use std::path::PathBuf;

use pingora::server::configuration::ServerConf;

use crate::config;
use rolter_fake_llm::{self as fake_llm, FakeLlmArgs};

const DEMO_CONFIG: &str = include_str!("../conf/demo.toml");
/// The bundled model directory the demo's engines and its `chat-precise`
/// route tokenize with: a small ChatML-style BPE tokenizer
/// (`tests/python/tokenizer_fixture.py --demo` made it).
const DEMO_TOKENIZER: [(&str, &str); 2] = [
    (
        "tokenizer.json",
        include_str!("../conf/demo-tokenizer/tokenizer.json"),
    ),
    (
        "tokenizer_config.json",
        include_str!("../conf/demo-tokenizer/tokenizer_config.json"),
    ),
];
/// The admin token of the demo when `ROLTER_ADMIN_TOKEN` is not set.
const DEMO_ADMIN_TOKEN: &str = "demo-admin-token";

#[derive(clap::Args, Debug)]
pub struct DemoArgs {
    /// Where the gateway listens.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Where the admin API listens.
    #[arg(long, default_value = "127.0.0.1:9090")]
    pub admin_listen: SocketAddr,
    /// Gateway worker threads.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
}

pub fn run(args: DemoArgs) -> i32 {
    if std::env::var_os("ROLTER_ADMIN_TOKEN").is_none() {
        // Set before any thread starts: the demo is still single-threaded here.
        std::env::set_var("ROLTER_ADMIN_TOKEN", DEMO_ADMIN_TOKEN);
    }
    let dir = std::env::temp_dir().join(format!("rolter-demo-{}", std::process::id()));
    let tokenizer = dir.join("demo-tokenizer");
    let written = std::fs::create_dir_all(&tokenizer).and_then(|_| {
        DEMO_TOKENIZER
            .iter()
            .try_for_each(|(name, text)| std::fs::write(tokenizer.join(name), text))
    });
    if let Err(e) = written {
        eprintln!("rolter demo: cannot write {}: {e}", tokenizer.display());
        return 1;
    }
    let engines = match start_engines(&tokenizer) {
        Ok(engines) => engines,
        Err(e) => {
            eprintln!("rolter demo: cannot start the fake engines: {e}");
            return 1;
        }
    };
    let config_path = dir.join("rolter.toml");
    let mut text = DEMO_CONFIG
        .replace("@LISTEN@", &args.listen.to_string())
        .replace("@ADMIN_LISTEN@", &args.admin_listen.to_string())
        .replace("@TOKENIZER@", &tokenizer.display().to_string());
    for (engine, letter) in engines.iter().zip(["A", "B", "C", "P", "D"]) {
        text = text
            .replace(
                &format!("@ENGINE_{letter}@"),
                &format!("http://{}", engine.http),
            )
            .replace(
                &format!("@KV_{letter}@"),
                engine.kv_events.as_deref().unwrap_or_default(),
            )
            .replace(
                &format!("@REPLAY_{letter}@"),
                engine.kv_replay.as_deref().unwrap_or_default(),
            );
    }
    if let Err(e) = std::fs::write(&config_path, text) {
        eprintln!("rolter demo: cannot write {}: {e}", config_path.display());
        return 1;
    }
    let config = match config::load(&config_path) {
        Ok(config) => config,
        Err(errors) => {
            eprintln!("{errors}");
            return 1;
        }
    };

    let token = std::env::var("ROLTER_ADMIN_TOKEN").unwrap_or_default();
    println!(
        "\nrolter demo: gateway on http://{listen}, admin on http://{admin}\n\
         dashboard: http://{admin}/ui/ (sign in with the admin token {token})\n\
         fake engines: {a}, {b}, {c}; prefill {p}, decode {d}\n\
         configuration: {path} (edit it, then reload)\n\n\
         try:\n  \
         curl -s http://{listen}/v1/chat/completions -H 'content-type: application/json' \\\n    \
         -d '{{\"model\":\"chat\",\"messages\":[{{\"role\":\"user\",\"content\":\"Hello!\"}}]}}'\n  \
         curl -sN http://{listen}/v1/chat/completions -H 'content-type: application/json' \\\n    \
         -d '{{\"model\":\"chat\",\"stream\":true,\"messages\":[{{\"role\":\"user\",\"content\":\"Hello!\"}}]}}'\n  \
         curl -s -D - http://{listen}/v1/chat/completions -H 'content-type: application/json' \\\n    \
         -d '{{\"model\":\"chat-precise\",\"messages\":[{{\"role\":\"system\",\"content\":\"You are a patient tutor who explains every step.\"}},{{\"role\":\"user\",\"content\":\"Teach me how binary search works.\"}}]}}'\n    \
         (run it twice: x-rolter-target names the engine that holds the conversation's KV blocks)\n  \
         curl -s http://{admin}/admin/routes -H 'authorization: Bearer {token}'\n  \
         curl -s -X POST http://{admin}/admin/reload -H 'authorization: Bearer {token}'\n  \
         curl -s http://{admin}/metrics\n",
        listen = args.listen,
        admin = args.admin_listen,
        a = engines[0].http,
        b = engines[1].http,
        c = engines[2].http,
        p = engines[3].http,
        d = engines[4].http,
        path = config_path.display(),
    );

    let conf = ServerConf {
        threads: args.threads,
        // As conf/pingora.yaml: no work stealing, and tokio's timer for
        // every timeout of a second or more (see there).
        work_stealing: false,
        fast_timeout_to_tokio_threshold_seconds: Some(0),
        pid_file: dir.join("rolter.pid").display().to_string(),
        upgrade_sock: dir.join("upgrade.sock").display().to_string(),
        grace_period_seconds: Some(1),
        graceful_shutdown_timeout_seconds: Some(5),
        ..ServerConf::default()
    };
    crate::serve::run_with_conf(conf, config, &PathBuf::from(&config_path))
}

/// Binds five engines (HTTP and KV-event sockets) on free loopback ports,
/// tokenizing with `tokenizer`, and serves them on a runtime thread: three
/// that serve requests whole, then a vLLM-style prefill engine and a decode
/// engine (`chat-split`).
fn start_engines(tokenizer: &std::path::Path) -> std::io::Result<Vec<fake_llm::EngineAddresses>> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let mut addrs = Vec::new();
    let engines = [
        ("engine-a", 40, None),
        ("engine-b", 60, None),
        ("engine-c", 80, None),
        ("prefill-a", 30, Some(fake_llm::PdRole::Prefill)),
        ("decode-a", 10, Some(fake_llm::PdRole::Decode)),
    ];
    for (name, ttft_ms, pd_role) in engines {
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
        let engine = FakeLlmArgs {
            name: name.to_string(),
            ttft_ms,
            token_delay_ms: 15,
            tokenizer: Some(tokenizer.to_path_buf()),
            kv_events: Some("tcp://127.0.0.1:0".to_string()),
            kv_replay: Some("tcp://127.0.0.1:0".to_string()),
            block_size: 16,
            pd_role,
            ..FakeLlmArgs::default()
        };
        let bound = runtime.block_on(fake_llm::BoundEngine::with_listener(engine, listener))?;
        addrs.push(bound.addresses().clone());
        runtime.spawn(async move {
            if let Err(e) = bound.serve().await {
                log::error!("fake engine {name} stopped: {e}");
            }
        });
    }
    std::thread::Builder::new()
        .name("demo-engines".to_string())
        .spawn(move || runtime.block_on(std::future::pending::<()>()))?;
    Ok(addrs)
}
