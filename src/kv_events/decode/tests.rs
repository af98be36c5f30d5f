//! Decoding against fixtures in every form the engines send, built with
//! rmpv (so the bytes are exactly what a msgpack encoder writes) and, for
//! the two shapes, assembled by hand byte by byte.

use bytes::Bytes;
use rmpv::Value;

use super::*;

pub(crate) fn encode(value: &Value) -> Vec<u8> {
    let mut bytes = Vec::new();
    rmpv::encode::write_value(&mut bytes, value).unwrap();
    bytes
}

fn s(text: &str) -> Value {
    Value::from(text)
}

fn ints(values: &[u64]) -> Value {
    Value::Array(values.iter().map(|&v| Value::from(v)).collect())
}

fn map(pairs: Vec<(&str, Value)>) -> Value {
    Value::Map(pairs.into_iter().map(|(k, v)| (s(k), v)).collect())
}

fn events(batch: &EventBatch) -> Vec<KvEvent> {
    batch
        .entries
        .iter()
        .filter_map(|entry| match entry {
            BatchEntry::Event(event) => Some(event.clone()),
            BatchEntry::Skipped(_) => None,
        })
        .collect()
}

fn skipped(batch: &EventBatch) -> Vec<Skipped> {
    batch
        .entries
        .iter()
        .filter_map(|entry| match entry {
            BatchEntry::Skipped(skipped) => Some(skipped.clone()),
            BatchEntry::Event(_) => None,
        })
        .collect()
}

fn only_event(payload: &[u8]) -> KvEvent {
    let batch = decode_batch(payload).unwrap();
    let mut events = events(&batch);
    assert_eq!(events.len(), 1, "{batch:?}");
    events.remove(0)
}

fn stored(block_hashes: &[u64], parent: Option<u64>, tokens: &[u32]) -> BlockStored {
    BlockStored::plain(block_hashes, parent, tokens, 2)
}

#[test]
fn array_batch_of_array_events_decodes_every_field() {
    // Older engines: both the batch and each event as arrays, every field.
    let payload = encode(&Value::Array(vec![
        Value::F64(1714000000.25),
        Value::Array(vec![
            Value::Array(vec![
                s("BlockStored"),
                ints(&[11, 12]),
                Value::from(10u64),
                ints(&[1, 2, 3, 4]),
                Value::from(2u64),
                Value::from(7i64),
                s("CPU"),
                s("sql-adapter"),
                Value::Array(vec![
                    Value::Nil,
                    Value::Array(vec![s("img"), Value::from(3)]),
                ]),
                Value::from(1u64),
            ]),
            Value::Array(vec![s("BlockRemoved"), ints(&[12]), s("GPU")]),
            Value::Array(vec![s("AllBlocksCleared")]),
        ]),
        Value::from(3u64),
    ]));
    let batch = decode_batch(&payload).unwrap();
    assert_eq!(batch.ts, 1714000000.25);
    assert_eq!(batch.data_parallel_rank, Some(3));
    let got = events(&batch);
    let KvEvent::BlockStored(first) = &got[0] else {
        panic!("{got:?}")
    };
    assert_eq!(first.block_hashes, [EngineBlockId(11), EngineBlockId(12)]);
    assert_eq!(first.parent_block_hash, Some(EngineBlockId(10)));
    assert_eq!(first.token_ids, [1, 2, 3, 4]);
    assert_eq!(first.block_size, Some(2));
    assert_eq!(first.lora_id, Some(7));
    assert_eq!(first.medium, Medium::Cpu);
    assert_eq!(first.lora_name.as_deref(), Some("sql-adapter"));
    let extra = first.extra_keys.as_ref().unwrap();
    assert_eq!(extra.len(), 2);
    assert_eq!(extra[0], None);
    assert!(extra[1].is_some());
    assert_eq!(first.group_idx, Some(1));
    assert_eq!(
        got[1],
        KvEvent::BlockRemoved(BlockRemoved {
            block_hashes: vec![EngineBlockId(12)],
            medium: Medium::Gpu,
            group_idx: None,
            remaining_copy_counts: None,
        })
    );
    assert_eq!(got[2], KvEvent::AllBlocksCleared);
}

#[test]
fn array_batch_of_map_events_decodes_with_defaults() {
    // Current engines (vLLM 0.33): batch array, events as maps with the
    // default fields omitted; the batch has no rank.
    let payload = encode(&Value::Array(vec![
        Value::F64(2.5),
        Value::Array(vec![
            map(vec![
                ("type", s("BlockStored")),
                ("block_hashes", ints(&[1, 2])),
                ("parent_block_hash", Value::Nil),
                ("token_ids", ints(&[5, 6, 7, 8])),
                ("block_size", Value::from(2)),
                ("lora_id", Value::Nil),
                ("medium", s("GPU")),
                ("lora_name", Value::Nil),
            ]),
            map(vec![
                ("type", s("BlockRemoved")),
                ("block_hashes", ints(&[2])),
            ]),
            map(vec![("type", s("AllBlocksCleared"))]),
        ]),
    ]));
    let batch = decode_batch(&payload).unwrap();
    assert_eq!(batch.data_parallel_rank, None);
    assert_eq!(
        events(&batch),
        [
            KvEvent::BlockStored(stored(&[1, 2], None, &[5, 6, 7, 8])),
            KvEvent::BlockRemoved(BlockRemoved {
                block_hashes: vec![EngineBlockId(2)],
                medium: Medium::Gpu,
                group_idx: None,
                remaining_copy_counts: None,
            }),
            KvEvent::AllBlocksCleared,
        ]
    );
}

#[test]
fn map_batch_decodes_like_the_array_batch() {
    let event = Value::Array(vec![
        s("BlockStored"),
        ints(&[1, 2]),
        Value::Nil,
        ints(&[5, 6, 7, 8]),
        Value::from(2),
    ]);
    let as_map = decode_batch(&encode(&map(vec![
        ("ts", Value::F64(9.0)),
        ("events", Value::Array(vec![event.clone()])),
        ("data_parallel_rank", Value::from(1)),
    ])))
    .unwrap();
    let as_array = decode_batch(&encode(&Value::Array(vec![
        Value::F64(9.0),
        Value::Array(vec![event]),
        Value::from(1),
    ])))
    .unwrap();
    assert_eq!(as_map, as_array);
    assert_eq!(as_map.data_parallel_rank, Some(1));
    // Keys in any order, ts as an integer, rank nil.
    let reordered = decode_batch(&encode(&map(vec![
        ("data_parallel_rank", Value::Nil),
        ("events", Value::Array(vec![])),
        ("ts", Value::from(3)),
    ])))
    .unwrap();
    assert_eq!(reordered.ts, 3.0);
    assert_eq!(reordered.data_parallel_rank, None);
    assert!(reordered.entries.is_empty());
}

#[test]
fn trailing_default_fields_may_be_omitted_in_the_array_form() {
    let event = only_event(&encode(&Value::Array(vec![
        Value::F64(0.0),
        Value::Array(vec![Value::Array(vec![
            s("BlockStored"),
            ints(&[1]),
            Value::Nil,
            ints(&[5, 6]),
        ])]),
    ])));
    let KvEvent::BlockStored(event) = event else {
        panic!()
    };
    assert_eq!(event.block_size, None, "left to the configuration");
    assert_eq!(event.medium, Medium::Gpu);
    assert_eq!(event.lora_name, None);
    assert_eq!(event.extra_keys, None);
    // A removal with only its hashes.
    let removed = only_event(&encode(&Value::Array(vec![
        Value::F64(0.0),
        Value::Array(vec![Value::Array(vec![s("BlockRemoved"), ints(&[1])])]),
    ])));
    assert!(matches!(removed, KvEvent::BlockRemoved(r) if r.medium == Medium::Gpu));
    // The parent may be left out of a map.
    let event = only_event(&encode(&Value::Array(vec![
        Value::F64(0.0),
        Value::Array(vec![map(vec![
            ("type", s("BlockStored")),
            ("block_hashes", ints(&[1])),
            ("token_ids", ints(&[5, 6])),
        ])]),
    ])));
    assert!(matches!(event, KvEvent::BlockStored(e) if e.parent_block_hash.is_none()));
}

#[test]
fn unknown_extra_fields_are_ignored() {
    let payload = encode(&Value::Array(vec![
        Value::F64(1.0),
        Value::Array(vec![
            // Array form with fields past group_idx (kv_cache_spec_kind,
            // sliding window, and something newer still).
            Value::Array(vec![
                s("BlockStored"),
                ints(&[1, 2]),
                Value::Nil,
                ints(&[5, 6, 7, 8]),
                Value::from(2),
                Value::Nil,
                Value::Nil,
                Value::Nil,
                Value::Nil,
                Value::Nil,
                s("full_attention"),
                Value::Nil,
                Value::Map(vec![]),
            ]),
            map(vec![
                ("type", s("BlockStored")),
                ("future_field", Value::Array(vec![Value::from(1)])),
                ("block_hashes", ints(&[1, 2])),
                ("token_ids", ints(&[5, 6, 7, 8])),
                ("block_size", Value::from(2)),
                ("kv_cache_spec_kind", s("sliding_window")),
            ]),
        ]),
        Value::Nil,
        s("a fourth batch field"),
    ]));
    let batch = decode_batch(&payload).unwrap();
    let expected = KvEvent::BlockStored(stored(&[1, 2], None, &[5, 6, 7, 8]));
    assert_eq!(events(&batch), [expected.clone(), expected]);
    assert!(skipped(&batch).is_empty());
    // A map batch with a key of its own.
    let batch = decode_batch(&encode(&map(vec![
        ("ts", Value::F64(1.0)),
        ("node", s("gpu-7")),
        (
            "events",
            Value::Array(vec![Value::Array(vec![s("AllBlocksCleared")])]),
        ),
    ])))
    .unwrap();
    assert_eq!(events(&batch), [KvEvent::AllBlocksCleared]);
}

#[test]
fn block_hashes_may_be_u64_negative_i64_or_bytes() {
    let sha = [0xabu8; 32];
    let payload = encode(&Value::Array(vec![
        Value::F64(0.0),
        Value::Array(vec![Value::Array(vec![
            s("BlockRemoved"),
            Value::Array(vec![
                Value::from(u64::MAX - 1),
                Value::from(-2i64),
                Value::from(5u64),
                Value::Binary(sha.to_vec()),
            ]),
            Value::Nil,
        ])]),
    ]));
    let KvEvent::BlockRemoved(removed) = only_event(&payload) else {
        panic!()
    };
    assert_eq!(removed.block_hashes[0], EngineBlockId(u64::MAX - 1));
    assert_eq!(
        removed.block_hashes[1],
        EngineBlockId(u64::MAX - 1),
        "-2 as an i64 is the same id as its u64 bit pattern"
    );
    assert_eq!(removed.block_hashes[2], EngineBlockId(5));
    assert_eq!(removed.block_hashes[3], EngineBlockId::from_bytes(&sha));
    assert_ne!(
        EngineBlockId::from_bytes(&sha),
        EngineBlockId::from_bytes(&[0xac; 32])
    );
    // Byte-string parents link the same way.
    let payload = encode(&Value::Array(vec![
        Value::F64(0.0),
        Value::Array(vec![Value::Array(vec![
            s("BlockStored"),
            Value::Array(vec![Value::Binary(vec![1; 32])]),
            Value::Binary(sha.to_vec()),
            ints(&[5, 6]),
            Value::from(2),
        ])]),
    ]));
    let KvEvent::BlockStored(event) = only_event(&payload) else {
        panic!()
    };
    assert_eq!(
        event.parent_block_hash,
        Some(EngineBlockId::from_bytes(&sha))
    );
}

#[test]
fn unknown_event_types_are_skipped_and_the_rest_of_the_batch_kept() {
    let payload = encode(&Value::Array(vec![
        Value::F64(0.0),
        Value::Array(vec![
            Value::Array(vec![s("BlockPinned"), ints(&[1])]),
            Value::Array(vec![s("AllBlocksCleared")]),
            map(vec![
                ("type", s("CacheResized")),
                ("blocks", Value::from(9)),
            ]),
        ]),
    ]));
    let batch = decode_batch(&payload).unwrap();
    assert_eq!(
        batch.entries,
        [
            BatchEntry::Skipped(Skipped::Unknown("BlockPinned".into())),
            BatchEntry::Event(KvEvent::AllBlocksCleared),
            BatchEntry::Skipped(Skipped::Unknown("CacheResized".into())),
        ]
    );
}

#[test]
fn malformed_events_are_skipped_with_their_kind() {
    let payload = encode(&Value::Array(vec![
        Value::F64(0.0),
        Value::Array(vec![
            Value::Array(vec![
                s("BlockStored"),
                s("not a list"),
                Value::Nil,
                ints(&[1]),
            ]),
            Value::Array(vec![
                s("BlockStored"),
                ints(&[1]),
                Value::Nil,
                ints(&[1, u64::from(u32::MAX) + 1]),
            ]),
            Value::Array(vec![s("BlockStored"), ints(&[1]), Value::Nil]),
            Value::Array(vec![
                s("BlockStored"),
                ints(&[1]),
                Value::F64(1.0),
                ints(&[1]),
            ]),
            Value::Array(vec![s("BlockRemoved"), Value::Array(vec![Value::F64(1.0)])]),
            Value::Array(vec![s("BlockRemoved")]),
            Value::Array(vec![Value::from(1), ints(&[1])]),
            map(vec![("block_hashes", ints(&[1]))]),
            Value::from(42),
            Value::Array(vec![s("AllBlocksCleared")]),
        ]),
    ]));
    let batch = decode_batch(&payload).unwrap();
    let kinds: Vec<Option<EventKind>> = skipped(&batch)
        .into_iter()
        .map(|skipped| match skipped {
            Skipped::Malformed { kind, .. } => kind,
            Skipped::Unknown(tag) => panic!("{tag} is not unknown"),
        })
        .collect();
    use EventKind::*;
    assert_eq!(
        kinds,
        [
            Some(BlockStored),
            Some(BlockStored),
            Some(BlockStored),
            Some(BlockStored),
            Some(BlockRemoved),
            Some(BlockRemoved),
            None,
            None,
            None,
        ]
    );
    assert_eq!(
        events(&batch),
        [KvEvent::AllBlocksCleared],
        "the rest still applies"
    );
}

#[test]
fn extra_keys_must_name_each_block() {
    let with_extra = |extra: Value| {
        encode(&Value::Array(vec![
            Value::F64(0.0),
            Value::Array(vec![map(vec![
                ("type", s("BlockStored")),
                ("block_hashes", ints(&[1, 2])),
                ("token_ids", ints(&[1, 2, 3, 4])),
                ("extra_keys", extra),
            ])]),
        ]))
    };
    let salted = Value::Array(vec![Value::Array(vec![s("salt")]), Value::Nil]);
    let KvEvent::BlockStored(event) = only_event(&with_extra(salted)) else {
        panic!()
    };
    let keys = event.extra_keys.unwrap();
    assert!(keys[0].is_some() && keys[1].is_none());
    // Different extra keys, different digests.
    let other = Value::Array(vec![Value::Array(vec![s("pepper")]), Value::Nil]);
    let KvEvent::BlockStored(event) = only_event(&with_extra(other)) else {
        panic!()
    };
    assert_ne!(event.extra_keys.unwrap()[0], keys[0]);
    // One entry for two blocks cannot be placed.
    let batch = decode_batch(&with_extra(Value::Array(vec![Value::Nil]))).unwrap();
    assert!(matches!(
        skipped(&batch)[..],
        [Skipped::Malformed {
            kind: Some(EventKind::BlockStored),
            ..
        }]
    ));
}

#[test]
fn removals_carry_group_and_remaining_copies() {
    let KvEvent::BlockRemoved(removed) = only_event(&encode(&Value::Array(vec![
        Value::F64(0.0),
        Value::Array(vec![map(vec![
            ("type", s("BlockRemoved")),
            ("block_hashes", ints(&[1, 2])),
            ("medium", s("cpu")),
            ("group_idx", Value::from(1)),
            ("remaining_copy_counts", ints(&[0, 1])),
        ])]),
    ]))) else {
        panic!()
    };
    assert_eq!(removed.medium, Medium::Cpu);
    assert_eq!(removed.group_idx, Some(1));
    assert_eq!(removed.remaining_copy_counts, Some(vec![0, 1]));
}

#[test]
fn media_decode_by_name() {
    assert_eq!(medium(Some(&s("STORAGE"))), Medium::Storage);
    assert_eq!(medium(Some(&s("NVME"))), Medium::Other);
    assert_eq!(medium(None), Medium::Gpu);
}

#[test]
fn unreadable_batches_are_errors() {
    assert!(decode_batch(b"\xc1").is_err(), "a reserved marker");
    assert!(matches!(
        decode_batch(b"\x92\xcb"),
        Err(DecodeError::Msgpack(_))
    ));
    assert!(matches!(decode_batch(b""), Err(DecodeError::Msgpack(_))));
    assert_eq!(
        decode_batch(&encode(&Value::from(7))),
        Err(DecodeError::BatchShape("an integer"))
    );
    assert_eq!(
        decode_batch(&encode(&Value::Array(vec![Value::F64(0.0)]))),
        Err(DecodeError::NoEvents)
    );
    assert_eq!(
        decode_batch(&encode(&map(vec![("ts", Value::F64(0.0))]))),
        Err(DecodeError::NoEvents)
    );
    let mut trailing = encode(&Value::Array(vec![Value::F64(0.0), Value::Array(vec![])]));
    trailing.push(0xc0);
    assert_eq!(decode_batch(&trailing), Err(DecodeError::TrailingBytes(1)));
    // Nesting beyond the bound is refused rather than recursed into.
    let mut deep = Value::Nil;
    for _ in 0..100 {
        deep = Value::Array(vec![deep]);
    }
    let nested = encode(&Value::Array(vec![
        Value::F64(0.0),
        Value::Array(vec![deep]),
    ]));
    assert!(matches!(
        decode_batch(&nested),
        Err(DecodeError::Msgpack(_))
    ));
}

#[test]
fn hand_assembled_bytes_decode() {
    // [1.5, [["AllBlocksCleared"]]] as msgspec writes it.
    let mut cleared = vec![0x92, 0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0, 0x91, 0x91, 0xb0];
    cleared.extend_from_slice(b"AllBlocksCleared");
    let batch = decode_batch(&cleared).unwrap();
    assert_eq!(batch.ts, 1.5);
    assert_eq!(events(&batch), [KvEvent::AllBlocksCleared]);
    // [0.0, [{"type": "BlockStored", "block_hashes": [-1], "token_ids": [1, 2]}], 0]
    let mut stored_map = vec![0x93, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x91, 0x83];
    stored_map.extend_from_slice(&[0xa4]);
    stored_map.extend_from_slice(b"type");
    stored_map.extend_from_slice(&[0xab]);
    stored_map.extend_from_slice(b"BlockStored");
    stored_map.extend_from_slice(&[0xac]);
    stored_map.extend_from_slice(b"block_hashes");
    stored_map.extend_from_slice(&[0x91, 0xff]); // [-1] as a negative fixint
    stored_map.extend_from_slice(&[0xa9]);
    stored_map.extend_from_slice(b"token_ids");
    stored_map.extend_from_slice(&[0x92, 0x01, 0x02, 0x00]);
    let batch = decode_batch(&stored_map).unwrap();
    assert_eq!(batch.data_parallel_rank, Some(0));
    let KvEvent::BlockStored(event) = &events(&batch)[0] else {
        panic!()
    };
    assert_eq!(event.block_hashes, [EngineBlockId(u64::MAX)]);
    assert_eq!(event.token_ids, [1, 2]);
    // The same batch built with rmpv is the same bytes.
    let built = encode(&Value::Array(vec![
        Value::F64(0.0),
        Value::Array(vec![map(vec![
            ("type", s("BlockStored")),
            ("block_hashes", Value::Array(vec![Value::from(-1)])),
            ("token_ids", ints(&[1, 2])),
        ])]),
        Value::from(0),
    ]));
    assert_eq!(built, stored_map);
}

#[test]
fn live_messages_have_three_frames() {
    let frames = [
        Bytes::from_static(b"kv@gpu-a"),
        Bytes::copy_from_slice(&258u64.to_be_bytes()),
        Bytes::from_static(b"payload"),
    ];
    let message = split_live(&frames).unwrap();
    assert_eq!(message.topic, "kv@gpu-a");
    assert_eq!(message.seq, 258);
    assert_eq!(&message.payload[..], b"payload");
    assert!(matches!(
        split_live(&frames[..2]),
        Err(DecodeError::FrameCount { got: 2, .. })
    ));
    let short_seq = [
        frames[0].clone(),
        Bytes::from_static(b"\x01"),
        frames[2].clone(),
    ];
    assert_eq!(split_live(&short_seq), Err(DecodeError::SeqLength(1)));
    let bad_topic = [
        Bytes::from_static(b"\xff"),
        frames[1].clone(),
        frames[2].clone(),
    ];
    assert_eq!(split_live(&bad_topic), Err(DecodeError::Topic));
}

#[test]
fn replay_replies_come_in_both_forms() {
    let seq = |n: u64| Bytes::copy_from_slice(&n.to_be_bytes());
    let end = Bytes::copy_from_slice(&(-1i64).to_be_bytes());
    let empty = Bytes::new();
    let payload = Bytes::from_static(b"p");
    // Older engines: ["", seq, payload], ended by ["", -1, ""].
    assert_eq!(
        parse_replay_reply(&[empty.clone(), seq(4), payload.clone()]),
        Ok(ReplayReply::Batch {
            seq: 4,
            payload: payload.clone()
        })
    );
    assert_eq!(
        parse_replay_reply(&[empty.clone(), end.clone(), empty.clone()]),
        Ok(ReplayReply::End)
    );
    // Current ones: ["", topic, seq, payload], ended by ["", "", -1, ""].
    assert_eq!(
        parse_replay_reply(&[
            empty.clone(),
            Bytes::from_static(b"kv"),
            seq(5),
            payload.clone()
        ]),
        Ok(ReplayReply::Batch { seq: 5, payload })
    );
    assert_eq!(
        parse_replay_reply(&[empty.clone(), empty.clone(), end, empty.clone()]),
        Ok(ReplayReply::End)
    );
    // No delimiter, or too few frames.
    assert!(parse_replay_reply(&[seq(1), Bytes::from_static(b"p"), empty.clone()]).is_err());
    assert!(parse_replay_reply(&[empty.clone(), seq(1)]).is_err());
    assert_eq!(
        replay_request(7),
        [
            Bytes::new(),
            Bytes::copy_from_slice(&[0, 0, 0, 0, 0, 0, 0, 7])
        ]
    );
}
