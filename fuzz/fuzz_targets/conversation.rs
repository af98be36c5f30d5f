//! The conversation builder on its own: any sequence of pushes, checked
//! against a model that keeps the whole text.
//!
//! `parse_request` only reaches the cap with bodies over 32 KiB, which the
//! fuzzer rarely builds; here a repeated push gets there from a few bytes.
//! The promise checked is the one `RouteContext::prompt` documents: the
//! routing text is the conversation's text bounded to `MAX_PROMPT_BYTES` on a
//! char boundary (`bound_prompt` of the whole text), its length is the whole
//! text's, identities and token ids add no text, and the digest depends on
//! the pushes alone.

#![no_main]

use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use rolter::openai::Conversation;
use rolter_balancer::{bound_prompt, RouteContext};

/// Longest whole text a run builds: a few times the cap, so every input
/// stays fast.
const MAX_TEXT: usize = 4 * RouteContext::MAX_PROMPT_BYTES;

#[derive(Arbitrary, Debug)]
enum Push {
    Text(String),
    /// `text`, `times` over, in one push: reaches the cap from a short input.
    LongText {
        text: String,
        times: u16,
    },
    Separator,
    Turn(String),
    Identity {
        kind: String,
        bytes: Vec<u8>,
    },
    TokenIds(Vec<u32>),
}

fuzz_target!(|pushes: Vec<Push>| {
    let mut conversation = Conversation::new();
    let mut replay = Conversation::new();
    let mut whole = String::new();
    for push in &pushes {
        match push {
            Push::Text(text) => {
                conversation.push_text(text);
                replay.push_text(text);
                whole.push_str(text);
            }
            Push::LongText { text, times } => {
                let times = usize::from(*times).min(MAX_TEXT / text.len().max(1));
                let text = text.repeat(times);
                conversation.push_text(&text);
                replay.push_text(&text);
                whole.push_str(&text);
            }
            Push::Separator => {
                conversation.push_separator();
                replay.push_separator();
                if !whole.is_empty() {
                    whole.push('\n');
                }
            }
            Push::Turn(role) => {
                conversation.push_turn(role);
                replay.push_turn(role);
                if !whole.is_empty() {
                    whole.push('\n');
                }
                whole.push_str(role);
                whole.push_str(": ");
            }
            Push::Identity { kind, bytes } => {
                conversation.push_identity(kind, bytes);
                replay.push_identity(kind, bytes);
            }
            Push::TokenIds(ids) => {
                conversation.push_token_ids(ids);
                replay.push_token_ids(ids);
            }
        }
        if whole.len() > MAX_TEXT {
            break;
        }
    }
    let (text, len, digest) = conversation.finish();
    let (_, _, replayed) = replay.finish();
    assert_eq!(len, whole.len(), "length is not the whole text's");
    assert!(
        text == bound_prompt(&whole, RouteContext::MAX_PROMPT_BYTES),
        "routing text of {} bytes is not the whole text ({} bytes) bounded on a char boundary; \
         they part at byte {}, the routing text ends {:?}",
        text.len(),
        whole.len(),
        text.bytes()
            .zip(whole.bytes())
            .take_while(|(a, b)| a == b)
            .count(),
        text.chars()
            .skip(text.chars().count().saturating_sub(6))
            .collect::<String>(),
    );
    assert_eq!(digest, replayed, "same pushes, different digest");
});
