//! vLLM's msgpack encoding of a KV-event batch, in the forms real builds send
//! (see the shared wire-formats spec).
//!
//! vLLM encodes with msgspec: the batch is `[ts, events, data_parallel_rank]`
//! (array form) or `{"ts", "events", "data_parallel_rank"}` (map form); an
//! event is tagged, `["BlockStored", …fields]` or `{"type": "BlockStored",
//! …fields}`, with fields that equal their default left out (`lora_name`,
//! which is always nil here). Required optional fields (`parent_block_hash`,
//! `lora_id`) are sent as nil. A block hash is a u64, a negative i64 or a
//! 32-byte string, as different builds send them.

use rmpv::Value;
use sha2::{Digest, Sha256};

use super::cache::KvEvent;
use crate::args::{KvEncoding, KvHashEncoding};

/// The storage medium every event names.
const MEDIUM: &str = "GPU";

/// How batches are encoded; fixed for the life of the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WireFormat {
    pub(crate) encoding: KvEncoding,
    pub(crate) hashes: KvHashEncoding,
    pub(crate) data_parallel_rank: u32,
}

impl WireFormat {
    /// The msgpack payload of one batch of events taken at `ts` (Unix seconds).
    pub(crate) fn encode_batch(&self, ts: f64, events: &[KvEvent]) -> Vec<u8> {
        let events = Value::Array(events.iter().map(|event| self.event(event)).collect());
        let rank = Value::from(self.data_parallel_rank);
        let batch = match self.encoding {
            KvEncoding::Array => Value::Array(vec![Value::F64(ts), events, rank]),
            KvEncoding::Map => Value::Map(vec![
                (Value::from("ts"), Value::F64(ts)),
                (Value::from("events"), events),
                (Value::from("data_parallel_rank"), rank),
            ]),
        };
        let mut payload = Vec::new();
        // Writing to a Vec cannot fail.
        if let Err(err) = rmpv::encode::write_value(&mut payload, &batch) {
            log::error!("fake-llm: cannot encode a KV-event batch: {err}");
        }
        payload
    }

    fn event(&self, event: &KvEvent) -> Value {
        let (tag, fields): (&str, Vec<(&str, Value)>) = match event {
            KvEvent::BlockStored {
                block_hashes,
                parent_block_hash,
                token_ids,
                block_size,
            } => (
                "BlockStored",
                vec![
                    ("block_hashes", self.hashes(block_hashes)),
                    (
                        "parent_block_hash",
                        parent_block_hash.map_or(Value::Nil, |hash| self.hash(hash)),
                    ),
                    (
                        "token_ids",
                        Value::Array(token_ids.iter().map(|id| Value::from(*id)).collect()),
                    ),
                    ("block_size", Value::from(*block_size)),
                    ("lora_id", Value::Nil),
                    ("medium", Value::from(MEDIUM)),
                ],
            ),
            KvEvent::BlockRemoved { block_hashes } => (
                "BlockRemoved",
                vec![
                    ("block_hashes", self.hashes(block_hashes)),
                    ("medium", Value::from(MEDIUM)),
                ],
            ),
            KvEvent::AllBlocksCleared => ("AllBlocksCleared", Vec::new()),
        };
        match self.encoding {
            KvEncoding::Array => Value::Array(
                std::iter::once(Value::from(tag))
                    .chain(fields.into_iter().map(|(_, value)| value))
                    .collect(),
            ),
            KvEncoding::Map => Value::Map(
                std::iter::once((Value::from("type"), Value::from(tag)))
                    .chain(
                        fields
                            .into_iter()
                            .map(|(name, value)| (Value::from(name), value)),
                    )
                    .collect(),
            ),
        }
    }

    fn hashes(&self, hashes: &[u64]) -> Value {
        Value::Array(hashes.iter().map(|hash| self.hash(*hash)).collect())
    }

    /// One block hash on the wire: `i64` sets the top bit so that every hash
    /// is negative (the case a consumer must not mishandle); `bytes` is the
    /// SHA-256 of the hash, as builds hashing with sha256 send a digest.
    fn hash(&self, hash: u64) -> Value {
        match self.hashes {
            KvHashEncoding::U64 => Value::from(hash),
            KvHashEncoding::I64 => Value::from((hash | 1 << 63) as i64),
            KvHashEncoding::Bytes => Value::Binary(Sha256::digest(hash.to_be_bytes()).to_vec()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(payload: &[u8]) -> Value {
        rmpv::decode::read_value(&mut &payload[..]).unwrap_or(Value::Nil)
    }

    fn events() -> Vec<KvEvent> {
        vec![
            KvEvent::BlockRemoved {
                block_hashes: vec![5],
            },
            KvEvent::BlockStored {
                block_hashes: vec![u64::MAX, 2],
                parent_block_hash: None,
                token_ids: vec![1, 2, 3, 4],
                block_size: 2,
            },
            KvEvent::AllBlocksCleared,
        ]
    }

    #[test]
    fn array_form_is_msgspec_array_like() {
        let format = WireFormat {
            encoding: KvEncoding::Array,
            hashes: KvHashEncoding::U64,
            data_parallel_rank: 3,
        };
        let batch = decode(&format.encode_batch(1.5, &events()));
        let expected = Value::Array(vec![
            Value::F64(1.5),
            Value::Array(vec![
                Value::Array(vec![
                    "BlockRemoved".into(),
                    Value::Array(vec![5u64.into()]),
                    "GPU".into(),
                ]),
                Value::Array(vec![
                    "BlockStored".into(),
                    Value::Array(vec![u64::MAX.into(), 2u64.into()]),
                    Value::Nil,
                    Value::Array(vec![1u32.into(), 2u32.into(), 3u32.into(), 4u32.into()]),
                    2u32.into(),
                    Value::Nil,
                    "GPU".into(),
                ]),
                Value::Array(vec!["AllBlocksCleared".into()]),
            ]),
            3u32.into(),
        ]);
        assert_eq!(batch, expected);
    }

    #[test]
    fn map_form_tags_events_with_type() {
        let format = WireFormat {
            encoding: KvEncoding::Map,
            hashes: KvHashEncoding::I64,
            data_parallel_rank: 0,
        };
        let batch = decode(&format.encode_batch(2.0, &events()));
        let field = |map: &Value, name: &str| {
            map.as_map()
                .and_then(|entries| entries.iter().find(|(key, _)| key.as_str() == Some(name)))
                .map(|(_, value)| value.clone())
        };
        assert_eq!(field(&batch, "ts"), Some(Value::F64(2.0)));
        assert_eq!(field(&batch, "data_parallel_rank"), Some(0u32.into()));
        let events = field(&batch, "events")
            .and_then(|e| e.as_array().cloned())
            .unwrap_or_default();
        assert_eq!(events.len(), 3);
        assert_eq!(field(&events[1], "type"), Some("BlockStored".into()));
        let keys: Vec<&str> = events[1]
            .as_map()
            .map(|m| m.iter().filter_map(|(k, _)| k.as_str()).collect())
            .unwrap_or_default();
        assert_eq!(keys, crate::kv::VLLM_BLOCK_STORED_FIELDS);
        let hashes = field(&events[1], "block_hashes")
            .and_then(|h| h.as_array().cloned())
            .unwrap_or_default();
        assert!(
            hashes.iter().all(|h| h.as_i64().is_some_and(|h| h < 0)),
            "{hashes:?}"
        );
        assert_eq!(hashes[1].as_i64(), Some(i64::MIN + 2));
        assert_eq!(
            events[2],
            Value::Map(vec![("type".into(), "AllBlocksCleared".into())])
        );
    }

    #[test]
    fn byte_hashes_are_32_byte_strings() {
        let format = WireFormat {
            encoding: KvEncoding::Array,
            hashes: KvHashEncoding::Bytes,
            data_parallel_rank: 0,
        };
        let batch = decode(&format.encode_batch(0.0, &events()[..1]));
        let hash = &batch[1][0][1][0];
        assert_eq!(hash.as_slice().map(<[u8]>::len), Some(32), "{batch:?}");
    }
}
