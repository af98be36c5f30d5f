//! What a strategy may know about one request.
//!
//! The context borrows from the request so the gateway can build one per
//! attempt without allocating. The prompt text is bounded (affinity only needs
//! the start of a conversation, and hashing or matching megabytes per request
//! would cost more than the routing is worth), while its full size and
//! identity travel alongside as `prompt_len` and `prompt_digest`.

/// What a strategy may know about one request. Borrowed: built per request
/// without allocation.
#[derive(Clone, Copy, Debug, Default)]
pub struct RouteContext<'a> {
    /// The caller's session identity, from the `x-session-id` header.
    pub session_key: Option<&'a str>,
    /// The conversation text, bounded to [`RouteContext::MAX_PROMPT_BYTES`]
    /// on a char boundary (see [`bound_prompt`]).
    pub prompt: &'a str,
    /// Byte length of the whole conversation text, before bounding.
    pub prompt_len: usize,
    /// Digest of the whole conversation (its text plus the identity of its
    /// images, tool calls and tool results), or of the raw body when the
    /// gateway could not read one; `0` means none.
    pub prompt_digest: u64,
    /// The request's token ids when the caller supplied them (the
    /// `x-rolter-token-ids` header, or an integer `prompt` on
    /// `/v1/completions`); KV-block scoring is neutral without them.
    pub token_ids: Option<&'a [u32]>,
    /// The LoRA adapter the request addresses. Set only when the request names
    /// something other than its route's own model (a passthrough provider-group
    /// address); adapter affinity is inert otherwise.
    pub adapter: Option<&'a str>,
    /// Milliseconds on the gateway's monotonic clock when the pick is made.
    /// The balancer reads no clock of its own: TTLs and staleness are measured
    /// against this, which tests set by hand.
    pub now_ms: u64,
}

impl<'a> RouteContext<'a> {
    /// Upper bound, in bytes, on [`RouteContext::prompt`]: the conversation's
    /// first 32 KiB (docs/design/balancer.md).
    pub const MAX_PROMPT_BYTES: usize = 32 * 1024;

    /// The request's prompt size in thousands of tokens: the token-id count
    /// when given, else the conversation's bytes / 4 (docs/design/defaults.md).
    pub fn prompt_ktokens(&self) -> f64 {
        let tokens = match self.token_ids {
            Some(ids) => ids.len() as f64,
            None => self.prompt_len as f64 / 4.0,
        };
        tokens / 1000.0
    }
}

/// Longest prefix of `text` that is at most `max` bytes and ends on a char
/// boundary.
pub fn bound_prompt(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    // A UTF-8 char is at most 4 bytes, so this steps back at most 3 times;
    // index 0 is always a boundary, so the loop ends.
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bound_prompt_keeps_short_text_whole() {
        assert_eq!(bound_prompt("hello", 5), "hello");
        assert_eq!(bound_prompt("hello", 100), "hello");
        assert_eq!(bound_prompt("", 0), "");
    }

    #[test]
    fn bound_prompt_cuts_ascii_at_the_limit() {
        assert_eq!(bound_prompt("hello world", 5), "hello");
        assert_eq!(bound_prompt("hello", 0), "");
    }

    #[test]
    fn bound_prompt_never_splits_a_multibyte_char() {
        // "é" is 2 bytes, "€" is 3, "🦀" is 4.
        let text = "aé€🦀";
        assert_eq!(bound_prompt(text, 1), "a");
        assert_eq!(bound_prompt(text, 2), "a");
        assert_eq!(bound_prompt(text, 3), "aé");
        assert_eq!(bound_prompt(text, 5), "aé");
        assert_eq!(bound_prompt(text, 6), "aé€");
        assert_eq!(bound_prompt(text, 9), "aé€");
        assert_eq!(bound_prompt(text, 10), "aé€🦀");
    }

    #[test]
    fn bound_prompt_at_max_prompt_bytes_is_a_prefix_within_the_bound() {
        let text = "€".repeat(RouteContext::MAX_PROMPT_BYTES);
        let bounded = bound_prompt(&text, RouteContext::MAX_PROMPT_BYTES);
        assert!(bounded.len() <= RouteContext::MAX_PROMPT_BYTES);
        assert!(bounded.len() > RouteContext::MAX_PROMPT_BYTES - 3);
        assert!(text.starts_with(bounded));
    }

    #[test]
    fn default_context_has_no_key_and_no_digest() {
        let ctx = RouteContext::default();
        assert_eq!(ctx.session_key, None);
        assert_eq!(ctx.prompt, "");
        assert_eq!(ctx.prompt_len, 0);
        assert_eq!(ctx.prompt_digest, 0);
    }
}
