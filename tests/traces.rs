//! Traces end to end: a real gateway exporting OTLP/HTTP protobuf to a
//! collector in the test (which decodes what it receives), fake engines
//! that echo the `traceparent` they got, and callers with and without a
//! trace of their own.

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use support::*;

/// Spans a collector received, with the `service.name` they came under.
#[derive(Clone, Default)]
struct Collector {
    spans: Arc<Mutex<Vec<(String, Span)>>>,
}

impl Collector {
    /// Listens on a free loopback port; returns its `/v1/traces` URL.
    async fn start(&self) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/v1/traces", listener.local_addr().unwrap());
        let spans = Arc::clone(&self.spans);
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let spans = Arc::clone(&spans);
                tokio::spawn(async move {
                    // One request after another on a kept-alive connection.
                    let mut buffer = Vec::new();
                    loop {
                        let Some(body) = read_request(&mut stream, &mut buffer).await else {
                            return;
                        };
                        let request = ExportTraceServiceRequest::decode(&body[..])
                            .expect("the body is an OTLP protobuf export request");
                        for resource in request.resource_spans {
                            let service = resource
                                .resource
                                .iter()
                                .flat_map(|r| &r.attributes)
                                .find(|a| a.key == "service.name")
                                .and_then(|a| match a.value.as_ref()?.value.as_ref()? {
                                    AnyValue::StringValue(s) => Some(s.clone()),
                                    _ => None,
                                })
                                .unwrap_or_default();
                            for scope in resource.scope_spans {
                                for span in scope.spans {
                                    spans.lock().unwrap().push((service.clone(), span));
                                }
                            }
                        }
                        let answer = b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
                        if stream.write_all(answer).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        url
    }

    /// The spans of `trace` once `roots` requests' root spans arrived (a
    /// request's spans are exported together, after its response ended).
    async fn trace(&self, trace: &[u8], roots: usize) -> Vec<Span> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let spans: Vec<Span> = self
                .spans
                .lock()
                .unwrap()
                .iter()
                .filter(|(_, s)| s.trace_id == trace)
                .map(|(_, s)| s.clone())
                .collect();
            if spans.iter().filter(|s| s.kind == SERVER).count() >= roots {
                return spans;
            }
            assert!(
                Instant::now() < deadline,
                "no trace {} arrived",
                hex::encode(trace)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The spans of the caller's trace ([`CALLER_TRACE`]) once `roots`
    /// requests' root spans arrived.
    async fn callers_trace(&self, roots: usize) -> Vec<Span> {
        self.trace(&hex::decode(CALLER_TRACE).unwrap(), roots).await
    }

    fn services(&self) -> Vec<String> {
        self.spans
            .lock()
            .unwrap()
            .iter()
            .map(|(s, _)| s.clone())
            .collect()
    }
}

/// OTLP's span kinds.
const SERVER: i32 = 2;
const CLIENT: i32 = 3;

/// Reads one HTTP/1.1 request with a `content-length` body.
async fn read_request(stream: &mut tokio::net::TcpStream, buffer: &mut Vec<u8>) -> Option<Vec<u8>> {
    let mut chunk = [0u8; 16 * 1024];
    let header_end = loop {
        if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buffer[..header_end]).to_ascii_lowercase();
    assert!(head.starts_with("post /v1/traces "), "{head}");
    assert!(
        head.contains("content-type: application/x-protobuf"),
        "{head}"
    );
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map(|v| v.trim().parse().unwrap())
        .expect("a content-length");
    while buffer.len() < header_end + length {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
    let body = buffer[header_end..header_end + length].to_vec();
    buffer.drain(..header_end + length);
    Some(body)
}

fn attribute<'a>(span: &'a Span, key: &str) -> Option<&'a AnyValue> {
    span.attributes
        .iter()
        .find(|a| a.key == key)
        .and_then(|a| a.value.as_ref()?.value.as_ref())
}

fn int(span: &Span, key: &str) -> Option<i64> {
    match attribute(span, key)? {
        AnyValue::IntValue(v) => Some(*v),
        _ => None,
    }
}

fn text(span: &Span, key: &str) -> Option<String> {
    match attribute(span, key)? {
        AnyValue::StringValue(v) => Some(v.clone()),
        _ => None,
    }
}

/// A gateway serving `fleet` (its providers and routes), tracing to
/// `collector` with `[tracing]` lines `tracing_extra`, and one key
/// (`sk-team`).
async fn traced_gateway(collector: &Collector, fleet: &str, tracing_extra: &str) -> Gateway {
    let url = collector.start().await;
    let config = format!(
        "[server]\nrequire_api_key = false\n\n{fleet}\n\
         [tracing]\notlp_endpoint = \"{url}\"\n{tracing_extra}\n\n\
         [[api_keys]]\nname = \"team\"\nkey_env = \"TEAM_KEY\"\n"
    );
    Gateway::start_with_env(&config, &[("TEAM_KEY", "sk-team")]).await
}

/// Engines `a` (failing with 503 when asked) and `b`, a gateway tracing to
/// `collector` with `tracing_extra`, one key.
async fn setup(collector: &Collector, tracing_extra: &str) -> (FakeEngine, FakeEngine, Gateway) {
    let (a, b) = (FakeEngine::start("a", &[]), FakeEngine::start("b", &[]));
    let fleet = format!(
        "{}{}[[routes]]\nmodel = \"chat\"\nstrategy = \"round_robin\"\n\
         targets = [{{ provider = \"a\" }}, {{ provider = \"b\" }}]\n\n[health]\nenabled = false\n",
        provider("a", &a.url()),
        provider("b", &b.url()),
    );
    let tracing = format!("service_name = \"edge-gw\"\n{tracing_extra}");
    let gateway = traced_gateway(collector, &fleet, &tracing).await;
    (a, b, gateway)
}

const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

/// The `traceparent` of a caller whose sampled trace [`CALLER_TRACE`] is
/// at span [`CALLER_SPAN`].
fn caller_parent() -> String {
    format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01")
}

/// A key holder's chat that continues the caller's sampled trace.
async fn chat_in_callers_trace(gateway: &Gateway, body: Value) -> reqwest::Response {
    traced_chat(gateway, Some("sk-team"), Some(&caller_parent()), body).await
}

async fn traced_chat(
    gateway: &Gateway,
    key: Option<&str>,
    traceparent: Option<&str>,
    body: Value,
) -> reqwest::Response {
    let mut request = client()
        .post(gateway.url("/v1/chat/completions"))
        .json(&body);
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    if let Some(parent) = traceparent {
        request = request
            .header("traceparent", parent)
            .header("tracestate", "vendor=abc");
    }
    request.send().await.unwrap()
}

#[tokio::test]
async fn a_request_is_one_trace_with_its_attempts_and_the_engine_continues_it() {
    let collector = Collector::default();
    let (a, _b, gateway) = setup(&collector, "").await;
    a.control(json!({"fail_status": 503})).await;
    // Round robin: one of two requests tries `a` first and fails over.
    let mut answers = Vec::new();
    for _ in 0..2 {
        let response = chat_in_callers_trace(&gateway, chat_body("chat", "hi")).await;
        assert_eq!(response.status(), 200);
        answers.push(response.json::<Value>().await.unwrap());
    }
    let trace = collector.callers_trace(2).await;

    // The caller's trace continues: its span is the root's remote parent.
    let roots: Vec<&Span> = trace.iter().filter(|s| s.kind == SERVER).collect();
    assert_eq!(roots.len(), 2, "one root span per request");
    for root in &roots {
        assert_eq!(hex::encode(&root.parent_span_id), CALLER_SPAN);
        assert_eq!(root.name, "POST /v1/chat/completions");
        assert_eq!(int(root, "http.response.status_code"), Some(200));
        assert_eq!(text(root, "rolter.route").as_deref(), Some("chat"));
        assert_eq!(text(root, "rolter.api_key").as_deref(), Some("team"));
    }
    // Every attempt is a client span under its request's root.
    let attempts: Vec<&Span> = trace.iter().filter(|s| s.kind == CLIENT).collect();
    assert_eq!(attempts.len(), 3, "a, failed, then b; and b");
    for attempt in &attempts {
        assert!(roots.iter().any(|r| r.span_id == attempt.parent_span_id));
        assert_eq!(
            text(attempt, "rolter.strategy").as_deref(),
            Some("round_robin")
        );
    }
    let failed: Vec<&&Span> = attempts
        .iter()
        .filter(|s| int(s, "http.response.status_code") == Some(503))
        .collect();
    assert_eq!(failed.len(), 1, "{attempts:#?}");
    assert!(
        text(failed[0], "rolter.retry_reason").is_some(),
        "{:#?}",
        failed[0]
    );
    assert_eq!(text(failed[0], "server.address").as_deref(), Some("a"));
    let retry = attempts
        .iter()
        .find(|s| s.parent_span_id == failed[0].parent_span_id && s.span_id != failed[0].span_id)
        .expect("the retry's span");
    assert_eq!(text(retry, "rolter.decision").as_deref(), Some("retry"));
    assert_eq!(int(retry, "rolter.attempt"), Some(2));

    // Each engine got a traceparent naming the attempt that reached it
    // (the answering one), and the caller's tracestate.
    for answer in &answers {
        let received = &answer["fake"]["received_headers"];
        let sent = received["traceparent"].as_str().unwrap();
        assert!(
            sent.starts_with(&format!("00-{CALLER_TRACE}-")) && sent.ends_with("-01"),
            "{sent}"
        );
        let attempt = attempts
            .iter()
            .find(|s| hex::encode(&s.span_id) == sent[36..52])
            .expect("the engine's parent is an attempt span");
        assert_eq!(int(attempt, "http.response.status_code"), Some(200));
        assert_eq!(text(attempt, "server.address").as_deref(), Some("b"));
        assert_eq!(received["tracestate"], "vendor=abc");
        // Tokens are on the root and the answering attempt.
        let usage = &answer["usage"];
        let root = roots
            .iter()
            .find(|r| r.span_id == attempt.parent_span_id)
            .unwrap();
        assert_eq!(
            int(root, "gen_ai.usage.input_tokens"),
            usage["prompt_tokens"].as_i64()
        );
        assert_eq!(
            int(attempt, "gen_ai.usage.output_tokens"),
            usage["completion_tokens"].as_i64()
        );
    }
    assert!(collector.services().iter().all(|s| s == "edge-gw"));
}

#[tokio::test]
async fn an_anonymous_callers_trace_is_not_continued_and_a_stream_has_its_first_token() {
    let collector = Collector::default();
    let (_a, _b, gateway) = setup(&collector, "").await;
    let parent = caller_parent();
    let body = json!({"model": "chat", "max_tokens": 3, "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    let response = traced_chat(&gateway, None, Some(&parent), body).await;
    assert_eq!(response.status(), 200);
    let text_body = response.text().await.unwrap();
    assert!(text_body.contains("[DONE]"));
    // A new trace: find it by its root, which has no parent.
    let deadline = Instant::now() + Duration::from_secs(10);
    let root = loop {
        let found = collector
            .spans
            .lock()
            .unwrap()
            .iter()
            .map(|(_, s)| s.clone())
            .find(|s| s.kind == SERVER);
        if let Some(root) = found {
            break root;
        }
        assert!(Instant::now() < deadline, "no span arrived");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_ne!(
        hex::encode(&root.trace_id),
        CALLER_TRACE,
        "an untrusted caller's trace was continued"
    );
    assert!(root.parent_span_id.is_empty(), "{root:#?}");
    let trace = collector.trace(&root.trace_id, 1).await;
    let attempt = trace.iter().find(|s| s.kind == CLIENT).unwrap();
    assert!(
        int(attempt, "gen_ai.usage.output_tokens") == Some(3),
        "{attempt:#?}"
    );
    let first = attempt
        .events
        .iter()
        .find(|e| e.name == "first token")
        .expect("a first-token event");
    assert!(
        first.time_unix_nano >= attempt.start_time_unix_nano
            && first.time_unix_nano <= attempt.end_time_unix_nano
    );
    assert!(
        matches!(attribute(attempt, "rolter.time_to_first_token_ms"), Some(AnyValue::DoubleValue(ms)) if *ms >= 0.0)
    );
}

#[tokio::test]
async fn sampling_follows_a_trusted_parent_and_a_full_queue_drops_and_counts() {
    let collector = Collector::default();
    let (_a, _b, gateway) = setup(&collector, "sampling_ratio = 0.0").await;
    // Ratio 0: a new trace is not kept; the engine is still told, unsampled.
    let response = traced_chat(&gateway, None, None, chat_body("chat", "hi")).await;
    let body: Value = response.json().await.unwrap();
    let sent = body["fake"]["received_headers"]["traceparent"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(sent.ends_with("-00"), "{sent}");
    // A key holder's sampled trace is kept whatever the ratio.
    let response = chat_in_callers_trace(&gateway, chat_body("chat", "hi")).await;
    assert_eq!(response.status(), 200);
    let trace = collector.callers_trace(1).await;
    assert!(trace.len() >= 2);
    let unsampled = hex::decode(&sent[3..35]).unwrap();
    assert!(collector
        .spans
        .lock()
        .unwrap()
        .iter()
        .all(|(_, s)| s.trace_id != unsampled));

    // A queue of one span cannot take a request's two: dropped, counted,
    // and the request is served all the same.
    let collector = Collector::default();
    let (_a, _b, gateway) = setup(&collector, "max_queued_spans = 1").await;
    let mut by_status: HashMap<u16, u32> = HashMap::new();
    for _ in 0..3 {
        let status = traced_chat(&gateway, None, None, chat_body("chat", "hi"))
            .await
            .status()
            .as_u16();
        *by_status.entry(status).or_default() += 1;
    }
    assert_eq!(by_status.get(&200), Some(&3));
    // Counted when each request's log is written, just after its answer.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let metrics = gateway.metrics().await;
        if metrics.contains(r#"rolter_trace_spans_total{outcome="dropped"} 6"#) {
            break;
        }
        assert!(Instant::now() < deadline, "{metrics}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_disaggregated_request_has_its_prefill_leg_before_its_decode_attempt() {
    let collector = Collector::default();
    let p = FakeEngine::start("p", &["--pd-role", "prefill"]);
    let d = FakeEngine::start("d", &["--pd-role", "decode"]);
    let fleet = format!(
        "{}{}[[routes]]\nmodel = \"split\"\n\
         disaggregation = {{ protocol = \"vllm\", prefill = [{{ provider = \"p\" }}], decode = [{{ provider = \"d\" }}] }}\n",
        provider("p", &p.url()),
        provider("d", &d.url()),
    );
    let gateway = traced_gateway(&collector, &fleet, "").await;
    let response = chat_in_callers_trace(
        &gateway,
        chat_body("split", "a question worth a remote prefill"),
    )
    .await;
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.unwrap();
    let trace = collector.callers_trace(1).await;
    let root = trace.iter().find(|s| s.kind == SERVER).unwrap();
    let legs: Vec<&Span> = trace.iter().filter(|s| s.kind == CLIENT).collect();
    assert_eq!(legs.len(), 2, "{legs:#?}");
    let prefill = legs
        .iter()
        .find(|s| text(s, "rolter.decision").as_deref() == Some("prefill"))
        .expect("the prefill leg's span");
    let decode = legs.iter().find(|s| s.span_id != prefill.span_id).unwrap();
    assert_eq!(text(prefill, "server.address").as_deref(), Some("p"));
    assert_eq!(int(prefill, "http.response.status_code"), Some(200));
    assert_eq!(text(decode, "server.address").as_deref(), Some("d"));
    assert!(prefill.end_time_unix_nano <= decode.start_time_unix_nano);
    for leg in [prefill, decode] {
        assert_eq!(leg.parent_span_id, root.span_id);
    }
    // The decode engine continues the trace under its own attempt's span.
    let sent = answer["fake"]["received_headers"]["traceparent"]
        .as_str()
        .unwrap();
    assert_eq!(&sent[36..52], hex::encode(&decode.span_id));
}

#[tokio::test]
async fn a_request_held_by_flow_control_has_its_wait_as_a_span() {
    let collector = Collector::default();
    let engine = FakeEngine::start("e", &["--token-delay-ms", "20"]);
    let fleet = format!(
        "{}max_concurrency = 1\n\n[[routes]]\nmodel = \"chat\"\n\
         targets = [{{ provider = \"e\" }}]\n\n[health]\nenabled = false\n\n[flow_control]\nenabled = true\n",
        provider("e", &engine.url()).trim_end().to_owned() + "\n",
    );
    let gateway = traced_gateway(&collector, &fleet, "").await;
    // The engine's one place is taken for ~400 ms.
    let url = gateway.url("/v1/chat/completions");
    let first = tokio::spawn(async move {
        let body = json!({"model": "chat", "max_tokens": 20, "messages": [{"role": "user", "content": "long"}]});
        let response = client()
            .post(url)
            .bearer_auth("sk-team")
            .json(&body)
            .send()
            .await
            .unwrap();
        response.status()
    });
    wait_until(
        Duration::from_secs(5),
        "the first request in flight",
        || async { engine.stats().await["running"].as_u64() == Some(1) },
    )
    .await;
    let response = chat_in_callers_trace(&gateway, chat_body("chat", "hi")).await;
    assert_eq!(response.status(), 200);
    assert_eq!(first.await.unwrap(), 200);
    let trace = collector.callers_trace(1).await;
    let root = trace.iter().find(|s| s.kind == SERVER).unwrap();
    let wait = trace
        .iter()
        .find(|s| s.name == "flow control wait")
        .unwrap_or_else(|| panic!("no wait span: {trace:#?}"));
    assert_eq!(wait.parent_span_id, root.span_id);
    assert!(text(wait, "rolter.queue.outcome").is_some(), "{wait:#?}");
    // It waited for the first request's place, then was sent.
    assert!(
        wait.end_time_unix_nano - wait.start_time_unix_nano >= 50_000_000,
        "{wait:#?}"
    );
    let attempt = trace.iter().find(|s| s.kind == CLIENT).unwrap();
    assert!(wait.end_time_unix_nano <= attempt.start_time_unix_nano);
}
