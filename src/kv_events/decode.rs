//! vLLM's KV-event wire format, decoded (docs/design/wire-formats.md, "vLLM KV-cache
//! events").
//!
//! A live message has three frames: topic (UTF-8), seq (8 bytes, unsigned
//! big-endian) and a msgpack payload. The payload is an event batch, an
//! array `[ts, events, data_parallel_rank?]` (older and current engines) or
//! a map `{ts, events, data_parallel_rank}` (some newer ones). Each event is
//! a tagged struct, msgspec's encoding of vLLM's `KVCacheEvent`s: an array
//! `["BlockStored", block_hashes, parent_block_hash, token_ids, ...]` with
//! trailing default fields omitted (older engines), or a map `{"type":
//! "BlockStored", "block_hashes": ..., ...}` with default fields omitted
//! (current ones). Every form is accepted; unknown extra fields are
//! ignored and missing optional ones defaulted.
//!
//! Robustness: a batch that cannot be read is an error ([`DecodeError`]);
//! inside a readable batch an event of an unknown type, or one that cannot
//! be read, becomes a [`Skipped`] entry in its place, so the rest of the
//! batch still applies and the index can tell which kind was lost.

use bytes::Bytes;
use rmpv::Value;
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// How deeply msgpack may nest in a payload. A batch nests four levels
/// (batch, events, event, block hashes); extra keys are tuples that may
/// hold a few more. Bounds the decoder's recursion on hostile input.
pub const MAX_PAYLOAD_DEPTH: usize = 16;

/// The longest event type name kept for logs when the type is unknown.
const MAX_TAG_CHARS: usize = 64;

/// Seeds the digest of a byte-string block hash, so it is a fixed function
/// of the bytes.
const BYTES_HASH_SEED: u64 = 0x6b76_2d62_6c6f_636b; // "kv-block"
/// Seeds the digest of a block's extra keys.
const EXTRA_KEYS_SEED: u64 = 0x6b76_2d65_7874_7261; // "kv-extra"

/// Why a message or batch could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("expected {expected} frames, got {got}")]
    FrameCount { expected: &'static str, got: usize },
    #[error("the topic frame is not UTF-8")]
    Topic,
    #[error("the seq frame has {0} bytes, not 8")]
    SeqLength(usize),
    #[error("the payload is not msgpack: {0}")]
    Msgpack(String),
    #[error("the payload has {0} bytes after the batch")]
    TrailingBytes(usize),
    #[error("the batch is {0}, not an array or a map")]
    BatchShape(&'static str),
    #[error("the batch has no events list")]
    NoEvents,
}

/// A live message: topic, sequence number, payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveMessage<'a> {
    pub topic: &'a str,
    pub seq: u64,
    pub payload: &'a Bytes,
}

/// Splits a live message into its three frames.
pub fn split_live(frames: &[Bytes]) -> Result<LiveMessage<'_>, DecodeError> {
    let [topic, seq, payload] = frames else {
        return Err(DecodeError::FrameCount {
            expected: "3 (topic, seq, payload)",
            got: frames.len(),
        });
    };
    let topic = std::str::from_utf8(topic).map_err(|_| DecodeError::Topic)?;
    Ok(LiveMessage {
        topic,
        seq: be_u64(seq)?,
        payload,
    })
}

/// One message of a replay answer, as a DEALER receives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplayReply {
    /// A buffered batch.
    Batch { seq: u64, payload: Bytes },
    /// The end marker (seq -1): nothing more follows.
    End,
}

/// The seq of a replay end marker: -1 as a signed 8-byte big-endian integer.
pub const REPLAY_END_SEQ: u64 = u64::MAX;

/// Reads one replay answer: `["", seq, payload]` (older engines) or `["",
/// topic, seq, payload]` (current ones), ended by `["", -1, ""]` or `["",
/// "", -1, ""]`.
pub fn parse_replay_reply(frames: &[Bytes]) -> Result<ReplayReply, DecodeError> {
    let (seq, payload) = match frames {
        [delimiter, seq, payload] if delimiter.is_empty() => (seq, payload),
        [delimiter, _topic, seq, payload] if delimiter.is_empty() => (seq, payload),
        _ => {
            return Err(DecodeError::FrameCount {
                expected: "3 or 4 starting with an empty frame",
                got: frames.len(),
            })
        }
    };
    match be_u64(seq)? {
        REPLAY_END_SEQ => Ok(ReplayReply::End),
        seq => Ok(ReplayReply::Batch {
            seq,
            payload: payload.clone(),
        }),
    }
}

/// The request a replay client sends: `["", start_seq]`.
pub fn replay_request(start_seq: u64) -> Vec<Bytes> {
    vec![
        Bytes::new(),
        Bytes::copy_from_slice(&start_seq.to_be_bytes()),
    ]
}

fn be_u64(frame: &[u8]) -> Result<u64, DecodeError> {
    let bytes: [u8; 8] = frame
        .try_into()
        .map_err(|_| DecodeError::SeqLength(frame.len()))?;
    Ok(u64::from_be_bytes(bytes))
}

/// A block as the engine names it: its hash, an opaque id. Integers (u64,
/// or i64 taken as its bit pattern) are kept as they are; byte strings are
/// reduced to a 64-bit xxh3 digest. One engine uses one form, so the two
/// never need telling apart; two distinct byte hashes of one engine collide
/// with odds of about n²/2⁶⁵ (3·10⁻⁸ for a million blocks).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EngineBlockId(pub u64);

impl EngineBlockId {
    pub fn from_bytes(bytes: &[u8]) -> Self {
        EngineBlockId(xxh3_64_with_seed(bytes, BYTES_HASH_SEED))
    }
}

/// Where the engine keeps a block. `nil` (engines from before the field,
/// and current ones for the GPU cache) is the GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Medium {
    Gpu,
    Cpu,
    Storage,
    /// A medium this version does not know.
    Other,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockStored {
    /// The engine's hashes of the stored blocks, in chain order.
    pub block_hashes: Vec<EngineBlockId>,
    /// The block the first stored block follows; `None` starts at the root.
    pub parent_block_hash: Option<EngineBlockId>,
    /// The tokens of all the stored blocks, concatenated.
    pub token_ids: Vec<u32>,
    /// The engine's block size; `None` when the event leaves it out.
    pub block_size: Option<usize>,
    /// Deprecated numeric LoRA id.
    pub lora_id: Option<i64>,
    pub medium: Medium,
    pub lora_name: Option<String>,
    /// Per stored block, a digest of the engine's extra keys (multimodal
    /// inputs, cache salt) when the block has any. A request's token ids
    /// cannot reproduce them, so such blocks (and their descendants) must
    /// never match a plain request.
    pub extra_keys: Option<Vec<Option<u64>>>,
    /// KV-cache group of hybrid models; `None` is group 0.
    pub group_idx: Option<i64>,
}

#[cfg(test)]
impl BlockStored {
    /// Blocks `hashes` stored on the GPU after `parent`, of `block_size`
    /// tokens each, with nothing else set: the event most tests feed.
    pub(crate) fn plain(
        hashes: &[u64],
        parent: Option<u64>,
        token_ids: &[u32],
        block_size: usize,
    ) -> Self {
        BlockStored {
            block_hashes: hashes.iter().map(|&h| EngineBlockId(h)).collect(),
            parent_block_hash: parent.map(EngineBlockId),
            token_ids: token_ids.to_vec(),
            block_size: Some(block_size),
            lora_id: None,
            medium: Medium::Gpu,
            lora_name: None,
            extra_keys: None,
            group_idx: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockRemoved {
    pub block_hashes: Vec<EngineBlockId>,
    pub medium: Medium,
    pub group_idx: Option<i64>,
    /// Copies of each block the medium still holds (newer engines); a block
    /// with copies left stays resident.
    pub remaining_copy_counts: Option<Vec<u64>>,
}

/// An event's type, for counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    BlockStored,
    BlockRemoved,
    AllBlocksCleared,
}

impl EventKind {
    fn from_tag(tag: &str) -> Option<EventKind> {
        match tag {
            "BlockStored" => Some(EventKind::BlockStored),
            "BlockRemoved" => Some(EventKind::BlockRemoved),
            "AllBlocksCleared" => Some(EventKind::AllBlocksCleared),
            _ => None,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            EventKind::BlockStored => "block_stored",
            EventKind::BlockRemoved => "block_removed",
            EventKind::AllBlocksCleared => "all_blocks_cleared",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvEvent {
    BlockStored(BlockStored),
    BlockRemoved(BlockRemoved),
    AllBlocksCleared,
}

impl KvEvent {
    pub fn kind(&self) -> EventKind {
        match self {
            KvEvent::BlockStored(_) => EventKind::BlockStored,
            KvEvent::BlockRemoved(_) => EventKind::BlockRemoved,
            KvEvent::AllBlocksCleared => EventKind::AllBlocksCleared,
        }
    }
}

/// An event of a readable batch that was not decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skipped {
    /// A type this version does not know (its tag, bounded).
    Unknown(String),
    /// An event that could not be read; `kind` when its tag was readable.
    Malformed {
        kind: Option<EventKind>,
        reason: &'static str,
    },
}

/// One entry of a batch, in the order the engine sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchEntry {
    Event(KvEvent),
    Skipped(Skipped),
}

#[derive(Debug, Clone, PartialEq)]
pub struct EventBatch {
    /// The engine's wall clock, in seconds; 0 when absent.
    pub ts: f64,
    pub entries: Vec<BatchEntry>,
    /// The data-parallel rank the engine says it is (informational: the
    /// subscriber knows the rank from the port it listens on).
    pub data_parallel_rank: Option<i64>,
}

/// Decodes one payload.
pub fn decode_batch(payload: &[u8]) -> Result<EventBatch, DecodeError> {
    let mut reader = payload;
    let value = rmpv::decode::read_value_with_max_depth(&mut reader, MAX_PAYLOAD_DEPTH)
        .map_err(|e| DecodeError::Msgpack(e.to_string()))?;
    if !reader.is_empty() {
        return Err(DecodeError::TrailingBytes(reader.len()));
    }
    let fields = match &value {
        Value::Array(items) => Fields::Array(items),
        Value::Map(pairs) => Fields::Map(pairs),
        other => return Err(DecodeError::BatchShape(shape(other))),
    };
    // Positions 0.. in the array form (no tag in a batch).
    let ts = match fields.get(0, "ts") {
        Some(Value::F64(ts)) => *ts,
        Some(Value::F32(ts)) => f64::from(*ts),
        Some(Value::Integer(ts)) => ts.as_f64().unwrap_or(0.0),
        _ => 0.0,
    };
    let Some(Value::Array(events)) = fields.get(1, "events") else {
        return Err(DecodeError::NoEvents);
    };
    let data_parallel_rank = fields.get(2, "data_parallel_rank").and_then(Value::as_i64);
    Ok(EventBatch {
        ts,
        entries: events.iter().map(decode_event).collect(),
        data_parallel_rank,
    })
}

fn shape(value: &Value) -> &'static str {
    match value {
        Value::Nil => "nil",
        Value::Boolean(_) => "a boolean",
        Value::Integer(_) => "an integer",
        Value::F32(_) | Value::F64(_) => "a float",
        Value::String(_) => "a string",
        Value::Binary(_) => "binary",
        Value::Array(_) => "an array",
        Value::Map(_) => "a map",
        Value::Ext(..) => "an extension",
    }
}

/// A struct's fields, by position (array form) or by name (map form).
#[derive(Clone, Copy)]
enum Fields<'a> {
    Array(&'a [Value]),
    Map(&'a [(Value, Value)]),
}

impl<'a> Fields<'a> {
    /// The field, `None` when absent or nil (both mean "default").
    fn get(self, position: usize, name: &str) -> Option<&'a Value> {
        let value = match self {
            Fields::Array(items) => items.get(position),
            Fields::Map(pairs) => pairs
                .iter()
                .find(|(key, _)| key.as_str() == Some(name))
                .map(|(_, value)| value),
        };
        value.filter(|v| !v.is_nil())
    }
}

/// Decodes one event; never fails the batch.
fn decode_event(value: &Value) -> BatchEntry {
    let (fields, tag) = match value {
        Value::Array(items) => (Fields::Array(items), items.first()),
        Value::Map(pairs) => (
            Fields::Map(pairs),
            pairs
                .iter()
                .find(|(key, _)| key.as_str() == Some("type"))
                .map(|(_, tag)| tag),
        ),
        _ => return malformed(None, "an event is neither an array nor a map"),
    };
    let Some(tag) = tag.and_then(Value::as_str) else {
        return malformed(None, "an event has no type tag");
    };
    let Some(kind) = EventKind::from_tag(tag) else {
        return BatchEntry::Skipped(Skipped::Unknown(tag.chars().take(MAX_TAG_CHARS).collect()));
    };
    let event = match kind {
        EventKind::BlockStored => block_stored(fields).map(KvEvent::BlockStored),
        EventKind::BlockRemoved => block_removed(fields).map(KvEvent::BlockRemoved),
        EventKind::AllBlocksCleared => Ok(KvEvent::AllBlocksCleared),
    };
    match event {
        Ok(event) => BatchEntry::Event(event),
        Err(reason) => malformed(Some(kind), reason),
    }
}

fn malformed(kind: Option<EventKind>, reason: &'static str) -> BatchEntry {
    BatchEntry::Skipped(Skipped::Malformed { kind, reason })
}

fn block_stored(fields: Fields<'_>) -> Result<BlockStored, &'static str> {
    let block_hashes = block_hashes(fields.get(1, "block_hashes"))?;
    let parent_block_hash = fields
        .get(2, "parent_block_hash")
        .map(|v| engine_id(v).ok_or("parent_block_hash is not an integer or bytes"))
        .transpose()?;
    let token_ids = match fields.get(3, "token_ids") {
        Some(Value::Array(ids)) => ids
            .iter()
            .map(|id| id.as_u64().and_then(|id| u32::try_from(id).ok()))
            .collect::<Option<Vec<u32>>>()
            .ok_or("token_ids holds something other than u32 token ids")?,
        Some(_) => return Err("token_ids is not a list"),
        None => return Err("token_ids is missing"),
    };
    let block_size = fields
        .get(4, "block_size")
        .map(|v| {
            v.as_u64()
                .and_then(|size| usize::try_from(size).ok())
                .filter(|&size| size > 0)
                .ok_or("block_size is not a positive integer")
        })
        .transpose()?;
    let lora_id = fields.get(5, "lora_id").and_then(Value::as_i64);
    let medium = medium(fields.get(6, "medium"));
    let lora_name = fields
        .get(7, "lora_name")
        .and_then(Value::as_str)
        .map(str::to_string);
    let extra_keys = match fields.get(8, "extra_keys") {
        None => None,
        Some(Value::Array(per_block)) if per_block.len() == block_hashes.len() => Some(
            per_block
                .iter()
                .map(|keys| (!keys.is_nil()).then(|| digest(keys)))
                .collect(),
        ),
        Some(_) => return Err("extra_keys is not a list with one entry per block"),
    };
    let group_idx = fields.get(9, "group_idx").and_then(Value::as_i64);
    Ok(BlockStored {
        block_hashes,
        parent_block_hash,
        token_ids,
        block_size,
        lora_id,
        medium,
        lora_name,
        extra_keys,
        group_idx,
    })
}

fn block_removed(fields: Fields<'_>) -> Result<BlockRemoved, &'static str> {
    let block_hashes = block_hashes(fields.get(1, "block_hashes"))?;
    let medium = medium(fields.get(2, "medium"));
    let group_idx = fields.get(3, "group_idx").and_then(Value::as_i64);
    let remaining_copy_counts = match fields.get(4, "remaining_copy_counts") {
        None => None,
        Some(Value::Array(counts)) if counts.len() == block_hashes.len() => Some(
            counts
                .iter()
                .map(Value::as_u64)
                .collect::<Option<Vec<u64>>>()
                .ok_or("remaining_copy_counts holds something other than counts")?,
        ),
        Some(_) => return Err("remaining_copy_counts is not a list with one count per block"),
    };
    Ok(BlockRemoved {
        block_hashes,
        medium,
        group_idx,
        remaining_copy_counts,
    })
}

fn block_hashes(value: Option<&Value>) -> Result<Vec<EngineBlockId>, &'static str> {
    match value {
        Some(Value::Array(hashes)) => hashes
            .iter()
            .map(engine_id)
            .collect::<Option<Vec<_>>>()
            .ok_or("block_hashes holds something other than integers or bytes"),
        Some(_) => Err("block_hashes is not a list"),
        None => Err("block_hashes is missing"),
    }
}

/// An engine block hash: u64, negative i64 (its bit pattern) or bytes.
fn engine_id(value: &Value) -> Option<EngineBlockId> {
    match value {
        Value::Integer(n) => n
            .as_u64()
            .or_else(|| n.as_i64().map(|n| n as u64))
            .map(EngineBlockId),
        Value::Binary(bytes) => Some(EngineBlockId::from_bytes(bytes)),
        Value::String(text) => Some(EngineBlockId::from_bytes(text.as_bytes())),
        _ => None,
    }
}

fn medium(value: Option<&Value>) -> Medium {
    match value.and_then(Value::as_str) {
        None => Medium::Gpu,
        Some(name) if name.eq_ignore_ascii_case("gpu") => Medium::Gpu,
        Some(name) if name.eq_ignore_ascii_case("cpu") => Medium::Cpu,
        Some(name) if name.eq_ignore_ascii_case("storage") => Medium::Storage,
        Some(_) => Medium::Other,
    }
}

/// A fixed digest of a msgpack value (its canonical re-encoding).
fn digest(value: &Value) -> u64 {
    let mut bytes = Vec::new();
    // Writing to a Vec cannot fail.
    rmpv::encode::write_value(&mut bytes, value).expect("msgpack into a Vec");
    xxh3_64_with_seed(&bytes, EXTRA_KEYS_SEED)
}

#[cfg(test)]
mod tests;
