//! The simulated tokenizer: request text to token ids, the same ids every
//! time and in every process, so a test can compute what the engine will see.
//!
//! Text is cut into pieces: a run of letters and digits is a piece, cut every
//! [`MAX_PIECE_CHARS`] characters (as BPE splits long words); every other
//! character that is not whitespace (punctuation, symbols) is a piece of its
//! own; whitespace only separates. A piece's id is its xxh3 hash, with a
//! fixed seed, folded into the regular part of the vocabulary. The chat
//! template's markers `<|im_start|>` and `<|im_end|>` are special tokens with
//! fixed ids, recognised wherever they appear in the text, as real tokenizers
//! do.
//!
//! A chat request is laid out as a ChatML template would: for each message
//! `<|im_start|>{role}\n{content}<|im_end|>\n`, then the generation prompt
//! `<|im_start|>assistant\n`. Content is a string or the text of its text
//! parts; any other part (an image, an audio clip) stands as its type and a
//! digest of its JSON, so different images give different tokens, as vLLM's
//! multimodal hashes do; an assistant's `tool_calls` follow its content as
//! compact JSON.
//!
//! The gateway's tests and the routing benchmark rely on [`tokenize`] and
//! [`chat_token_ids`] to send the engine's own token ids in
//! `x-rolter-token-ids`: changing how text becomes ids changes what they
//! expect, so treat this as a wire format.

use serde_json::Value;
use sha2::{Digest, Sha256};
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// Token ids are in `0..VOCAB_SIZE`.
pub const VOCAB_SIZE: u32 = 32_000;

/// The id of `<|im_start|>`.
pub const IM_START_ID: u32 = 1;

/// The id of `<|im_end|>`.
pub const IM_END_ID: u32 = 2;

/// Ids below this are special tokens; pieces of text hash into the rest.
const FIRST_REGULAR_ID: u32 = 3;

/// The longest run of letters and digits one token covers.
pub const MAX_PIECE_CHARS: usize = 10;

/// Fixed forever: token ids must not change between builds.
const PIECE_SEED: u64 = 0x726f_6c74_6572_746b; // "roltertk"

const SPECIAL_TOKENS: [(&str, u32); 2] = [("<|im_start|>", IM_START_ID), ("<|im_end|>", IM_END_ID)];

/// The token ids of `text`; see the module doc.
pub fn tokenize(text: &str) -> Vec<u32> {
    let mut ids = Vec::with_capacity(text.len() / 4 + 1);
    let mut rest = text;
    while let Some(first) = rest.chars().next() {
        if first == '<' {
            if let Some((marker, id)) = SPECIAL_TOKENS
                .iter()
                .find(|(marker, _)| rest.starts_with(marker))
            {
                ids.push(*id);
                rest = &rest[marker.len()..];
                continue;
            }
        }
        let piece_len = if first.is_alphanumeric() {
            rest.char_indices()
                .take(MAX_PIECE_CHARS)
                .take_while(|(_, c)| c.is_alphanumeric())
                .last()
                .map_or(first.len_utf8(), |(at, c)| at + c.len_utf8())
        } else {
            first.len_utf8()
        };
        if !first.is_whitespace() {
            ids.push(piece_id(&rest[..piece_len]));
        }
        rest = &rest[piece_len..];
    }
    ids
}

fn piece_id(piece: &str) -> u32 {
    let span = u64::from(VOCAB_SIZE - FIRST_REGULAR_ID);
    // The remainder is below `span`, which fits in a u32.
    FIRST_REGULAR_ID + (xxh3_64_with_seed(piece.as_bytes(), PIECE_SEED) % span) as u32
}

/// The token ids the engine prefills for a chat request body (a JSON object
/// with `messages`): [`tokenize`] of [`chat_text`].
pub fn chat_token_ids(body: &Value) -> Vec<u32> {
    tokenize(&chat_text(body))
}

/// A chat request body laid out by the chat template; see the module doc.
/// A body without a `messages` list gives just the generation prompt.
pub fn chat_text(body: &Value) -> String {
    chat_template_text(body, true)
}

/// The chat template applied to `body`'s `messages`, followed by the
/// generation prompt if `add_generation_prompt` (what a chat completion
/// always prefills; `/tokenize` lets the caller leave it out, as vLLM does).
pub(crate) fn chat_template_text(body: &Value, add_generation_prompt: bool) -> String {
    let mut text = String::new();
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    for message in messages {
        let role = message.get("role").and_then(Value::as_str).unwrap_or("");
        text.push_str("<|im_start|>");
        text.push_str(role);
        text.push('\n');
        push_content(&mut text, message.get("content"));
        if let Some(calls) = message.get("tool_calls").filter(|calls| !calls.is_null()) {
            text.push('\n');
            text.push_str(&calls.to_string());
        }
        text.push_str("<|im_end|>\n");
    }
    if add_generation_prompt {
        text.push_str("<|im_start|>assistant\n");
    }
    text
}

fn push_content(text: &mut String, content: Option<&Value>) {
    match content {
        Some(Value::String(content)) => text.push_str(content),
        Some(Value::Array(parts)) => {
            for part in parts {
                match part.get("text").and_then(Value::as_str) {
                    Some(part_text) => text.push_str(part_text),
                    None => {
                        let kind = part.get("type").and_then(Value::as_str).unwrap_or("part");
                        let digest = Sha256::digest(part.to_string().as_bytes());
                        text.push_str(&format!(" [{kind} {}] ", hex::encode(&digest[..8])));
                    }
                }
            }
        }
        _ => {}
    }
}

/// The token ids of a completions `prompt`, one list per prompt: a string, a
/// list of strings, a list of token ids, or a list of such lists. Token ids
/// are used as given. `Err` names what is wrong.
pub(crate) fn prompt_token_ids(prompt: &Value) -> Result<Vec<Vec<u32>>, String> {
    match prompt {
        Value::String(text) => Ok(vec![tokenize(text)]),
        Value::Array(items) if items.is_empty() => Err("`prompt` must not be empty".into()),
        Value::Array(items) if items.iter().all(Value::is_number) => Ok(vec![token_ids(items)?]),
        Value::Array(items) => items
            .iter()
            .map(|item| match item {
                Value::String(text) => Ok(tokenize(text)),
                Value::Array(ids) => token_ids(ids),
                _ => Err("`prompt` must be a string, a list of strings, a list of token ids or a list of lists of token ids".into()),
            })
            .collect(),
        _ => Err("`prompt` must be a string or a list".into()),
    }
}

fn token_ids(items: &[Value]) -> Result<Vec<u32>, String> {
    items
        .iter()
        .map(|item| {
            item.as_u64()
                .and_then(|id| u32::try_from(id).ok())
                .ok_or_else(|| {
                    format!("token id {item} in `prompt` is not a 32-bit unsigned integer")
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn words_punctuation_and_specials_become_tokens() {
        let ids = tokenize("Hello, world!  <|im_start|>x<|im_end|>");
        assert_eq!(ids.len(), 7, "{ids:?}");
        assert_eq!(ids[0], tokenize("Hello")[0]);
        assert_eq!(ids[1], tokenize(",")[0]);
        assert_eq!((ids[4], ids[6]), (IM_START_ID, IM_END_ID));
        assert!(ids.iter().all(|id| *id < VOCAB_SIZE));
        // Whitespace only separates.
        assert_eq!(tokenize("a b"), tokenize(" a\n\tb "));
        assert_ne!(tokenize("ab"), tokenize("a b"));
        assert!(tokenize("").is_empty());
        // An unfinished marker is ordinary punctuation.
        assert_eq!(tokenize("<|im").len(), 3);
    }

    #[test]
    fn long_words_are_cut_into_pieces() {
        assert_eq!(tokenize("internationalization").len(), 2);
        assert_eq!(tokenize("assistant").len(), 1);
        assert_eq!(tokenize(&"x".repeat(80)).len(), 8);
        assert_eq!(tokenize("naïve café").len(), 2);
    }

    #[test]
    fn ids_are_fixed_forever() {
        // Other tests and the benchmark depend on these exact values.
        assert_eq!(
            tokenize("The quick brown fox."),
            [28782, 1172, 18168, 9402, 30864]
        );
        assert_eq!(
            chat_token_ids(&json!({"messages": [{"role": "user", "content": "hello there"}]})),
            [
                IM_START_ID,
                8876,
                15637,
                11578,
                IM_END_ID,
                IM_START_ID,
                13739
            ]
        );
    }

    #[test]
    fn chat_is_laid_out_by_the_template() {
        let body = json!({"model": "m", "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {"url": "a"}}]},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        ]});
        let text = chat_text(&body);
        assert!(
            text.starts_with(
                "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi [image_url "
            ),
            "{text}"
        );
        assert!(
            text.ends_with("<|im_end|>\n<|im_start|>assistant\n"),
            "{text}"
        );
        assert!(text.contains("\"name\":\"f\""), "{text}");
        let with_image = |url: &str| {
            json!({"messages": [{"role": "user", "content": [
                {"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {"url": url}}]}]})
        };
        assert_ne!(
            chat_token_ids(&with_image("a")),
            chat_token_ids(&with_image("b"))
        );
        assert_eq!(
            chat_token_ids(&json!({"messages": [{"role": "user", "content": "hello there"}]})),
            [
                vec![IM_START_ID],
                tokenize("user hello there"),
                vec![IM_END_ID, IM_START_ID],
                tokenize("assistant")
            ]
            .concat()
        );
        assert_eq!(
            chat_token_ids(&json!({})),
            [vec![IM_START_ID], tokenize("assistant")].concat()
        );
    }

    #[test]
    fn prompts_are_strings_or_token_ids() {
        assert_eq!(prompt_token_ids(&json!("a b")), Ok(vec![tokenize("a b")]));
        assert_eq!(prompt_token_ids(&json!([1, 2, 3])), Ok(vec![vec![1, 2, 3]]));
        assert_eq!(
            prompt_token_ids(&json!(["a", [4294967295u64]])),
            Ok(vec![tokenize("a"), vec![u32::MAX]])
        );
        assert!(prompt_token_ids(&json!([])).is_err());
        assert!(prompt_token_ids(&json!([-1])).is_err());
        assert!(prompt_token_ids(&json!([4294967296u64])).is_err());
        assert!(prompt_token_ids(&json!([1.5])).is_err());
        assert!(prompt_token_ids(&json!({"a": 1})).is_err());
        assert!(prompt_token_ids(&json!([{"a": 1}])).is_err());
    }
}
