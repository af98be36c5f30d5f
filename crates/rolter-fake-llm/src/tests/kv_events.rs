//! The simulated prefix cache and its vLLM KV-event stream, end to end: a
//! real ZeroMQ SUB (live stream) and DEALER (replay) on loopback decode what
//! the engine publishes. Every receive has a deadline.
//!
//! A SUB socket's subscription reaches the publisher some time after it
//! connects (ZeroMQ's "slow joiner"), so [`Subscriber::join`] publishes
//! `AllBlocksCleared` batches until one arrives: after that gate nothing
//! published is missed.

use std::time::{Duration, Instant};

use bytes::Bytes;
use rmpv::Value as Msgpack;
use serde_json::{json, Value};
use zeromq::{DealerSocket, Socket, SocketRecv, SocketSend, SubSocket, ZmqMessage};

use super::TestEngine;
use crate::{FakeLlmArgs, KvEncoding, KvHashEncoding};

const END_SEQ: [u8; 8] = [0xFF; 8];

/// Args for an engine publishing on free loopback ports.
fn kv_args(replay: bool) -> FakeLlmArgs {
    FakeLlmArgs {
        kv_events: Some("tcp://127.0.0.1:0".into()),
        kv_replay: replay.then(|| "tcp://127.0.0.1:0".into()),
        kv_topic: "kv@engine-a".into(),
        block_size: 4,
        ..FakeLlmArgs::default()
    }
}

/// A live-stream subscriber past the slow-joiner gate.
struct Subscriber {
    socket: SubSocket,
    /// The seq of the last message received.
    last_seq: u64,
}

impl Subscriber {
    async fn join(engine: &TestEngine, endpoint: &str) -> Subscriber {
        let mut socket = SubSocket::new();
        socket.connect(endpoint).await.expect("connect SUB");
        socket.subscribe("kv@").await.expect("subscribe");
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut last_seq = None;
        while last_seq.is_none() && Instant::now() < deadline {
            engine.control(json!({"clear_cache": true})).await;
            if let Some(frames) = receive(&mut socket, Duration::from_millis(100)).await {
                last_seq = Some(seq_of(&frames[1]));
            }
        }
        // Gate batches still in flight.
        while let Some(frames) = receive(&mut socket, Duration::from_millis(150)).await {
            last_seq = Some(seq_of(&frames[1]));
        }
        Subscriber {
            socket,
            last_seq: last_seq.expect("the SUB socket never received a batch"),
        }
    }

    /// The next message, which must come within two seconds.
    async fn next(&mut self) -> Vec<Bytes> {
        let frames = receive(&mut self.socket, Duration::from_secs(2))
            .await
            .expect("no KV-event message within 2 s");
        assert_eq!(frames.len(), 3, "{frames:?}");
        assert_eq!(frames[0], "kv@engine-a");
        self.last_seq = seq_of(&frames[1]);
        frames
    }

    /// The next batch's payload, checking that its seq follows the last.
    async fn next_in_order(&mut self) -> Msgpack {
        let expected = self.last_seq + 1;
        let frames = self.next().await;
        assert_eq!(self.last_seq, expected, "seq must increment by one");
        decode(&frames[2])
    }

    /// Asserts that nothing arrives for a while.
    async fn assert_quiet(&mut self) {
        let frames = receive(&mut self.socket, Duration::from_millis(300)).await;
        assert!(frames.is_none(), "unexpected message {frames:?}");
    }
}

async fn receive(socket: &mut SubSocket, wait: Duration) -> Option<Vec<Bytes>> {
    match tokio::time::timeout(wait, socket.recv()).await {
        Ok(Ok(message)) => Some(message.into_vec()),
        _ => None,
    }
}

fn seq_of(frame: &[u8]) -> u64 {
    u64::from_be_bytes(frame.try_into().expect("an 8-byte seq frame"))
}

fn decode(payload: &[u8]) -> Msgpack {
    rmpv::decode::read_value(&mut &payload[..]).expect("a msgpack payload")
}

/// Asks the replay socket for every batch from `start` and collects the
/// answer up to and including the end marker.
async fn replay(endpoint: &str, start: u64) -> Vec<Vec<Bytes>> {
    let mut dealer = DealerSocket::new();
    dealer.connect(endpoint).await.expect("connect DEALER");
    let request = vec![Bytes::new(), Bytes::copy_from_slice(&start.to_be_bytes())];
    dealer
        .send(ZmqMessage::try_from(request).expect("frames"))
        .await
        .expect("send replay request");
    let mut messages = Vec::new();
    loop {
        let message = tokio::time::timeout(Duration::from_secs(3), dealer.recv())
            .await
            .expect("replay answered within 3 s")
            .expect("replay message");
        let frames = message.into_vec();
        let end = frames.len() >= 2
            && frames[frames.len() - 2] == END_SEQ[..]
            && frames.last().is_some_and(Bytes::is_empty);
        messages.push(frames);
        if end || messages.len() > 100 {
            return messages;
        }
    }
}

/// A completions request for exactly these token ids.
async fn prefill(engine: &TestEngine, ids: &[u32]) -> Value {
    let response = engine
        .post(
            "/v1/completions",
            &json!({"model": "m", "prompt": ids, "max_tokens": 1}),
        )
        .await;
    assert_eq!(response.status(), 200);
    response.json().await.expect("json")
}

fn ids(range: std::ops::Range<u32>) -> Vec<u32> {
    range.collect()
}

/// The fields of one event, whichever encoding carried it.
fn event_fields(event: &Msgpack, encoding: KvEncoding) -> (String, Vec<Msgpack>) {
    match encoding {
        KvEncoding::Array => {
            let items = event.as_array().expect("an array event");
            let tag = items[0].as_str().expect("a tag").to_owned();
            (tag, items[1..].to_vec())
        }
        KvEncoding::Map => {
            let entries = event.as_map().expect("a map event");
            let keys: Vec<&str> = entries.iter().filter_map(|(k, _)| k.as_str()).collect();
            let tag = event["type"].as_str().expect("a type").to_owned();
            let expected: &[&str] = match tag.as_str() {
                "BlockStored" => &crate::kv::VLLM_BLOCK_STORED_FIELDS,
                "BlockRemoved" => &["type", "block_hashes", "medium"],
                _ => &["type"],
            };
            assert_eq!(keys, expected, "{event}");
            (tag, entries[1..].iter().map(|(_, v)| v.clone()).collect())
        }
    }
}

/// The events of a batch, checking the batch's shape.
fn batch_events(batch: &Msgpack, encoding: KvEncoding, rank: u32) -> Vec<Msgpack> {
    match encoding {
        KvEncoding::Array => {
            let items = batch.as_array().expect("an array batch");
            assert_eq!(items.len(), 3, "{batch}");
            assert!(
                matches!(items[0], Msgpack::F64(ts) if ts > 1.6e9),
                "{batch}"
            );
            assert_eq!(items[2].as_u64(), Some(u64::from(rank)));
            items[1].as_array().expect("events").clone()
        }
        KvEncoding::Map => {
            let keys: Vec<&str> = batch
                .as_map()
                .expect("a map batch")
                .iter()
                .filter_map(|(k, _)| k.as_str())
                .collect();
            assert_eq!(keys, ["ts", "events", "data_parallel_rank"]);
            assert!(
                matches!(batch["ts"], Msgpack::F64(ts) if ts > 1.6e9),
                "{batch}"
            );
            assert_eq!(batch["data_parallel_rank"].as_u64(), Some(u64::from(rank)));
            batch["events"].as_array().expect("events").clone()
        }
    }
}

fn check_hash(hash: &Msgpack, encoding: KvHashEncoding) {
    match encoding {
        KvHashEncoding::U64 => assert!(hash.as_u64().is_some(), "{hash}"),
        KvHashEncoding::I64 => assert!(hash.as_i64().is_some_and(|h| h < 0), "{hash}"),
        KvHashEncoding::Bytes => {
            assert!(
                matches!(hash, Msgpack::Binary(b) if b.len() == 32),
                "{hash}"
            )
        }
    }
}

#[tokio::test]
async fn events_arrive_in_vllm_shapes_for_every_encoding() {
    for encoding in [KvEncoding::Array, KvEncoding::Map] {
        for hashes in [
            KvHashEncoding::U64,
            KvHashEncoding::I64,
            KvHashEncoding::Bytes,
        ] {
            let args = FakeLlmArgs {
                kv_encoding: encoding,
                kv_hash_encoding: hashes,
                data_parallel_rank: 3,
                kv_blocks: 3,
                ..kv_args(false)
            };
            let (engine, addresses) = TestEngine::start_bound(args).await;
            let endpoint = addresses.kv_events.expect("kv-events endpoint");
            let mut sub = Subscriber::join(&engine, &endpoint).await;
            let context = format!("{encoding:?}/{hashes:?}");

            // Ten tokens: two full blocks stored, the partial third is not.
            prefill(&engine, &ids(0..10)).await;
            let events = batch_events(&sub.next_in_order().await, encoding, 3);
            assert_eq!(events.len(), 1, "{context}");
            let (tag, fields) = event_fields(&events[0], encoding);
            assert_eq!(tag, "BlockStored", "{context}");
            assert_eq!(fields.len(), 6, "{context}: {fields:?}");
            let stored = fields[0].as_array().expect("block_hashes").clone();
            assert_eq!(stored.len(), 2);
            stored.iter().for_each(|h| check_hash(h, hashes));
            assert_eq!(fields[1], Msgpack::Nil, "root blocks have no parent");
            let tokens: Vec<u64> = fields[2]
                .as_array()
                .expect("token_ids")
                .iter()
                .filter_map(Msgpack::as_u64)
                .collect();
            assert_eq!(tokens, (0..8).collect::<Vec<u64>>());
            assert_eq!(fields[3].as_u64(), Some(4), "block_size");
            assert_eq!(fields[4], Msgpack::Nil, "lora_id");
            assert_eq!(fields[5].as_str(), Some("GPU"), "medium");

            // One more block, chained to the cached two.
            prefill(&engine, &ids(0..13)).await;
            let events = batch_events(&sub.next_in_order().await, encoding, 3);
            let (_, fields) = event_fields(&events[0], encoding);
            assert_eq!(
                fields[1], stored[1],
                "{context}: parent is the last cached block"
            );

            // A different prompt evicts the first one's tail blocks first.
            prefill(&engine, &ids(100..105)).await;
            let events = batch_events(&sub.next_in_order().await, encoding, 3);
            let tags: Vec<String> = events.iter().map(|e| event_fields(e, encoding).0).collect();
            assert_eq!(tags, ["BlockRemoved", "BlockStored"], "{context}");
            let (_, removed) = event_fields(&events[0], encoding);
            assert_eq!(removed.len(), 2, "{context}");
            assert_eq!(removed[1].as_str(), Some("GPU"));
            let removed_hashes = removed[0].as_array().expect("block_hashes");
            assert_eq!(removed_hashes.len(), 1);
            check_hash(&removed_hashes[0], hashes);
            assert!(!stored.contains(&removed_hashes[0]), "the head survives");

            // Clearing the cache publishes AllBlocksCleared alone.
            engine.control(json!({"clear_cache": true})).await;
            let events = batch_events(&sub.next_in_order().await, encoding, 3);
            assert_eq!(events.len(), 1);
            let (tag, fields) = event_fields(&events[0], encoding);
            assert_eq!((tag.as_str(), fields.len()), ("AllBlocksCleared", 0));
            let expected_event = match encoding {
                KvEncoding::Array => Msgpack::Array(vec!["AllBlocksCleared".into()]),
                KvEncoding::Map => Msgpack::Map(vec![("type".into(), "AllBlocksCleared".into())]),
            };
            assert_eq!(events[0], expected_event);
        }
    }
}

#[tokio::test]
async fn a_repeated_prompt_hits_the_cache_and_skips_its_prefill() {
    let engine = TestEngine::start(FakeLlmArgs {
        prefill_us_per_token: 2_000,
        ..FakeLlmArgs::default()
    })
    .await;
    let prompt = ids(0..200);
    let started = Instant::now();
    let cold = prefill(&engine, &prompt).await;
    let cold_time = started.elapsed();
    let started = Instant::now();
    let warm = engine
        .post(
            "/v1/completions",
            &json!({"model": "m", "prompt": prompt, "max_tokens": 1}),
        )
        .await;
    let warm_time = started.elapsed();
    assert_eq!(warm.headers()["x-fake-cached-tokens"], "192");
    assert_eq!(warm.headers()["x-fake-prompt-tokens"], "200");
    let warm: Value = warm.json().await.expect("json");
    assert_eq!(cold["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    // 12 full blocks of 16; the last 8 tokens are not a full block.
    assert_eq!(warm["usage"]["prompt_tokens"], 200);
    assert_eq!(warm["usage"]["prompt_tokens_details"]["cached_tokens"], 192);
    // 200 tokens at 2 ms each, then 8.
    assert!(cold_time >= Duration::from_millis(400), "{cold_time:?}");
    assert!(
        warm_time < cold_time / 2,
        "warm {warm_time:?}, cold {cold_time:?}"
    );

    // Streams report cached tokens in their usage chunk too.
    let chat = json!({"model": "m", "messages": [{"role": "user", "content": "word ".repeat(40)}],
        "max_tokens": 1, "stream": true, "stream_options": {"include_usage": true}});
    for expected in [0, 32] {
        let response = engine.post("/v1/chat/completions", &chat).await;
        let events = super::read_events(response).await.unwrap_or_default();
        let usage = events
            .iter()
            .map(super::Event::json)
            .find(|chunk| chunk["usage"].is_object())
            .expect("a usage chunk");
        // 40 words + <|im_start|> user <|im_end|> <|im_start|> assistant
        assert_eq!(usage["usage"]["prompt_tokens"], 45);
        assert_eq!(
            usage["usage"]["prompt_tokens_details"]["cached_tokens"],
            expected
        );
    }

    let stats = engine.stats().await;
    let cache = &stats["prefix_cache"];
    assert_eq!(
        (cache["hits"].clone(), cache["misses"].clone()),
        (json!(2), json!(2))
    );
    assert_eq!(cache["cached_tokens"], 192 + 32);
    assert_eq!(cache["queried_tokens"], 400 + 90);
    assert_eq!(cache["used_blocks"], 12 + 2);
    assert_eq!(cache["block_size"], 16);
    let metrics = engine.get_text("/metrics").await;
    for series in [
        "vllm:prefix_cache_hits_total{model_name=\"fake-model\"} 224\n",
        "vllm:prefix_cache_queries_total{model_name=\"fake-model\"} 490\n",
    ] {
        assert!(metrics.contains(series), "{series} missing from {metrics}");
    }
}

async fn occupancy(engine: &TestEngine) -> Value {
    engine.get_json("/fake/occupancy").await
}

#[tokio::test]
async fn occupancy_follows_the_cache_and_obeys_overrides() {
    let engine = TestEngine::start(FakeLlmArgs {
        block_size: 4,
        kv_blocks: 10,
        ..FakeLlmArgs::default()
    })
    .await;
    assert_eq!(
        occupancy(&engine).await,
        json!({"occupancy": 0.0, "cache_available": true})
    );
    prefill(&engine, &ids(0..13)).await;
    assert_eq!(
        occupancy(&engine).await,
        json!({"occupancy": 0.3, "cache_available": true})
    );
    let metrics = engine.get_text("/metrics").await;
    for series in [
        "vllm:kv_cache_usage_perc{model_name=\"fake-model\"} 0.3\n",
        "vllm:gpu_cache_usage_perc{model_name=\"fake-model\"} 0.3\n",
        "lmcache:usage_ratio 0.3\n",
    ] {
        assert!(metrics.contains(series), "{series} missing from {metrics}");
    }

    let state = engine
        .control(json!({"occupancy_override": 0.95, "cache_available": false}))
        .await;
    assert_eq!(state["occupancy_override"], 0.95);
    assert_eq!(
        occupancy(&engine).await,
        json!({"occupancy": 0.95, "cache_available": false})
    );
    engine.control(json!({"occupancy_override": null})).await;
    assert_eq!(
        occupancy(&engine).await,
        json!({"occupancy": 0.3, "cache_available": false})
    );
    engine.control(json!({"reset": true})).await;
    assert_eq!(
        occupancy(&engine).await,
        json!({"occupancy": 0.3, "cache_available": true})
    );
    engine.control(json!({"clear_cache": true})).await;
    assert_eq!(occupancy(&engine).await["occupancy"], 0.0);
    let bad = engine
        .post(
            "/fake/control",
            &json!({"occupancy_override": "full", "ttft_ms": 5}),
        )
        .await;
    assert_eq!(bad.status(), 400);
    assert_eq!(
        engine.control(json!({})).await["ttft_ms"],
        0,
        "a bad patch changes nothing"
    );
}

#[tokio::test]
async fn replay_returns_buffered_batches_then_the_end_marker_in_both_framings() {
    for legacy in [false, true] {
        let args = FakeLlmArgs {
            kv_replay_legacy: legacy,
            ..kv_args(true)
        };
        let (engine, addresses) = TestEngine::start_bound(args).await;
        let endpoint = addresses.kv_replay.expect("replay endpoint");
        prefill(&engine, &ids(0..8)).await;
        prefill(&engine, &ids(50..58)).await;
        engine.control(json!({"clear_cache": true})).await;
        // Stored again after the clear; then fully cached, which publishes
        // nothing. So seqs 0 to 3.
        prefill(&engine, &ids(50..58)).await;
        prefill(&engine, &ids(50..58)).await;

        let messages = replay(&endpoint, 1).await;
        assert_eq!(messages.len(), 4, "legacy={legacy}: {messages:?}");
        let (seq_at, width) = if legacy { (1, 3) } else { (2, 4) };
        for (message, seq) in messages.iter().zip(1u64..) {
            assert_eq!(message.len(), width, "legacy={legacy}: {message:?}");
            assert!(message[0].is_empty(), "the empty delimiter frame");
            if !legacy && seq < 4 {
                assert_eq!(message[1], "kv@engine-a");
            }
            if seq < 4 {
                assert_eq!(seq_of(&message[seq_at]), seq);
                let events = batch_events(&decode(&message[seq_at + 1]), KvEncoding::Array, 0);
                assert!(!events.is_empty());
            }
        }
        let end = messages.last().expect("end marker");
        let expected_end: Vec<&[u8]> = if legacy {
            vec![&[], &END_SEQ[..], &[]]
        } else {
            vec![&[], &[], &END_SEQ[..], &[]]
        };
        assert_eq!(
            end.iter().map(|f| f.as_ref()).collect::<Vec<_>>(),
            expected_end
        );
        // The second message is seq 2, the clear.
        let second = decode(&messages[1][seq_at + 1]);
        assert_eq!(
            batch_events(&second, KvEncoding::Array, 0),
            vec![Msgpack::Array(vec!["AllBlocksCleared".into()])]
        );
        assert_eq!(replay(&endpoint, 0).await.len(), 5);
        assert_eq!(replay(&endpoint, 99).await.len(), 1, "only the end marker");
        assert_eq!(engine.stats().await["kv_events"]["replay_requests"], 3);
    }
}

#[tokio::test]
async fn dropped_batches_leave_a_seq_gap_that_replay_fills() {
    let (engine, addresses) = TestEngine::start_bound(kv_args(true)).await;
    let mut sub = Subscriber::join(&engine, addresses.kv_events.as_deref().unwrap_or("")).await;
    let before = sub.last_seq;
    assert_eq!(
        engine.control(json!({"kv_drop_next": 2})).await["kv_drop_next"],
        2
    );
    prefill(&engine, &ids(0..8)).await;
    prefill(&engine, &ids(100..108)).await;
    prefill(&engine, &ids(200..208)).await;
    let frames = sub.next().await;
    assert_eq!(sub.last_seq, before + 3, "two seqs skipped");
    sub.assert_quiet().await;

    let messages = replay(&addresses.kv_replay.unwrap_or_default(), before + 1).await;
    let seqs: Vec<u64> = messages.iter().map(|m| seq_of(&m[2])).collect();
    assert_eq!(seqs, [before + 1, before + 2, before + 3, u64::MAX]);
    assert_eq!(messages[2][3], frames[2], "replay sends the same payload");
    let first = batch_events(&decode(&messages[0][3]), KvEncoding::Array, 0);
    let (tag, fields) = event_fields(&first[0], KvEncoding::Array);
    assert_eq!(tag, "BlockStored");
    assert_eq!(fields[2].as_array().map(Vec::len), Some(8));
    let stats = engine.stats().await;
    assert_eq!(stats["kv_events"]["dropped_on_request"], 2);
    assert_eq!(stats["kv_events"]["drop_next"], 0);
}

#[tokio::test]
async fn restart_resets_seq_salt_and_replay_buffer() {
    let (engine, addresses) = TestEngine::start_bound(kv_args(true)).await;
    let mut sub = Subscriber::join(&engine, addresses.kv_events.as_deref().unwrap_or("")).await;
    prefill(&engine, &ids(0..8)).await;
    let before = batch_events(&sub.next_in_order().await, KvEncoding::Array, 0);
    assert!(sub.last_seq > 0);

    engine.control(json!({"kv_restart": true})).await;
    let again = prefill(&engine, &ids(0..8)).await;
    assert_eq!(
        again["usage"]["prompt_tokens_details"]["cached_tokens"], 0,
        "the cache is empty"
    );
    let frames = sub.next().await;
    assert_eq!(sub.last_seq, 0, "seq starts over");
    let after = batch_events(&decode(&frames[2]), KvEncoding::Array, 0);
    let hashes = |events: &[Msgpack]| event_fields(&events[0], KvEncoding::Array).1[0].clone();
    assert_ne!(
        hashes(&before),
        hashes(&after),
        "a new salt gives new hashes"
    );
    let messages = replay(&addresses.kv_replay.unwrap_or_default(), 0).await;
    assert_eq!(
        messages.len(),
        2,
        "only the batch since the restart: {messages:?}"
    );
    assert_eq!(messages[0][3], frames[2]);
}

#[tokio::test]
async fn pause_holds_the_live_stream_until_resumed() {
    let (engine, addresses) = TestEngine::start_bound(kv_args(false)).await;
    let mut sub = Subscriber::join(&engine, addresses.kv_events.as_deref().unwrap_or("")).await;
    assert_eq!(
        engine.control(json!({"kv_pause": true})).await["kv_pause"],
        true
    );
    prefill(&engine, &ids(0..8)).await;
    prefill(&engine, &ids(100..108)).await;
    sub.assert_quiet().await;
    engine.control(json!({"kv_pause": false})).await;
    sub.next_in_order().await;
    sub.next_in_order().await;
    let stats = engine.stats().await;
    assert_eq!(stats["kv_events"]["paused"], false);
    assert_eq!(stats["kv_events"]["dropped_queue_full"], 0);
}

#[tokio::test]
async fn tokenizer_helpers_predict_what_the_engine_prefills() {
    let engine = TestEngine::start(FakeLlmArgs::default()).await;
    let body = json!({"model": "m", "max_tokens": 1, "messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hello, engine!"}]});
    let response = engine.post("/v1/chat/completions", &body).await;
    let expected = crate::chat_token_ids(&body).len().to_string();
    assert_eq!(
        response.headers()["x-fake-prompt-tokens"],
        expected.as_str()
    );
    let response = engine
        .post(
            "/v1/completions",
            &json!({"model": "m", "prompt": "Hello, engine!", "max_tokens": 1}),
        )
        .await;
    let expected = crate::tokenize("Hello, engine!").len().to_string();
    assert_eq!(
        response.headers()["x-fake-prompt-tokens"],
        expected.as_str()
    );
}
