// One measurement of the side-by-side gateway benchmark (`compare.py`), as
// k6 drives it against one target: the engine itself, nginx, or rolter.
//
// MODE picks the workload; each is a single k6 scenario, so the summary's
// http_reqs and http_req_duration describe exactly that workload:
//
//   throughput  closed loop: VUS virtual users, each sending the next
//               non-streaming chat completion as soon as the last answered
//               (requests/s is what the target sustains with VUS in flight).
//   latency     open loop: RATE non-streaming chat completions per second,
//               whatever the answers take (latency at a fixed arrival rate;
//               `dropped_iterations` > 0 means the generator fell behind).
//   stream      closed loop: VUS long SSE streams at a time, STREAM_TOKENS
//               tokens each, the whole body read and checked to end with
//               `data: [DONE]`.
//   large       closed loop: VUS virtual users sending chat completions whose
//               body is BODY_BYTES long (the user message is padded), asking
//               for one token: the time is the body's upload and forwarding.
//
// Every mode counts a request as complete only on a 200 with the expected
// body; `complete` (a Rate) says how many were. The runner treats any
// incomplete request as a failed measurement, so thresholds are not used to
// abort the run.
//
// Parameters (environment, `k6 run -e NAME=value`):
//   TARGET_URL    base URL                                http://127.0.0.1:8080
//   MODE          throughput | latency | stream | large   throughput
//   MODEL         the `model` of every request            chat
//   DURATION      length of the scenario                  10s
//   VUS           closed-loop concurrency                 32
//   RATE          arrivals per second (latency)           2000
//   MAX_VUS       cap on VUs the latency mode may add      RATE / 4
//   CHAT_TOKENS   max_tokens of a chat completion          16
//   STREAM_TOKENS max_tokens of a stream                   50
//   BODY_BYTES    request body size (large)                262144
//   PROMPT        words | document: the large body's prompt  words
//                 (document: lines with quotations, so the JSON
//                 body has `\n` and `\"` escapes every ~13 bytes)
//   CONTENT       string | parts: the large prompt as the  string
//                 message's content string, or as one text part
//                 of a content list (the openai SDK's typed parts)
//   SUMMARY_PATH  where the JSON summary goes              (required)

import http from 'k6/http';
import { Rate } from 'k6/metrics';

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
const MODE = param('MODE', 'throughput');
const MODEL = param('MODEL', 'chat');
const DURATION = param('DURATION', '10s');
const VUS = intParam('VUS', 32);
const RATE = intParam('RATE', 2000);
const MAX_VUS = intParam('MAX_VUS', Math.max(50, Math.ceil(RATE / 4)));
const CHAT_TOKENS = intParam('CHAT_TOKENS', 16);
const STREAM_TOKENS = intParam('STREAM_TOKENS', 50);
const BODY_BYTES = intParam('BODY_BYTES', 262144);
const PROMPT = param('PROMPT', 'words');
if (PROMPT !== 'words' && PROMPT !== 'document') {
  throw new Error(`PROMPT must be words or document, got "${PROMPT}"`);
}
const CONTENT = param('CONTENT', 'string');
if (CONTENT !== 'string' && CONTENT !== 'parts') {
  throw new Error(`CONTENT must be string or parts, got "${CONTENT}"`);
}
const SUMMARY_PATH = param('SUMMARY_PATH', '');
if (!SUMMARY_PATH) {
  throw new Error('SUMMARY_PATH is required');
}

const URL = `${TARGET_URL}/v1/chat/completions`;
const PARAMS = { headers: { 'content-type': 'application/json' }, timeout: '60s' };

const complete = new Rate('complete');

function chatBody(stream, tokens, text, content = 'string') {
  return JSON.stringify({
    model: MODEL,
    stream,
    max_tokens: tokens,
    messages: [{ role: 'user', content: content === 'parts' ? [{ type: 'text', text }] : text }],
  });
}

// A prompt of ordinary words, so the engine's tokenizer and rolter's prompt
// extraction see text like a real one, or a document's lines, whose newlines
// and quotation marks the JSON body carries as escapes; built once per VU.
function paddedBody(bytes) {
  const head = chatBody(false, 1, '', CONTENT);
  const room = Math.max(0, bytes - head.length);
  let text;
  if (PROMPT === 'document') {
    const line = 'The committee said "yes" to the plan.\n';
    // What one line takes in the body, escapes included.
    const encoded = JSON.stringify(line).length - 2;
    const lines = Math.floor(room / encoded);
    text = line.repeat(lines) + 'x'.repeat(room - lines * encoded);
  } else {
    const word = 'lorem ipsum dolor sit amet consectetur ';
    text = word.repeat(Math.ceil(room / word.length)).slice(0, room);
  }
  const body = chatBody(false, 1, text, CONTENT);
  if (body.length !== bytes && room > 0) {
    throw new Error(`padded body is ${body.length} bytes, wanted ${bytes}`);
  }
  return body;
}

const scenarios = {
  throughput: { executor: 'constant-vus', exec: 'chat', vus: VUS, duration: DURATION },
  latency: {
    executor: 'constant-arrival-rate',
    exec: 'chat',
    rate: RATE,
    timeUnit: '1s',
    duration: DURATION,
    preAllocatedVUs: Math.min(MAX_VUS, Math.max(20, Math.ceil(RATE / 20))),
    maxVUs: MAX_VUS,
  },
  stream: { executor: 'constant-vus', exec: 'stream', vus: VUS, duration: DURATION },
  large: { executor: 'constant-vus', exec: 'large', vus: VUS, duration: DURATION },
};
if (!(MODE in scenarios)) {
  throw new Error(`MODE must be one of ${Object.keys(scenarios).join(', ')}, got "${MODE}"`);
}

export const options = {
  scenarios: { [MODE]: Object.assign({ gracefulStop: '30s' }, scenarios[MODE]) },
  summaryTrendStats: ['avg', 'min', 'med', 'p(90)', 'p(95)', 'p(99)', 'max'],
  discardResponseBodies: false,
  noConnectionReuse: false,
};

export function chat() {
  const res = http.post(URL, chatBody(false, CHAT_TOKENS, `bench ${__VU}-${__ITER}`), PARAMS);
  // A completion body, without parsing JSON (k6's parser would cost the
  // generator more than the proxies cost).
  complete.add(res.status === 200 && typeof res.body === 'string' &&
    res.body.indexOf('"chat.completion"') >= 0);
}

export function stream() {
  const res = http.post(URL, chatBody(true, STREAM_TOKENS, `stream ${__VU}-${__ITER}`), PARAMS);
  complete.add(res.status === 200 && typeof res.body === 'string' &&
    res.body.trimEnd().endsWith('data: [DONE]'));
}

let largeBody = null;

export function large() {
  if (largeBody === null) {
    largeBody = paddedBody(BODY_BYTES);
  }
  const res = http.post(URL, largeBody, PARAMS);
  complete.add(res.status === 200 && typeof res.body === 'string' &&
    res.body.indexOf('"chat.completion"') >= 0);
}

export function handleSummary(data) {
  return { [SUMMARY_PATH]: JSON.stringify(data, null, 2) };
}
