-- wrk's side of compare.py's saturation rows: every request is the same
-- chat completion (POST /v1/chat/completions, `model` = WRK_MODEL, `stream`
-- = WRK_STREAM), and `done` prints one JSON line the runner reads:
-- requests, errors of every kind, non-2xx answers, latency percentiles (µs).
wrk.method = "POST"
wrk.path = "/v1/chat/completions"
wrk.headers["Content-Type"] = "application/json"
wrk.body = string.format(
  '{"model":"%s","stream":%s,"max_tokens":16,"messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Say hello in one short sentence, please."}]}',
  os.getenv("WRK_MODEL") or "chat",
  os.getenv("WRK_STREAM") == "1" and "true" or "false"
)

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"requests":%d,"duration_us":%d,"bytes":%d,"connect_errors":%d,"read_errors":%d,"write_errors":%d,"timeouts":%d,"non_2xx":%d,"p50_us":%d,"p90_us":%d,"p99_us":%d,"max_us":%d}\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write,
    e.timeout, e.status, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency.max))
end
