//! rolter's token ids against the reference: Python `transformers` and
//! `tokenizers`, through vLLM's request preprocessing, for three template
//! families (ChatML, Llama 3, Mistral) built at test time by
//! `tests/python/tokenizer_fixture.py` (a BPE tokenizer trained offline per
//! family, in the shape of the real model directories, with its chat
//! template). The bar is every id of every case.

use std::path::{Path, PathBuf};
use std::process::Command;

use indexmap::IndexMap;
use rolter_tokenize::{ChatRequest, ModelTokenizer};
use serde_json::value::RawValue;
use serde_json::Value;

struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    cases: Value,
    /// `cases["chat"]` unparsed, for requests in their written key order.
    raw_chat: Vec<Box<RawValue>>,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/python/tokenizer_fixture.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg(dir.path())
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{} failed (make deps installs transformers): {}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let cases = std::fs::read_to_string(dir.path().join("cases.json")).unwrap();
    let raw: IndexMap<String, Box<RawValue>> = serde_json::from_str(&cases).unwrap();
    Fixture {
        root: dir.path().to_path_buf(),
        raw_chat: serde_json::from_str(raw["chat"].get()).unwrap(),
        cases: serde_json::from_str(&cases).unwrap(),
        _dir: dir,
    }
}

/// The case's request as the gateway hands it over: raw JSON slices, in
/// the order the fixture wrote them (re-serializing through
/// `serde_json::Value` would sort their keys).
fn with_request<T>(request: &str, f: impl FnOnce(&ChatRequest<'_>) -> T) -> T {
    let fields: IndexMap<String, Box<RawValue>> = serde_json::from_str(request).unwrap();
    let field = |name: &str| fields.get(name).map(|raw| raw.get());
    let chat = ChatRequest {
        messages: field("messages").unwrap(),
        tools: field("tools"),
        chat_template_kwargs: field("chat_template_kwargs"),
        add_generation_prompt: field("add_generation_prompt").and_then(|raw| raw.parse().ok()),
    };
    f(&chat)
}

/// `request` with only its first `end` messages.
fn first_messages(request: &str, end: usize) -> String {
    let mut fields: IndexMap<String, Box<RawValue>> = serde_json::from_str(request).unwrap();
    let messages: Vec<Box<RawValue>> = serde_json::from_str(fields["messages"].get()).unwrap();
    let kept: Vec<&str> = messages[..end].iter().map(|m| m.get()).collect();
    let joined = format!("[{}]", kept.join(","));
    fields.insert("messages".into(), RawValue::from_string(joined).unwrap());
    serde_json::to_string(&fields).unwrap()
}

/// The raw JSON of a case's request.
fn request_of(case: &Value, raw_cases: &[Box<RawValue>], index: usize) -> String {
    let raw: IndexMap<String, Box<RawValue>> =
        serde_json::from_str(raw_cases[index].get()).unwrap();
    assert_eq!(
        case["name"].as_str(),
        serde_json::from_str::<String>(raw["name"].get())
            .ok()
            .as_deref()
    );
    raw["request"].get().to_string()
}

fn ids(value: &Value) -> Vec<u32> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_u64().unwrap() as u32)
        .collect()
}

fn load(fixture: &Fixture, family: &str) -> ModelTokenizer {
    ModelTokenizer::load(&fixture.root.join(family)).unwrap_or_else(|e| panic!("{family}: {e}"))
}

const WHOLE: usize = 1 << 30;

#[test]
fn chat_and_completion_ids_equal_the_reference_for_every_case() {
    let fixture = fixture();
    let mut families = std::collections::BTreeMap::new();
    let mut failures = Vec::new();
    let chat = fixture.cases["chat"].as_array().unwrap();
    assert!(chat.len() >= 30, "{} chat cases", chat.len());
    for (index, case) in chat.iter().enumerate() {
        let request = request_of(case, &fixture.raw_chat, index);
        let family = case["family"].as_str().unwrap();
        let name = case["name"].as_str().unwrap();
        let model = families
            .entry(family.to_string())
            .or_insert_with(|| load(&fixture, family));
        let expected = ids(&case["ids"]);
        let (text, got) = with_request(&request, |request| {
            (
                model.render_chat(request),
                model.chat_token_ids(request, WHOLE),
            )
        });
        match (text, got) {
            (Ok(text), Ok(got)) if *got.ids == *expected => {
                assert_eq!(text, case["text"].as_str().unwrap(), "{family}/{name}");
                assert!(!got.truncated);
            }
            (text, got) => failures.push(format!(
                "{family}/{name}:\n  text ok: {}\n  ours: {:?}\n  reference: {:?}",
                text.as_ref()
                    .map(|t| t == case["text"].as_str().unwrap())
                    .unwrap_or(false),
                text.as_ref()
                    .map(|t| first_difference(t, case["text"].as_str().unwrap())),
                got.map(|g| g.ids.len())
            )),
        }
    }
    let completions = fixture.cases["completions"].as_array().unwrap();
    for case in completions {
        let family = case["family"].as_str().unwrap();
        let model = families
            .entry(family.to_string())
            .or_insert_with(|| load(&fixture, family));
        let got = model.prompt_token_ids(case["prompt"].as_str().unwrap(), WHOLE);
        if got.as_ref().map(|g| &*g.ids) != Ok(&ids(&case["ids"])[..]) {
            failures.push(format!("completions {family}/{}: {got:?}", case["name"]));
        }
    }
    assert_eq!(families.len(), 3, "ChatML, Llama 3 and Mistral families");
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n{}",
        failures.len(),
        chat.len() + completions.len(),
        failures.join("\n")
    );
}

/// Where two texts part, with a little context.
fn first_difference(ours: &str, reference: &str) -> String {
    let ours: Vec<char> = ours.chars().collect();
    let reference: Vec<char> = reference.chars().collect();
    let at = ours
        .iter()
        .zip(&reference)
        .position(|(a, b)| a != b)
        .unwrap_or(ours.len().min(reference.len()));
    let around = |text: &[char]| -> String {
        text[at.saturating_sub(40).min(text.len())..(at + 40).min(text.len())]
            .iter()
            .collect()
    };
    format!(
        "at char {at}: ours {:?} / reference {:?}",
        around(&ours),
        around(&reference)
    )
}

#[test]
fn turn_by_turn_the_prefix_cache_gives_the_same_ids() {
    let fixture = fixture();
    for (index, case) in fixture.cases["chat"].as_array().unwrap().iter().enumerate() {
        if case["name"] != "long_conversation" {
            continue;
        }
        let request = request_of(case, &fixture.raw_chat, index);
        let family = case["family"].as_str().unwrap();
        let model = load(&fixture, family);
        let messages = case["request"]["messages"].as_array().unwrap();
        // Each earlier turn, as its own request, warms the cache.
        for end in 1..messages.len() {
            if messages[end - 1]["role"] != "user" {
                continue;
            }
            let earlier = first_messages(&request, end);
            with_request(&earlier, |request| model.chat_token_ids(request, WHOLE)).unwrap();
        }
        let (hits_before, _) = model.prefix_cache_counts();
        let got = with_request(&request, |request| model.chat_token_ids(request, WHOLE)).unwrap();
        let (hits, misses) = model.prefix_cache_counts();
        assert_eq!(
            *got.ids,
            *ids(&case["ids"]),
            "{family}: warm ids differ from the reference"
        );
        assert!(
            hits > hits_before,
            "{family}: the last turn found no prefix ({hits} hits, {misses} misses)"
        );
        assert!(
            hits >= misses,
            "{family}: {hits} hits, {misses} misses over a multi-turn chat"
        );
    }
}

#[test]
fn a_budget_keeps_a_leading_run_of_the_reference_ids() {
    let fixture = fixture();
    for (index, case) in fixture.cases["chat"].as_array().unwrap().iter().enumerate() {
        if case["name"] != "long_conversation" {
            continue;
        }
        let request = request_of(case, &fixture.raw_chat, index);
        let family = case["family"].as_str().unwrap();
        let model = load(&fixture, family);
        let expected = ids(&case["ids"]);
        for budget in [256, 1024, 2048] {
            let got =
                with_request(&request, |request| model.chat_token_ids(request, budget)).unwrap();
            assert!(got.truncated, "{family} at {budget} bytes");
            assert!(
                expected.starts_with(&got.ids),
                "{family} at {budget} bytes: not a prefix of the reference"
            );
            // The cut loses at most the last word and the bytes past the budget.
            assert!(
                got.ids.len() * 8 >= budget / 2,
                "{family} at {budget}: only {} ids",
                got.ids.len()
            );
        }
    }
}

#[test]
fn a_broken_directory_names_the_file_and_line() {
    let fixture = fixture();
    let dir = tempfile::tempdir().unwrap();
    for file in ["tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(
            fixture.root.join("chatml").join(file),
            dir.path().join(file),
        )
        .unwrap();
    }
    assert!(ModelTokenizer::load(dir.path()).is_ok());

    std::fs::write(
        dir.path().join("chat_template.jinja"),
        "{% for m in messages %}\n{{ m.content }\n{% endfor %}",
    )
    .unwrap();
    let error = ModelTokenizer::load(dir.path()).unwrap_err().to_string();
    assert!(
        error.contains("chat_template.jinja") && error.contains("line 2"),
        "{error}"
    );
    std::fs::remove_file(dir.path().join("chat_template.jinja")).unwrap();

    std::fs::write(
        dir.path().join("tokenizer.json"),
        "{\n  \"version\": \"1.0\",\n  oops\n}",
    )
    .unwrap();
    let error = ModelTokenizer::load(dir.path()).unwrap_err().to_string();
    assert!(
        error.contains("tokenizer.json") && error.contains("line 3"),
        "{error}"
    );
    std::fs::remove_file(dir.path().join("tokenizer.json")).unwrap();
    let error = ModelTokenizer::load(dir.path()).unwrap_err().to_string();
    assert!(
        error.contains("tokenizer.json") && error.contains("cannot read"),
        "{error}"
    );
}
