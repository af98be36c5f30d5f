//! `parse_request` over every endpoint: the first byte picks the endpoint,
//! the rest is the request body.
//!
//! Beyond "never panics", the answer must be the one serde alone gives
//! (`parse_request_by_serde`: the envelope scanner declines what it cannot
//! read the same way), also when the body was prescanned in pieces as it
//! arrived (`Prescan`), and every `Ok` must keep the promises the gateway
//! builds on:
//! - `model_span` lies in the body and covers a JSON string literal that
//!   decodes to `model` (the proxy splices the upstream model in there);
//! - splicing another model literal into `model_span`, as
//!   `proxy::body::attempt_body` does, yields a body that parses the same but
//!   for the model;
//! - the routing text is bounded to `RouteContext::MAX_PROMPT_BYTES`, cut
//!   only as far as a char boundary needs, and `prompt_len` counts all of it;
//!   where the whole text is plain to see (a completions `prompt` or
//!   embeddings `input` that is a string or a list of non-empty strings,
//!   chat messages whose contents are strings), `prompt` is exactly that
//!   text through `bound_prompt`;
//! - `/v1/models` and unreadable bodies route on a digest of the raw body;
//! - a form body (the audio endpoints, boundary `fzb`): `model_span` holds
//!   exactly `model`, and another model written there (as the proxy does)
//!   reads back with nothing else changed.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rolter::openai::{
    parse_form_request, parse_prescanned, parse_request, parse_request_by_serde, read_request,
    Digest, Endpoint, ParsedRequest, Prescan, RequestError, ROUTABLE_ENDPOINTS,
};
use rolter_balancer::{bound_prompt, RouteContext};
use serde_json::Value;

/// Every endpoint a request may be parsed for: the routable ones and the
/// two the gateway reads without routing by body.
fn endpoint(selector: u8) -> Endpoint {
    let extra = [Endpoint::Models, Endpoint::ResponseById];
    let count = ROUTABLE_ENDPOINTS.len() + extra.len();
    let index = usize::from(selector) % count;
    ROUTABLE_ENDPOINTS
        .get(index)
        .copied()
        .unwrap_or_else(|| extra[index - ROUTABLE_ENDPOINTS.len()])
}

/// The boundary of the fuzzed form bodies.
const BOUNDARY: &[u8] = b"fzb";
/// What the proxy might write over a form's `model` value.
const SPLICED_FORM_MODEL: &str = "fuzz/upstream-model";

/// What the proxy might splice in: escaped on purpose, so the re-parse
/// decodes it rather than copying it.
const SPLICED_LITERAL: &[u8] = br#""fuzz\/upstream\u002dmodel""#;
const SPLICED_MODEL: &str = "fuzz/upstream-model";

const MAX: usize = RouteContext::MAX_PROMPT_BYTES;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    let endpoint = endpoint(selector);
    if endpoint.takes_form() {
        match parse_form_request(body, BOUNDARY) {
            Ok(parsed) => check_form(body, &parsed),
            Err(error) => check_error(&error),
        }
        return;
    }
    let result = parse_request(endpoint, body);
    // The envelope scanner answers only as serde would have.
    assert_eq!(
        result,
        parse_request_by_serde(endpoint, body),
        "the scanner and serde disagree"
    );
    // And so it does on a body prescanned as it arrived, in pieces whose
    // size the selector picks (the gateway's path for a large body).
    let cut = 1 + usize::from(selector / 16) * 7;
    let mut prescan = Prescan::with_pieces(body.len(), &[]);
    for piece in body.chunks(cut) {
        prescan.push(piece);
    }
    match prescan.finish() {
        Ok(prescanned) => assert_eq!(
            parse_prescanned(endpoint, &prescanned),
            result,
            "the prescanned scan and the scan disagree"
        ),
        Err(whole) => {
            assert_eq!(&whole[..], body, "the prescan changed the body");
            assert!(std::str::from_utf8(body).is_err(), "valid UTF-8 refused by the prescan");
        }
    }
    // A route that reads no digest gets the same request but for it: the
    // text decoded only as far as the bound, the rest counted.
    if let Ok(parsed) = &result {
        let mut skipped = read_request(endpoint, body)
            .expect("parsed above")
            .parse(Digest::Skipped);
        assert_eq!(skipped.prompt_digest, 0, "a skipped digest was worked out");
        skipped.prompt_digest = parsed.prompt_digest;
        assert_eq!(&skipped, parsed, "skipping the digest changed the request");
    }
    match result {
        Ok(parsed) => {
            check_model_span(body, &parsed);
            check_prompt(endpoint, body, &parsed);
            check_splice(endpoint, body, &parsed);
            check_usage_splice(endpoint, body, &parsed);
        }
        Err(error) => check_error(&error),
    }
});

fn check_form(body: &[u8], parsed: &ParsedRequest) {
    let span = parsed.model_span.clone();
    assert!(span.end <= body.len(), "model_span {span:?} outside the body");
    assert_eq!(&body[span.clone()], parsed.model.as_bytes(), "model_span is not the model");
    assert!(!parsed.model.is_empty(), "Ok with an empty model");
    assert_eq!(parsed.prompt_digest, xxhash_rust::xxh3::xxh3_64(body));
    let mut spliced = body[..span.start].to_vec();
    spliced.extend_from_slice(SPLICED_FORM_MODEL.as_bytes());
    spliced.extend_from_slice(&body[span.end..]);
    let again = parse_form_request(&spliced, BOUNDARY).unwrap_or_else(|e| {
        panic!("the form with its model rewritten no longer parses: {e}")
    });
    assert_eq!(again.model, SPLICED_FORM_MODEL);
    assert_eq!(again.model_span.start, span.start, "the model moved");
    assert_eq!(again.stream, parsed.stream, "rewriting the model changed `stream`");
}

fn check_model_span(body: &[u8], parsed: &ParsedRequest) {
    assert!(!parsed.model.is_empty(), "Ok with an empty model");
    let span = parsed.model_span.clone();
    assert!(
        span.start < span.end && span.end <= body.len(),
        "model_span {span:?} outside a body of {} bytes",
        body.len()
    );
    let literal = &body[span.clone()];
    assert!(
        literal.len() >= 2 && literal.starts_with(b"\"") && literal.ends_with(b"\""),
        "model_span {span:?} is not a string literal: {:?}",
        String::from_utf8_lossy(literal)
    );
    let decoded: String = serde_json::from_slice(literal).unwrap_or_else(|e| {
        panic!(
            "model_span {span:?} is not a JSON string ({e}): {:?}",
            String::from_utf8_lossy(literal)
        )
    });
    assert_eq!(decoded, parsed.model, "model_span decodes to another model");
}

fn check_prompt(endpoint: Endpoint, body: &[u8], parsed: &ParsedRequest) {
    let (prompt, len) = (&parsed.prompt, parsed.prompt_len);
    assert!(prompt.len() <= MAX, "prompt of {} bytes", prompt.len());
    assert!(
        len >= prompt.len(),
        "prompt_len {len} < prompt {}",
        prompt.len()
    );
    if len <= MAX {
        assert_eq!(prompt.len(), len, "a prompt that fits was cut");
    } else {
        // Cut on a char boundary: at most 3 bytes short of the bound.
        assert!(
            prompt.len() > MAX - 4,
            "a long prompt was cut to {} bytes",
            prompt.len()
        );
    }
    if let Some(ids) = &parsed.token_ids {
        assert_eq!(endpoint, Endpoint::Completions, "token ids off completions");
        assert!(!ids.is_empty(), "Some(empty) token ids");
    }
    if endpoint == Endpoint::Models {
        assert!(prompt.is_empty() && len == 0, "/v1/models with a prompt");
        assert_eq!(
            parsed.prompt_digest,
            xxhash_rust::xxh3::xxh3_64(body),
            "/v1/models not routed on the raw body"
        );
    }
    let readable = len > 0;
    if let Some(expected) = plain_prompt(endpoint, body).filter(|_| readable) {
        assert_eq!(len, expected.len(), "prompt_len of a plain-text prompt");
        let bounded = bound_prompt(&expected, MAX);
        assert!(
            prompt == bounded,
            "prompt ({} bytes) is not the plain-text prompt ({} bytes) bounded on a \
             char boundary ({} bytes); they part at byte {}, prompt ends {:?}",
            prompt.len(),
            expected.len(),
            bounded.len(),
            parting(prompt, bounded),
            tail(prompt),
        );
    }
}

/// Where two texts stop agreeing, in bytes.
fn parting(a: &str, b: &str) -> usize {
    a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count()
}

/// The last few chars of a text, for messages about 32 KiB strings.
fn tail(text: &str) -> &str {
    let mut start = text.len().saturating_sub(16);
    while !text.is_char_boundary(start) {
        start -= 1;
    }
    &text[start..]
}

/// The whole routing text where it is plain to see, `None` for every other
/// shape: a completions `prompt` / embeddings `input` that is a string or a
/// non-empty list of non-empty strings (joined by the turn separator), or
/// chat messages whose contents are strings (or absent, null, or anything
/// but a list of parts) — `role: content`, turn by turn. Only asked of a
/// readable conversation, so the body is known to have no duplicate fields.
fn plain_prompt(endpoint: Endpoint, body: &[u8]) -> Option<String> {
    let value: Value = serde_json::from_slice(body).ok()?;
    match endpoint {
        Endpoint::Completions => plain_text(value.get("prompt")?),
        Endpoint::Embeddings => plain_text(value.get("input")?),
        Endpoint::ChatCompletions => plain_messages(value.get("messages")?),
        _ => None,
    }
}

fn plain_text(prompt: &Value) -> Option<String> {
    match prompt {
        Value::String(text) => Some(text.clone()),
        Value::Array(items) if !items.is_empty() => {
            let texts: Option<Vec<&str>> = items
                .iter()
                .map(|item| item.as_str().filter(|text| !text.is_empty()))
                .collect();
            Some(texts?.join("\n"))
        }
        _ => None,
    }
}

fn plain_messages(messages: &Value) -> Option<String> {
    let mut turns = Vec::new();
    for message in messages.as_array()? {
        // A message that is not an object makes the list unreadable.
        let message = message.as_object()?;
        let role = match message.get("role") {
            None | Some(Value::Null) => "",
            Some(role) => role.as_str()?,
        };
        let content = match message.get("content") {
            Some(Value::String(text)) => text.as_str(),
            Some(Value::Array(_)) => return None,
            _ => "",
        };
        turns.push(format!("{role}: {content}"));
    }
    Some(turns.join("\n"))
}

/// The proxy's splice (`proxy::body::attempt_body`) must not change what the
/// body means, only its model.
fn check_splice(endpoint: Endpoint, body: &[u8], parsed: &ParsedRequest) {
    let span = parsed.model_span.clone();
    let mut spliced = Vec::with_capacity(body.len() + SPLICED_LITERAL.len());
    spliced.extend_from_slice(&body[..span.start]);
    spliced.extend_from_slice(SPLICED_LITERAL);
    spliced.extend_from_slice(&body[span.end..]);
    let again = parse_request(endpoint, &spliced).unwrap_or_else(|e| {
        panic!(
            "the body with model_span {span:?} spliced no longer parses: {e}\n{:?}",
            String::from_utf8_lossy(&spliced)
        )
    });
    assert_eq!(
        again.model, SPLICED_MODEL,
        "splice did not change the model"
    );
    assert_eq!(
        again.model_span,
        span.start..span.start + SPLICED_LITERAL.len(),
        "the spliced literal is not where it was put"
    );
    assert_eq!(again.stream, parsed.stream, "splice changed `stream`");
    assert_eq!(again.prompt, parsed.prompt, "splice changed the prompt");
    assert_eq!(
        again.prompt_len, parsed.prompt_len,
        "splice changed prompt_len"
    );
    assert_eq!(
        again.token_ids, parsed.token_ids,
        "splice changed token ids"
    );
    if parsed.prompt_len > 0 {
        // A readable conversation's digest covers the conversation, not the model.
        assert_eq!(
            again.prompt_digest, parsed.prompt_digest,
            "splice changed the conversation digest"
        );
    }
}

/// The splice that asks the engine for a stream's usage must leave a body
/// that parses the same, with `stream_options.include_usage` true.
fn check_usage_splice(endpoint: Endpoint, body: &[u8], parsed: &ParsedRequest) {
    let Some(splice) = &parsed.usage_splice else {
        return;
    };
    assert!(
        parsed.stream && matches!(endpoint, Endpoint::ChatCompletions | Endpoint::Completions),
        "a usage splice on a request that is not a chat or completions stream"
    );
    assert!(
        splice.range.start <= splice.range.end && splice.range.end <= body.len(),
        "usage splice {:?} outside a body of {} bytes",
        splice.range,
        body.len()
    );
    let mut spliced = body.to_vec();
    spliced.splice(splice.range.clone(), splice.bytes.iter().copied());
    let again = parse_request(endpoint, &spliced).unwrap_or_else(|e| {
        panic!(
            "the body with the usage splice no longer parses: {e}\n{:?}",
            String::from_utf8_lossy(&spliced)
        )
    });
    assert_eq!(again.model, parsed.model, "the usage splice changed the model");
    assert!(again.stream, "the usage splice changed `stream`");
    assert_eq!(again.prompt, parsed.prompt, "the usage splice changed the prompt");
    assert!(again.usage_splice.is_none(), "usage still not asked for after the splice");
    // The gateway skips fields it does not read without decoding them (the
    // engine judges those), so a body may hold bytes `Value` refuses.
    let Ok(value) = serde_json::from_slice::<Value>(&spliced) else {
        return;
    };
    assert_eq!(
        value["stream_options"]["include_usage"],
        Value::Bool(true),
        "{:?}",
        String::from_utf8_lossy(&spliced)
    );
}

fn check_error(error: &RequestError) {
    let message = error.to_string();
    assert!(!message.is_empty());
    if let Some(param) = error.param() {
        assert_eq!(param, "model");
    }
}
