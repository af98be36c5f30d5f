//! The routing view of a conversation: its text, bounded, and a digest of all of it.
//!
//! Prefix affinity needs the conversation's text in order, turn by turn; it
//! never needs more than its beginning, so the text is capped at
//! [`RouteContext::MAX_PROMPT_BYTES`] on a character boundary. The length and
//! the digest cover the whole conversation, including the identity (a hash,
//! not the bytes) of images, audio, tool calls and tool results, so two
//! conversations that differ only past the cap, or only in an image, still
//! digest differently.
//!
//! Only a strategy that hashes the conversation reads the digest
//! (`StrategyKind::reads_prompt_digest`), and the digest needs every byte
//! decoded. For any other route the conversation is read without it
//! ([`Digest::Skipped`]): an escaped string is decoded only as far as the
//! bounded text reaches, and the rest is counted, not decoded.

use rolter_balancer::{bound_prompt, RouteContext};
use xxhash_rust::xxh3::Xxh3;

use super::escaped::Escaped;

/// Separates turns in the text (and the digest), so "ab" + "c" ≠ "a" + "bc".
const TURN_SEPARATOR: &str = "\n";

/// Whether a conversation's digest is worked out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Digest {
    /// The route's strategy hashes the conversation.
    Kept,
    /// Nothing reads it: the digest is 0, as for a request with no
    /// conversation, and the text past the bound is only counted.
    Skipped,
}

pub struct Conversation {
    text: String,
    len: usize,
    digest: Option<Xxh3>,
}

impl Default for Conversation {
    fn default() -> Self {
        Self::new()
    }
}

impl Conversation {
    pub fn new() -> Self {
        Self::with_capacity(0, Digest::Kept)
    }

    /// Room for `hint` bytes of text, at most the bound: a conversation
    /// pushed piece by piece (role, separator, text, per turn) otherwise
    /// grows its buffer several times per request.
    pub fn with_capacity(hint: usize, digest: Digest) -> Self {
        Self {
            text: String::with_capacity(hint.min(RouteContext::MAX_PROMPT_BYTES)),
            len: 0,
            digest: (digest == Digest::Kept).then(Xxh3::new),
        }
    }

    /// Appends text that belongs to the conversation.
    pub fn push_text(&mut self, text: &str) {
        let room = self.room();
        self.len += text.len();
        if let Some(digest) = &mut self.digest {
            digest.update(text.as_bytes());
        }
        if room > 0 {
            self.text.push_str(bound_prompt(text, room));
        }
    }

    /// Appends a string with escapes: decoded whole when the digest is
    /// kept, else decoded as far as the text has room and counted past it.
    pub fn push_escaped(&mut self, text: &Escaped<'_>) {
        if self.digest.is_some() {
            return text.decode(|piece| self.push_text(piece));
        }
        let rest = match self.room() {
            0 => *text,
            room => text.decode_some(room, |piece| self.push_text(piece)),
        };
        self.len += rest.decoded_len();
    }

    /// How many more bytes the text takes: none once a push was cut (at
    /// the bound, or short of it on a character boundary), since nothing
    /// later may follow; the text must stay the conversation's beginning,
    /// not skip ahead.
    fn room(&self) -> usize {
        if self.text.len() == self.len {
            RouteContext::MAX_PROMPT_BYTES.saturating_sub(self.text.len())
        } else {
            0
        }
    }

    /// Separates what follows from what came before.
    pub fn push_separator(&mut self) {
        if self.len > 0 {
            self.push_text(TURN_SEPARATOR);
        }
    }

    /// Starts a new turn spoken by `role`.
    pub fn push_turn(&mut self, role: &str) {
        self.push_separator();
        self.push_text(role);
        self.push_text(": ");
    }

    /// Records something by identity only (an image, a tool call): it changes
    /// the digest but adds no routing text.
    pub fn push_identity(&mut self, kind: &str, bytes: &[u8]) {
        if let Some(digest) = &mut self.digest {
            digest.update(kind.as_bytes());
            digest.update(&xxhash_rust::xxh3::xxh3_64(bytes).to_le_bytes());
        }
    }

    /// Records token ids (a tokenized prompt): digest only.
    pub fn push_token_ids(&mut self, ids: &[u32]) {
        if let Some(digest) = &mut self.digest {
            digest.update(b"tokens");
            for id in ids {
                digest.update(&id.to_le_bytes());
            }
        }
    }

    /// Bounded text, whole length, digest (0 when skipped).
    pub fn finish(self) -> (String, usize, u64) {
        (self.text, self.len, self.digest.map_or(0, |d| d.digest()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_bounded_on_a_char_boundary_but_length_counts_everything() {
        let mut c = Conversation::new();
        let long = "é".repeat(RouteContext::MAX_PROMPT_BYTES); // 2 bytes each
        c.push_text(&long);
        let (text, len, _) = c.finish();
        assert!(text.len() <= RouteContext::MAX_PROMPT_BYTES);
        assert_eq!(text.len(), RouteContext::MAX_PROMPT_BYTES);
        assert_eq!(len, long.len());
    }

    #[test]
    fn nothing_follows_a_push_cut_short_of_the_bound() {
        // Found by the fuzzer: 2 bytes of room were left after a cut at a
        // 3-byte char, and a later push filled them.
        let mut c = Conversation::new();
        c.push_text(&"軻".repeat(RouteContext::MAX_PROMPT_BYTES / 3 + 1));
        c.push_text("\0\0");
        let (text, _, _) = c.finish();
        assert!(
            text.chars().all(|ch| ch == '軻'),
            "{:?}",
            &text[text.len() - 8..]
        );
    }

    #[test]
    fn digest_covers_text_past_the_bound() {
        let base = "x".repeat(RouteContext::MAX_PROMPT_BYTES);
        let digest = |tail: &str| {
            let mut c = Conversation::new();
            c.push_text(&base);
            c.push_text(tail);
            c.finish()
        };
        let (text_a, _, a) = digest("a");
        let (text_b, _, b) = digest("b");
        assert_eq!(text_a, text_b);
        assert_ne!(a, b);
    }

    #[test]
    fn identities_change_the_digest_not_the_text() {
        let run = |image: &[u8]| {
            let mut c = Conversation::new();
            c.push_turn("user");
            c.push_text("what is this?");
            c.push_identity("image", image);
            c.finish()
        };
        let (text_a, _, a) = run(b"http://x/cat.png");
        let (text_b, _, b) = run(b"http://x/dog.png");
        assert_eq!(text_a, "user: what is this?");
        assert_eq!(text_a, text_b);
        assert_ne!(a, b);
    }
}
