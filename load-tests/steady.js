// Steady traffic against a rolter gateway, as k6 drives it.
//
// Two scenarios run side by side for DURATION:
//   - `chat`: non-streaming chat completions at a constant arrival rate
//     (RATE per second), each checked for a 200 and an OpenAI completion body;
//   - `streams`: STREAMS virtual users, each holding one long SSE stream at a
//     time (`stream: true`, STREAM_TOKENS tokens), the whole body read and
//     checked to end with `data: [DONE]`.
//
// The thresholds make k6 exit non-zero (99) on ANY failed request (status
// outside 2xx/3xx, connection error, timeout) and on any stream that did not
// complete, so a load run fails loudly instead of reporting a small error
// percentage. In-flight iterations get `gracefulStop` to finish when the
// duration ends, longer than a stream lasts, so no stream is cut by k6 itself.
//
// Parameters (environment, `k6 run -e NAME=value` or exported):
//   TARGET_URL     gateway base URL                      http://127.0.0.1:8080
//   MODEL          public model name of the route        chat
//   RATE           chat completions per second           20
//   STREAMS        concurrent SSE streams                4
//   DURATION       length of both scenarios              60s
//   CHAT_TOKENS    max_tokens of a chat completion       8
//   STREAM_TOKENS  max_tokens of a stream (its length)   120
//   API_KEY        bearer key sent to the gateway        (none)
//   TIMEOUT        per-request timeout                   60s
//   SUMMARY_PATH   where the JSON summary goes           load-tests/results/steady-<time>.json
//
// The end-of-test summary is written as JSON to SUMMARY_PATH and as a short
// text report to stdout (see load-tests/README.md for how to read it).

import http from 'k6/http';
import { check } from 'k6';
import { Counter, Rate } from 'k6/metrics';

function param(name, fallback) {
  const value = __ENV[name];
  return value === undefined || value === '' ? fallback : value;
}

function intParam(name, fallback) {
  const value = parseInt(param(name, String(fallback)), 10);
  if (!(value >= 0)) {
    throw new Error(`${name} must be a non-negative integer, got "${__ENV[name]}"`);
  }
  return value;
}

const TARGET_URL = param('TARGET_URL', 'http://127.0.0.1:8080').replace(/\/+$/, '');
const MODEL = param('MODEL', 'chat');
const RATE = intParam('RATE', 20);
const STREAMS = intParam('STREAMS', 4);
const DURATION = param('DURATION', '60s');
const CHAT_TOKENS = intParam('CHAT_TOKENS', 8);
const STREAM_TOKENS = intParam('STREAM_TOKENS', 120);
const API_KEY = param('API_KEY', '');
const TIMEOUT = param('TIMEOUT', '60s');
const SUMMARY_PATH = param(
  'SUMMARY_PATH',
  `load-tests/results/steady-${new Date().toISOString().replace(/[:.]/g, '-')}.json`,
);

const URL = `${TARGET_URL}/v1/chat/completions`;
const HEADERS = { 'content-type': 'application/json' };
if (API_KEY) {
  HEADERS.authorization = `Bearer ${API_KEY}`;
}

// Per-kind outcome of a request: true when the response was complete.
const chatCompleted = new Rate('chat_completed');
const streamsCompleted = new Rate('streams_completed');
// The same failures as plain counts, for the logs and the summary.
const chatIncomplete = new Counter('chat_incomplete');
const streamsIncomplete = new Counter('streams_incomplete');

const scenarios = {};
if (RATE > 0) {
  scenarios.chat = {
    executor: 'constant-arrival-rate',
    exec: 'chat',
    rate: RATE,
    timeUnit: '1s',
    duration: DURATION,
    // A completion takes CHAT_TOKENS token delays; VUs beyond that absorb
    // slow moments (an upgrade hand-over) without dropping iterations.
    preAllocatedVUs: Math.max(4, Math.ceil(RATE / 2)),
    maxVUs: Math.max(20, RATE * 4),
    gracefulStop: '30s',
  };
}
if (STREAMS > 0) {
  scenarios.streams = {
    executor: 'constant-vus',
    exec: 'stream',
    vus: STREAMS,
    duration: DURATION,
    gracefulStop: '60s',
  };
}

export const options = {
  scenarios,
  // Any failure fails the run; `rate==1` on a Rate means every sample passed.
  thresholds: {
    http_req_failed: ['rate==0'],
    checks: ['rate==1'],
    chat_completed: ['rate==1'],
    streams_completed: ['rate==1'],
    // Always true: they only make k6 keep per-kind durations for the summary.
    'http_req_duration{kind:chat}': ['max>=0'],
    'http_req_duration{kind:stream}': ['max>=0'],
  },
  summaryTrendStats: ['avg', 'min', 'med', 'p(95)', 'p(99)', 'max'],
  // Keep-alive connections stay on, as real clients hold them: an upgrade
  // must move them to the new process without failing a request.
  noConnectionReuse: false,
};

function body(stream, tokens, n) {
  return JSON.stringify({
    model: MODEL,
    stream,
    max_tokens: tokens,
    messages: [{ role: 'user', content: `load ${stream ? 'stream' : 'chat'} ${__VU}-${n}` }],
  });
}

function describe(res) {
  const text = typeof res.body === 'string' ? res.body : '';
  return `status=${res.status} error=${JSON.stringify(res.error || '')} ` +
    `error_code=${res.error_code} body=${JSON.stringify(text.slice(-200))}`;
}

export function chat() {
  const res = http.post(URL, body(false, CHAT_TOKENS, __ITER), {
    headers: HEADERS,
    timeout: TIMEOUT,
    tags: { kind: 'chat' },
  });
  let complete = false;
  if (res.status === 200) {
    try {
      const json = res.json();
      complete = Array.isArray(json.choices) && json.choices.length > 0 &&
        json.choices[0].message !== undefined;
    } catch (e) {
      complete = false;
    }
  }
  check(res, { 'chat: 200 with a completion': () => complete });
  chatCompleted.add(complete);
  if (!complete) {
    chatIncomplete.add(1);
    console.error(`chat request failed at ${new Date().toISOString()}: ${describe(res)}`);
  }
}

export function stream() {
  const res = http.post(URL, body(true, STREAM_TOKENS, __ITER), {
    headers: HEADERS,
    timeout: TIMEOUT,
    tags: { kind: 'stream' },
  });
  const text = typeof res.body === 'string' ? res.body : '';
  const complete = res.status === 200 && text.trimEnd().endsWith('data: [DONE]');
  check(res, { 'stream: 200 ending with data: [DONE]': () => complete });
  streamsCompleted.add(complete);
  if (!complete) {
    streamsIncomplete.add(1);
    console.error(`stream incomplete at ${new Date().toISOString()}: ${describe(res)}`);
  }
}

function ratio(values) {
  const total = values.passes + values.fails;
  return { total, pct: total === 0 ? 0 : (100 * values.passes) / total };
}

function trendLine(data, name, label) {
  const metric = data.metrics[name];
  if (!metric) {
    return `${label}: none`;
  }
  const v = metric.values;
  const ms = (x) => `${x.toFixed(1)}ms`;
  return `${label}: med ${ms(v.med)} p95 ${ms(v['p(95)'])} p99 ${ms(v['p(99)'])} max ${ms(v.max)}`;
}

// JSON to SUMMARY_PATH; a short report on stdout whose lines run.py and the
// tests read (`failed requests: F of N`, `streams completed: C of S`).
export function handleSummary(data) {
  const none = { passes: 0, fails: 0 };
  const values = (name) => (data.metrics[name] ? data.metrics[name].values : none);
  // http_req_failed counts a failed request as a pass of the Rate.
  const failed = ratio(values('http_req_failed'));
  const streams = ratio(values('streams_completed'));
  const chats = ratio(values('chat_completed'));
  const dropped = data.metrics.dropped_iterations ? data.metrics.dropped_iterations.values.count : 0;
  const broken = [];
  for (const [name, metric] of Object.entries(data.metrics)) {
    for (const [expr, t] of Object.entries(metric.thresholds || {})) {
      if (!t.ok) {
        broken.push(`${name} ${expr}`);
      }
    }
  }
  const lines = [
    '',
    `rolter steady load: ${TARGET_URL} model=${MODEL} rate=${RATE}/s streams=${STREAMS} duration=${DURATION}`,
    `failed requests: ${values('http_req_failed').passes} of ${failed.total} (http_req_failed ${failed.pct.toFixed(2)}%)`,
    `streams completed: ${values('streams_completed').passes} of ${streams.total} (streams_completed ${streams.pct.toFixed(2)}%)`,
    `chat completions complete: ${values('chat_completed').passes} of ${chats.total} (chat_completed ${chats.pct.toFixed(2)}%)`,
    trendLine(data, 'http_req_duration{kind:chat}', 'chat duration'),
    trendLine(data, 'http_req_duration{kind:stream}', 'stream duration'),
    `dropped iterations: ${dropped}`,
    `thresholds: ${broken.length === 0 ? 'all passed' : `FAILED: ${broken.join(', ')}`}`,
    '',
  ];
  return {
    stdout: lines.join('\n'),
    [SUMMARY_PATH]: JSON.stringify(data, null, 2),
  };
}
