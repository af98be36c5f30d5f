//! The tokens an engine says it used, read from its answer as it passes.
//!
//! Every API reports them in a `usage` object: chat and completions as
//! `prompt_tokens` (+ `prompt_tokens_details.cached_tokens`) and
//! `completion_tokens`, in the answer or a stream's last chunk when the
//! client asked for it; Responses as `input_tokens` (+
//! `input_tokens_details.cached_tokens`) and `output_tokens`, in the answer
//! or its `response.completed` event; Anthropic Messages as `input_tokens`
//! (the uncached part), `cache_read_input_tokens`,
//! `cache_creation_input_tokens` and `output_tokens`, in the answer, or
//! split over a stream's `message_start` and `message_delta`. Each chunk is
//! searched for `"usage"` and the object parsed in place; one cut by a chunk
//! boundary is carried (at most [`MAX_CARRY`] bytes) into the next.

use std::sync::LazyLock;

use bytes::{Bytes, BytesMut};
use memchr::memmem::Finder;
use serde::Deserialize;

/// The key every API names its token counts with.
const USAGE_KEY: &[u8] = b"\"usage\"";

/// The searchers of the SSE path, built once: building one costs more than
/// running it over a chunk, and every chunk of every stream is searched.
static USAGE: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(USAGE_KEY));
static EVENT_END: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\n\n"));
static EVENT_END_CRLF: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\n\r\n"));
static NO_CHOICES: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"choices\":[]"));
static USAGE_OBJECT: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"usage\":{"));

/// Tokens of one request, as its engine counted them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// The whole prompt, cached part included.
    pub prompt: u64,
    /// Of the prompt, tokens found in the engine's prefix cache.
    pub cached: u64,
    pub completion: u64,
}

/// A `usage` object of any of the APIs, read without building a `Value`
/// (unknown fields are skipped).
#[derive(Deserialize)]
struct RawUsage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    prompt_tokens_details: Option<Details>,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    input_tokens_details: Option<Details>,
    cache_read_input_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct Details {
    cached_tokens: Option<u64>,
}

impl Usage {
    /// The usage a `usage` object reports; `None` when it has no counts.
    fn of(raw: &RawUsage) -> Option<Usage> {
        let cached = |d: &Option<Details>| d.as_ref().and_then(|d| d.cached_tokens).unwrap_or(0);
        if raw.prompt_tokens.is_some() || raw.completion_tokens.is_some() {
            return Some(Usage {
                prompt: raw.prompt_tokens.unwrap_or(0),
                cached: cached(&raw.prompt_tokens_details),
                completion: raw.completion_tokens.unwrap_or(0),
            });
        }
        if raw.input_tokens.is_none() && raw.output_tokens.is_none() {
            return None;
        }
        let input = raw.input_tokens.unwrap_or(0);
        let created = raw.cache_creation_input_tokens.unwrap_or(0);
        Some(if raw.cache_read_input_tokens.is_some() || created > 0 {
            // Anthropic: input_tokens leaves out what the cache served.
            let read = raw.cache_read_input_tokens.unwrap_or(0);
            Usage {
                prompt: input + read + created,
                cached: read,
                completion: raw.output_tokens.unwrap_or(0),
            }
        } else {
            Usage {
                prompt: input,
                cached: cached(&raw.input_tokens_details),
                completion: raw.output_tokens.unwrap_or(0),
            }
        })
    }

    /// Field by field the larger: a stream's usage comes in parts
    /// (Anthropic's input at the start, output at the end), and a later
    /// report never lowers a count.
    fn merge(self, other: Usage) -> Usage {
        Usage {
            prompt: self.prompt.max(other.prompt),
            cached: self.cached.max(other.cached),
            completion: self.completion.max(other.completion),
        }
    }
}

/// Longest piece of a cut `usage` object carried to the next chunk.
pub const MAX_CARRY: usize = 8 * 1024;

/// Reads usage from an answer chunk by chunk.
#[derive(Debug, Default)]
pub struct UsageReader {
    usage: Option<Usage>,
    /// The start of a `usage` object the last chunk cut off.
    carry: Vec<u8>,
}

impl UsageReader {
    pub fn feed(&mut self, chunk: &[u8]) {
        if self.carry.is_empty() {
            self.scan(chunk);
            return;
        }
        let mut joined = std::mem::take(&mut self.carry);
        joined.extend_from_slice(chunk);
        self.scan(&joined);
    }

    /// What the engine reported, if it did.
    pub fn usage(&self) -> Option<Usage> {
        self.usage
    }

    fn scan(&mut self, bytes: &[u8]) {
        let mut from = 0;
        while let Some(at) = USAGE.find(&bytes[from..]) {
            let key_start = from + at;
            from = key_start + USAGE_KEY.len();
            let rest = bytes[from..].trim_ascii_start();
            let cut = match rest.strip_prefix(b":") {
                Some(value) => self.read_value(value),
                // The key ends the chunk: its value comes with the next.
                None => rest.is_empty(),
            };
            if cut {
                if bytes.len() - key_start <= MAX_CARRY {
                    self.carry = bytes[key_start..].to_vec();
                }
                return;
            }
        }
        // A key cut in two ("usa" | "ge"): keep the part that came. Only
        // an end that can begin the key is kept, so the usual chunk (one
        // ending `"stop"}]}` and a blank line) costs no copy.
        if let Some(cut) = (1..USAGE_KEY.len())
            .rev()
            .find(|&k| bytes.ends_with(&USAGE_KEY[..k]))
        {
            self.carry = bytes[bytes.len() - cut..].to_vec();
        }
    }

    /// Reads the value after a `"usage":`; whether the chunk cut it (inside
    /// the object, or right after the colon).
    fn read_value(&mut self, value: &[u8]) -> bool {
        let mut values =
            serde_json::Deserializer::from_slice(value).into_iter::<Option<RawUsage>>();
        match values.next() {
            Some(Ok(Some(raw))) => {
                if let Some(usage) = Usage::of(&raw) {
                    self.usage = Some(self.usage.map_or(usage, |u| u.merge(usage)));
                }
                false
            }
            Some(Ok(None)) => false,
            Some(Err(e)) => e.is_eof(),
            None => true,
        }
    }
}

/// Longest partial SSE event held back waiting for its end; past it the
/// bytes go on as they are (not an event stream this filter understands).
pub const MAX_PENDING: usize = 64 * 1024;

/// Keeps the usage chunk the gateway asked for (the client did not) out of
/// a chat or completions stream: complete events pass as they came; the
/// one whose data is a usage-only chunk (`"choices":[]` and a `usage`
/// object) is dropped. A partial event waits for its end, which it needs
/// before it is any use to the client anyway.
#[derive(Debug, Default)]
pub struct UsageChunkFilter {
    pending: Vec<u8>,
}

impl UsageChunkFilter {
    /// What of `chunk` goes to the client (`end`: the stream's last chunk).
    pub fn filter(&mut self, chunk: Bytes, end: bool) -> Bytes {
        if self.pending.is_empty() && chunk.ends_with(b"\n\n") && USAGE.find(&chunk).is_none() {
            return chunk;
        }
        let mut data = std::mem::take(&mut self.pending);
        data.extend_from_slice(&chunk);
        let mut out = BytesMut::with_capacity(data.len());
        let mut start = 0;
        while let Some(len) = event_len(&data[start..]) {
            let event = &data[start..start + len];
            if !is_usage_event(event) {
                out.extend_from_slice(event);
            }
            start += len;
        }
        let rest = &data[start..];
        if end || rest.len() > MAX_PENDING {
            out.extend_from_slice(rest);
        } else {
            self.pending = rest.to_vec();
        }
        out.freeze()
    }
}

/// The length of the first complete SSE event of `bytes`, its blank line
/// (`\n\n` or `\r\n\r\n`) included.
fn event_len(bytes: &[u8]) -> Option<usize> {
    let lf = EVENT_END.find(bytes).map(|at| at + 2);
    let crlf = EVENT_END_CRLF.find(bytes).map(|at| at + 3);
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Whether an SSE event is a chat or completions usage-only chunk.
fn is_usage_event(event: &[u8]) -> bool {
    NO_CHOICES.find(event).is_some() && USAGE_OBJECT.find(event).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(chunks: &[&str]) -> Option<Usage> {
        let mut reader = UsageReader::default();
        for chunk in chunks {
            reader.feed(chunk.as_bytes());
        }
        reader.usage()
    }

    #[test]
    fn each_apis_usage_is_read() {
        let chat = r#"{"id":"c","choices":[],"usage":{"prompt_tokens":12,"total_tokens":17,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":8}},"x":1}"#;
        assert_eq!(
            read(&[chat]),
            Some(Usage {
                prompt: 12,
                cached: 8,
                completion: 5
            })
        );
        let responses = r#"{"id":"r","usage":{"input_tokens":30,"input_tokens_details":{"cached_tokens":16},"output_tokens":4,"total_tokens":34}}"#;
        assert_eq!(
            read(&[responses]),
            Some(Usage {
                prompt: 30,
                cached: 16,
                completion: 4
            })
        );
        let anthropic = r#"{"type":"message","usage":{"input_tokens":10,"cache_read_input_tokens":20,"cache_creation_input_tokens":0,"output_tokens":3}}"#;
        assert_eq!(
            read(&[anthropic]),
            Some(Usage {
                prompt: 30,
                cached: 20,
                completion: 3
            })
        );
        assert_eq!(read(&[r#"{"usage":null}"#, r#"{"choices":[]}"#]), None);
    }

    #[test]
    fn a_stream_reports_in_parts_and_a_chunk_may_cut_the_object() {
        let anthropic = [
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":7,\"cache_read_input_tokens\":9,\"output_tokens\":0}}}\n\n",
            "event: content_block_delta\ndata: {\"delta\":{\"text\":\"usage\"}}\n\n",
            "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output",
            "_tokens\":6}}\n\n",
        ];
        assert_eq!(
            read(&anthropic),
            Some(Usage {
                prompt: 16,
                cached: 9,
                completion: 6
            })
        );
        let chat = [
            "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}],\"usage\":null}\n\n",
            "data: {\"choices\":[],\"us",
            "age\":{\"prompt_tokens\":4,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n",
        ];
        assert_eq!(
            read(&chat),
            Some(Usage {
                prompt: 4,
                cached: 0,
                completion: 2
            })
        );
    }

    #[test]
    fn every_cut_of_a_stream_reads_the_same_usage() {
        let stream = concat!(
            "data: {\"choices\":[{\"delta\":{\"content\":\"usage\"},\"finish_reason\":\"stop\"}]}\n\n",
            "data: {\"choices\":[],\"usage\" : {\"prompt_tokens\":4,\"completion_tokens\":2}}\n\n",
            "data: [DONE]\n\n",
        );
        let expected = Some(Usage {
            prompt: 4,
            cached: 0,
            completion: 2,
        });
        for a in 0..=stream.len() {
            for b in (a..=stream.len()).step_by(3) {
                let pieces = [&stream[..a], &stream[a..b], &stream[b..]];
                assert_eq!(read(&pieces), expected, "cut at {a} and {b}");
            }
        }
    }

    #[test]
    fn a_chunk_that_cannot_begin_the_key_is_not_carried() {
        let mut reader = UsageReader::default();
        reader.feed(b"data: {\"choices\":[{\"finish_reason\":\"stop\"}]}\n\n");
        assert!(reader.carry.is_empty());
        reader.feed(b"data: {\"choices\":[],\"usa");
        assert_eq!(reader.carry, b"\"usa");
    }

    #[test]
    fn what_is_carried_is_bounded() {
        let mut reader = UsageReader::default();
        reader.feed(
            format!(
                "{{\"usage\":{{\"prompt_tokens\":1,\"pad\":\"{}",
                "x".repeat(MAX_CARRY)
            )
            .as_bytes(),
        );
        assert!(reader.carry.len() <= MAX_CARRY);
        reader.feed(b"\"}}");
        assert_eq!(
            reader.usage(),
            None,
            "an object past the bound is given up, not buffered"
        );
    }
}

#[cfg(test)]
mod filter_tests {
    use super::*;

    #[test]
    fn the_usage_chunk_is_kept_from_the_client_and_nothing_else() {
        let events = [
            "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"content\":\"usage\"}}]}\n\n",
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":2}}\n\n",
            "data: [DONE]\n\n",
        ];
        let whole: String = events.concat();
        let expected: String = [events[0], events[1], events[3]].concat();
        // Every way of cutting the stream in two gives the same bytes.
        for cut in 0..=whole.len() {
            let mut filter = UsageChunkFilter::default();
            let mut out = Vec::new();
            out.extend_from_slice(
                &filter.filter(Bytes::copy_from_slice(&whole.as_bytes()[..cut]), false),
            );
            out.extend_from_slice(
                &filter.filter(Bytes::copy_from_slice(&whole.as_bytes()[cut..]), true),
            );
            assert_eq!(String::from_utf8(out).unwrap(), expected, "cut at {cut}");
        }
        let mut filter = UsageChunkFilter::default();
        let plain = Bytes::from_static(b"data: {\"choices\":[{\"text\":\"x\"}]}\n\n");
        assert_eq!(
            filter.filter(plain.clone(), false),
            plain,
            "passed through as is"
        );
    }
}
