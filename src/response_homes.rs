//! Which engine holds which Responses API answer.
//!
//! vLLM and SGLang keep a response in the engine that produced it: `GET` and
//! `DELETE /v1/responses/{id}` and a continuation naming it in
//! `previous_response_id` work only there. The gateway learns each id from
//! the answer that carried it and remembers the provider and upstream model
//! that served it, for at most [`ResponseHomes::CAPACITY`] ids (the oldest
//! are forgotten first), across reloads.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

/// Where one response lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Home {
    /// The provider's slug.
    pub provider: Arc<str>,
    /// The model as the engine was asked for it.
    pub upstream_model: Arc<str>,
    /// The model the client asked for (its key must allow it to reach the
    /// response again).
    pub model: Arc<str>,
}

/// The learned homes, bounded.
#[derive(Debug, Default)]
pub struct ResponseHomes {
    inner: Mutex<Homes>,
}

#[derive(Debug, Default)]
struct Homes {
    by_id: HashMap<Box<str>, Home>,
    /// Ids in the order they were learned, for eviction.
    order: VecDeque<Box<str>>,
}

/// Longest response id kept; a longer one is not an engine's.
pub const MAX_ID_LEN: usize = 256;

impl ResponseHomes {
    /// Ids remembered at most.
    pub const CAPACITY: usize = 100_000;

    pub fn learn(&self, id: &str, home: Home) {
        if id.is_empty() || id.len() > MAX_ID_LEN {
            return;
        }
        let mut homes = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if homes.by_id.insert(id.into(), home).is_none() {
            homes.order.push_back(id.into());
        }
        while homes.order.len() > Self::CAPACITY {
            if let Some(oldest) = homes.order.pop_front() {
                homes.by_id.remove(&oldest);
            }
        }
    }

    pub fn get(&self, id: &str) -> Option<Home> {
        let homes = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        homes.by_id.get(id).cloned()
    }

    /// Forgets `id` (its engine deleted it). Rare, so the eviction order
    /// is searched rather than indexed.
    pub fn forget(&self, id: &str) {
        let mut homes = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if homes.by_id.remove(id).is_some() {
            homes.order.retain(|kept| &**kept != id);
        }
    }

    pub fn len(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .by_id
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The response id an answer starts with: the first `"id":"…"` of the
/// first body chunk, which is the response's own in vLLM's and SGLang's
/// JSON (`{"id":"resp_…"`) and in their stream's first event
/// (`response.created`, whose `response` object leads with it).
pub fn id_in(chunk: &[u8]) -> Option<&str> {
    const KEY: &[u8] = b"\"id\"";
    let at = chunk.windows(KEY.len()).position(|w| w == KEY)?;
    let rest = chunk[at + KEY.len()..].trim_ascii_start();
    let rest = rest.strip_prefix(b":")?.trim_ascii_start();
    let rest = rest.strip_prefix(b"\"")?;
    let end = rest.iter().take(MAX_ID_LEN + 1).position(|&b| b == b'"')?;
    let id = std::str::from_utf8(&rest[..end]).ok()?;
    (!id.is_empty() && id.bytes().all(|b| b.is_ascii_graphic() && b != b'\\')).then_some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn home(provider: &str) -> Home {
        Home {
            provider: provider.into(),
            upstream_model: "m".into(),
            model: "chat".into(),
        }
    }

    #[test]
    fn the_id_is_read_from_an_answer_and_a_streams_first_event() {
        assert_eq!(
            id_in(br#"{"id":"resp-1","object":"response"}"#),
            Some("resp-1")
        );
        assert_eq!(
            id_in(b"event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\" : \"resp_2\",\"object\":\"response\"}}\n\n"),
            Some("resp_2")
        );
        assert_eq!(id_in(br#"{"object":"response"}"#), None);
        assert_eq!(id_in(br#"{"id":42}"#), None);
        assert_eq!(
            id_in(br#"{"id":"has\"quote"}"#),
            None,
            "an escaped id is not an engine's"
        );
        let long = format!(r#"{{"id":"{}"}}"#, "x".repeat(MAX_ID_LEN + 1));
        assert_eq!(id_in(long.as_bytes()), None);
    }

    #[test]
    fn homes_are_bounded_and_forgotten_on_delete() {
        let homes = ResponseHomes::default();
        homes.learn("a", home("p1"));
        assert_eq!(homes.get("a"), Some(home("p1")));
        homes.forget("a");
        assert_eq!(homes.get("a"), None);
        for i in 0..ResponseHomes::CAPACITY + 10 {
            homes.learn(&format!("r{i}"), home("p2"));
        }
        assert_eq!(homes.len(), ResponseHomes::CAPACITY);
        assert_eq!(homes.get("r0"), None, "the oldest went first");
        assert!(homes
            .get(&format!("r{}", ResponseHomes::CAPACITY + 9))
            .is_some());
        homes.learn("", home("p3"));
        homes.learn(&"x".repeat(MAX_ID_LEN + 1), home("p3"));
        assert_eq!(homes.len(), ResponseHomes::CAPACITY);
    }
}
