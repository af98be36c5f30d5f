//! The official `openai` Python client works against rolter for a plain and a
//! streaming chat completion (tests/python/requirements.txt; `make test`
//! installs it).

mod support;

use support::*;

#[tokio::test]
async fn official_openai_client_chats_plain_and_streaming() {
    let engine = FakeEngine::start("e", &["--token-delay-ms", "5"]);
    let config = format!(
        "[server]\nrequire_api_key = true\n\n{}[[routes]]\nmodel = \"qwen-chat\"\ntargets = [{{ provider = \"e\", model = \"Qwen/Qwen3-8B\" }}]\n\n[[api_keys]]\nname = \"sdk\"\nkey_env = \"SDK_KEY\"\n",
        provider("e", &engine.url())
    );
    let gateway = Gateway::start_with_env(&config, &[("SDK_KEY", "sk-sdk-test")]).await;
    sdk_script(
        "openai_client.py",
        "openai",
        gateway.url("/v1"),
        "sk-sdk-test",
        "qwen-chat",
    )
    .await;
}
