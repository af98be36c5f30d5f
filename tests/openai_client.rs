//! The official `openai` Python client works against rolter for a plain and a
//! streaming chat completion (tests/python/requirements.txt; `make test`
//! installs it).

mod support;

use std::process::Command;

use support::*;

#[tokio::test]
async fn official_openai_client_chats_plain_and_streaming() {
    let engine = FakeEngine::start("e", &["--token-delay-ms", "5"]);
    let config = format!(
        "[server]\nrequire_api_key = true\n\n{}[[routes]]\nmodel = \"qwen-chat\"\ntargets = [{{ provider = \"e\", model = \"Qwen/Qwen3-8B\" }}]\n\n[[api_keys]]\nname = \"sdk\"\nkey_env = \"SDK_KEY\"\n",
        provider("e", &engine.url())
    );
    let gateway = Gateway::start_with_env(&config, &[("SDK_KEY", "sk-sdk-test")]).await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/openai_client.py");
    let base_url = gateway.url("/v1");
    let output = tokio::task::spawn_blocking(move || {
        Command::new("python3")
            .args([script, &base_url, "sk-sdk-test", "qwen-chat"])
            .output()
            .expect("python3 must be installed")
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !stderr.contains("No module named 'openai'"),
        "the openai package is missing: run `make deps` (pip install -r tests/python/requirements.txt)"
    );
    assert!(
        output.status.success(),
        "openai client failed:\n{}\n{stderr}",
        String::from_utf8_lossy(&output.stdout)
    );
    assert!(String::from_utf8_lossy(&output.stdout).starts_with("ok:"));
}
