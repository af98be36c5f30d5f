// The dashboard end to end, in headless Chromium (Debian's `chromium`,
// driven by playwright-core; no browser is downloaded), against real
// processes: a control node on a fresh PostgreSQL database, a gateway
// polling it, a standalone node, and fake engines (one publishing vLLM KV
// events). Every screen is saved as a screenshot in ui/e2e-artifacts/.
//
//   npm run e2e          (after `npm run build` and `cargo build`)
//
// Environment: ROLTER_BIN (default ../target/debug/rolter), CHROMIUM
// (default /usr/bin/chromium), ROLTER_E2E_PG (default
// postgres://postgres@127.0.0.1:5432/postgres: a server where the suite may
// create and drop a database).

import assert from "node:assert/strict";
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";
import {
  createDatabase,
  eventually,
  lastStep,
  log,
  nodeLogs,
  startEngine,
  startNode,
  stopAll,
  tempDir,
} from "./harness.mjs";

const UI = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const BIN = resolve(process.env.ROLTER_BIN ?? join(UI, "..", "target", "debug", "rolter"));
const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";
const PG = process.env.ROLTER_E2E_PG ?? "postgres://postgres@127.0.0.1:5432/postgres";
const DIST = join(UI, "dist");
const ARTIFACTS = join(UI, "e2e-artifacts");
const DOCS_URL = "https://docs.rolter.example/latest";

const TOKENS = {
  superadmin: "e2e-superadmin-token",
  admin: "e2e-admin-token",
  viewer: "e2e-viewer-token",
};
const INTERNAL_TOKEN = "e2e-internal-token";
const MODEL = "Qwen/Qwen3-8B";
const SMALL_MODEL = "Qwen/Qwen3-0.6B";

const ADMIN_TOKENS = `
[[admin_tokens]]
name = "ops-superadmin"
token_env = "E2E_SUPERADMIN_TOKEN"
role = "superadmin"

[[admin_tokens]]
name = "ops-admin"
token_env = "E2E_ADMIN_TOKEN"
role = "admin"

[[admin_tokens]]
name = "ops-viewer"
token_env = "E2E_VIEWER_TOKEN"
role = "viewer"
`;

const TOKEN_ENV = {
  E2E_SUPERADMIN_TOKEN: TOKENS.superadmin,
  E2E_ADMIN_TOKEN: TOKENS.admin,
  E2E_VIEWER_TOKEN: TOKENS.viewer,
};

const CHROMIUM_ARGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
  "--no-first-run",
  "--disable-quic",
];

/// The control API of `node` with `token`: [status, body].
async function api(node, method, path, body, token = TOKENS.superadmin) {
  const response = await fetch(`${node.admin}/api/v1/${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, ...(body ? { "content-type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await response.text();
  let json;
  try {
    json = JSON.parse(text);
  } catch {
    json = text;
  }
  return [response.status, json];
}

async function chat(node, model, content) {
  const response = await fetch(`${node.proxy}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model, max_tokens: 4, messages: [{ role: "user", content }] }),
  });
  await response.arrayBuffer();
  return response.status;
}

/// Like `chat`, but answers the provider that served the request.
async function chatTarget(node, model, content) {
  const response = await fetch(`${node.proxy}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model, max_tokens: 4, messages: [{ role: "user", content }] }),
  });
  await response.arrayBuffer();
  assert.equal(response.status, 200, `${model}: status ${response.status}`);
  return (response.headers.get("x-rolter-target") ?? "").split("/")[0];
}

let shot = 0;
async function screenshot(page, name) {
  shot += 1;
  const file = join(ARTIFACTS, `${String(shot).padStart(2, "0")}-${name}.png`);
  await page.screenshot({ path: file, fullPage: true });
  log(`screenshot ${file.slice(UI.length + 1)}`);
}

/// Opens a screen from the navigation.
async function nav(page, name) {
  await page.locator("nav a").filter({ hasText: new RegExp(`^${name}`) }).click();
}

async function signIn(page, base, token) {
  await page.goto(`${base}/ui/`);
  await page.locator("#token").fill(token);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByTestId("token-name").waitFor();
}

async function signOut(page) {
  await page.getByRole("button", { name: "Sign out" }).click();
  await page.locator("#token").waitFor();
}

/// The text of the option a <select> shows.
async function shownOption(page, selector) {
  return page.$eval(selector, (select) => select.options[select.selectedIndex]?.text ?? "");
}

/// A Prometheus text exposition as samples: name, labels, value.
function samples(text) {
  const out = [];
  for (const line of text.split("\n")) {
    const m = line.match(/^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/);
    if (!m) continue;
    const labels = {};
    for (const pair of (m[2] ?? "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[pair[1]] = pair[2];
    out.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return out;
}

/// One route's counters per target, summed over `nodes`' /metrics: what
/// the Fleet screen must show for it.
async function routeCounters(nodes, route) {
  const byTarget = new Map();
  for (const node of nodes) {
    const text = await (await fetch(`${node.admin}/metrics`)).text();
    for (const s of samples(text)) {
      if (s.labels.route !== route || !s.labels.target) continue;
      const c = byTarget.get(s.labels.target) ?? { attempts: 0, failures: 0, latencySum: 0, latencyCount: 0 };
      if (s.name === "rolter_route_target_attempts_total" && s.labels.outcome === "dispatched") c.attempts += s.value;
      if (s.name === "rolter_route_target_attempts_total" && s.labels.outcome === "failed") c.failures += s.value;
      if (s.name === "rolter_upstream_latency_seconds_sum") c.latencySum += s.value;
      if (s.name === "rolter_upstream_latency_seconds_count") c.latencyCount += s.value;
      byTarget.set(s.labels.target, c);
    }
  }
  return byTarget;
}

/// The dashboard's own formats (src/lib/format.ts), for comparing text.
function formatMs(ms) {
  if (ms == null || !Number.isFinite(ms)) return "—";
  if (ms < 10) return `${ms.toFixed(1)} ms`;
  if (ms < 10_000) return `${Math.round(ms)} ms`;
  return `${(ms / 1000).toFixed(1)} s`;
}
const formatPercent = (f) => `${(f * 100).toFixed(0)}%`;

/// The numbers the Fleet screen shows for each target row of `route`.
async function fleetRows(page, route) {
  return page.getByTestId(`fleet-route-${route}`).getByTestId("fleet-target").evaluateAll((rows) =>
    rows.map((row) => {
      const cell = (id) => row.querySelector(`[data-testid="${id}"]`)?.textContent.trim() ?? null;
      return {
        target: row.dataset.target,
        picks: cell("route-picks"),
        failures: cell("route-failures"),
        latency: cell("route-latency"),
        share: cell("route-share"),
      };
    }),
  );
}

/// What those rows must read, from the gateways' counters.
function expectedRows(counters, weights) {
  const total = [...counters.values()].reduce((n, c) => n + c.attempts, 0);
  const totalWeight = Object.values(weights).reduce((a, b) => a + b, 0);
  return Object.keys(weights).map((target) => {
    const c = counters.get(target) ?? { attempts: 0, failures: 0, latencySum: 0, latencyCount: 0 };
    const mean = c.latencyCount ? (c.latencySum / c.latencyCount) * 1000 : null;
    return {
      target,
      // Every attempt is a pick of the route's balancer (retries included).
      picks: String(c.attempts),
      failures: String(c.failures),
      latency: mean == null ? "—" : `${formatMs(mean)}mean`,
      share: `${total ? formatPercent(c.attempts / total) : "—"} / ${formatPercent(weights[target] / totalWeight)}`,
    };
  });
}

/// Every screen is wide enough for its content: nothing sticks out of the
/// page, no table cell is squeezed until its text folds letter by letter,
/// and no column head runs into the next.
async function checkLayout(page, what) {
  /* global document, window -- evaluated in the page */
  const problems = await page.evaluate(() => {
    const found = [];
    if (document.documentElement.scrollWidth > window.innerWidth + 1) {
      found.push(`the page is ${document.documentElement.scrollWidth} px wide in a ${window.innerWidth} px window`);
    }
    // A cell squeezed until its text folds a few letters per line.
    for (const cell of document.querySelectorAll("td")) {
      const box = cell.getBoundingClientRect();
      if (box.height > 600 && box.width < 200) found.push(`a cell ${Math.round(box.width)} px wide and ${Math.round(box.height)} px tall: "${cell.textContent.slice(0, 40)}"`);
    }
    for (const row of document.querySelectorAll("thead tr")) {
      const heads = [...row.querySelectorAll("th")].map((th) => {
        const range = document.createRange();
        range.selectNodeContents(th);
        return { text: th.textContent, box: range.getBoundingClientRect(), cell: th.getBoundingClientRect() };
      });
      for (const h of heads) {
        if (h.box.width > 0 && (h.box.left < h.cell.left - 1 || h.box.right > h.cell.right + 1)) {
          found.push(`the head "${h.text}" runs out of its column`);
        }
      }
    }
    return found;
  });
  assert.deepEqual(problems, [], `${what}: ${problems.join("; ")}`);
}

async function main() {
  assert.ok(existsSync(join(DIST, "index.html")), `no build in ${DIST}: run \`npm run build\` first`);
  assert.ok(existsSync(BIN), `no rolter binary at ${BIN}: run \`cargo build\` first or set ROLTER_BIN`);
  assert.ok(existsSync(CHROMIUM), `no Chromium at ${CHROMIUM}: \`apt-get install chromium\` (make deps) or set CHROMIUM`);
  rmSync(ARTIFACTS, { recursive: true, force: true });
  mkdirSync(ARTIFACTS, { recursive: true });

  // --- Processes --------------------------------------------------------
  const databaseUrl = createDatabase(PG);
  const [kvEngine, plainEngine] = await Promise.all([
    startEngine(BIN, "gpu-kv", ["--kv-events", "tcp://127.0.0.1:0", "--kv-replay", "tcp://127.0.0.1:0", "--ttft-ms", "3"]),
    startEngine(BIN, "file-gpu", ["--ttft-ms", "8"]),
  ]);
  log(`engines: ${kvEngine.url} (KV events ${kvEngine.kvEvents}), ${plainEngine.url}`);

  const nodeEnv = { ...TOKEN_ENV, ROLTER_UI_DIR: DIST, ROLTER_INTERNAL_TOKEN: INTERNAL_TOKEN };
  const control = await startNode(
    BIN,
    "control",
    `[server]
role = "control"

[control_plane]
database_url_env = "DATABASE_URL"
internal_token_env = "ROLTER_INTERNAL_TOKEN"
node_id = "control-1"

[[providers]]
name = "file-gpu"
base_url = "${plainEngine.url}"

# Set in the file to a strategy the dashboard's picker does not offer.
[[routes]]
model = "file-adaptive"
strategy = "adaptive"
targets = [{ provider = "file-gpu", model = "${MODEL}" }]

[[catalog]]
model = "${MODEL}"
input_per_mtok = 0.15
output_per_mtok = 0.6

[[catalog]]
model = "${SMALL_MODEL}"
input_per_mtok = 0.02
output_per_mtok = 0.08
${ADMIN_TOKENS}`,
    { ...nodeEnv, DATABASE_URL: databaseUrl, ROLTER_DOCS_URL: DOCS_URL },
  );
  const gatewayConfig = (id) => `[server]
role = "gateway"
require_api_key = false

[control_plane]
url = "${control.admin}"
internal_token_env = "ROLTER_INTERNAL_TOKEN"
node_id = "${id}"
poll_interval_secs = 1
telemetry_interval_secs = 1
`;
  const [gateway, gateway2] = await Promise.all([
    startNode(BIN, "gateway", gatewayConfig("gw-1"), nodeEnv),
    startNode(BIN, "gateway-2", gatewayConfig("gw-2"), nodeEnv),
  ]);
  const standalone = await startNode(
    BIN,
    "standalone",
    `[server]
require_api_key = false

[[providers]]
name = "GPU KV"
slug = "gpu-kv"
base_url = "${kvEngine.url}"
kv_events = { endpoint = "${kvEngine.kvEvents}", replay_endpoint = "${kvEngine.kvReplay}" }

[[providers]]
name = "GPU plain"
slug = "gpu-plain"
base_url = "${plainEngine.url}"

[[routes]]
model = "chat-precise"
strategy = "precise_cache_aware"
targets = [{ provider = "gpu-kv", model = "${MODEL}" }, { provider = "gpu-plain", model = "${MODEL}" }]

[[routes]]
model = "chat-weighted"
strategy = "weighted"
targets = [{ provider = "gpu-kv", model = "${MODEL}", weight = 3 }, { provider = "gpu-plain", model = "${MODEL}" }]

[[catalog]]
model = "${MODEL}"
input_per_mtok = 0.15
output_per_mtok = 0.6
${ADMIN_TOKENS}`,
    nodeEnv,
  );
  log(`nodes: control ${control.admin}, gateways ${gateway.admin} ${gateway2.admin}, standalone ${standalone.admin}`);

  // A route whose strategy was set outside the dashboard (through the API)
  // to one the picker does not offer.
  let [status, body] = await api(control, "POST", "routes", {
    model: "api-adaptive",
    strategy: "adaptive",
    targets: [
      { provider: "file-gpu", model: MODEL, weight: 1 },
      { provider: "file-gpu", model: SMALL_MODEL, weight: 1 },
    ],
  });
  assert.equal(status, 201, JSON.stringify(body));

  // A fresh profile (--user-data-dir) for this run only.
  const profile = tempDir("rolter-e2e-chromium-");
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    args: CHROMIUM_ARGS,
    headless: true,
    viewport: { width: 1440, height: 900 },
  });
  try {
    const page = context.pages()[0] ?? (await context.newPage());
    const pageErrors = [];
    page.on("pageerror", (e) => pageErrors.push(e.message));
    // A wait that runs out is a failure, not a slow machine: CI's machine
    // may be busier than a workstation, so each wait has room to spare.
    page.setDefaultTimeout(20_000);
    const base = control.admin;

    // --- Sign in ----------------------------------------------------------
    log("sign in");
    await page.goto(`${base}/ui/`);
    await page.locator("#token").fill("not-a-token");
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.getByRole("alert").filter({ hasText: "does not accept this token" }).waitFor();
    await screenshot(page, "sign-in-refused");
    await page.locator("#token").fill(TOKENS.superadmin);
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.getByTestId("token-name").filter({ hasText: "ops-superadmin" }).waitFor();
    assert.equal(new URL(page.url()).pathname, "/ui/fleet");
    await page.getByTestId("fleet-route-file-adaptive").waitFor();
    await screenshot(page, "fleet-control-node");

    // --- Create a provider with a KV-event source -------------------------
    log("create a provider with a KV-event source");
    await nav(page, "Providers");
    await page.getByRole("link", { name: "New provider" }).click();
    await page.locator("#provider-name").fill("gpu-kv");
    await page.locator("#provider-base_url").fill(kvEngine.url);
    await page.getByTestId("kv-toggle").check();
    await page.locator("#kv-endpoint").fill(kvEngine.kvEvents);
    await page.locator("#kv-replay_endpoint").fill(kvEngine.kvReplay);
    await page.locator("#kv-block_size").fill("16");
    await page.locator("#provider-max_concurrency").fill("8");
    await page.getByTestId("engine-metrics-toggle").check();
    await page.locator("#em-poll_interval_ms").fill("250");
    await screenshot(page, "provider-new-with-kv-events");
    await page.getByRole("button", { name: "Create provider" }).click();
    await page.waitForURL(`${base}/ui/providers/gpu-kv`);
    [status, body] = await api(control, "GET", "providers/gpu-kv");
    assert.equal(status, 200, JSON.stringify(body));
    assert.deepEqual(body.data.kv_events, {
      endpoint: kvEngine.kvEvents,
      replay_endpoint: kvEngine.kvReplay,
      block_size: 16,
    });
    assert.equal(body.data.max_concurrency, 8);
    assert.deepEqual(body.data.engine_metrics, { poll_interval_ms: 250 });
    assert.equal(await page.locator("#kv-endpoint").inputValue(), kvEngine.kvEvents);
    assert.equal(await page.locator("#em-poll_interval_ms").inputValue(), "250");
    await screenshot(page, "provider-sheet");
    await page.getByRole("link", { name: "All providers" }).click();
    await page.getByTestId("provider-row-gpu-kv").waitFor();
    await screenshot(page, "providers");

    // --- Create a route ---------------------------------------------------
    log("create a route");
    await nav(page, "Routing rules");
    await page.getByRole("link", { name: "New route" }).click();
    await page.locator("#rule-model").fill("e2e-chat");
    await page.getByLabel("Provider of line 1").selectOption("gpu-kv");
    await page.getByLabel("Model of line 1").fill(MODEL);
    await page.getByRole("button", { name: "Create route" }).click();
    await page.waitForURL(`${base}/ui/routes/edit/e2e-chat`);
    await page.getByTestId("saved").waitFor();
    [status, body] = await api(control, "GET", "routes/e2e-chat");
    assert.equal(status, 200, JSON.stringify(body));
    // The picker was not touched: the route names no strategy (the default).
    assert.equal(body.data.strategy, undefined, JSON.stringify(body));
    assert.match(await shownOption(page, "#rule-strategy"), /^round_robin \(default/);

    // --- Switch its strategy ------------------------------------------------
    log("switch the route's strategy");
    await page.locator("#rule-strategy").selectOption("precise_cache_aware");
    const hint = page.getByTestId("telemetry-hint");
    await hint.waitFor();
    assert.match(await hint.innerText(), /needs a KV-event source/);
    assert.match(await hint.innerText(), /provider sheet/);
    assert.equal(
      await hint.getByTestId("docs-link").getAttribute("href"),
      `${DOCS_URL}/strategies.md#setting-up-the-telemetry-strategies`,
    );
    await page.getByRole("button", { name: "Save changes" }).click();
    await page.getByTestId("saved").waitFor();
    [status, body] = await api(control, "GET", "routes/e2e-chat");
    assert.equal(body.data.strategy, "precise_cache_aware");
    await screenshot(page, "route-editor-strategy-with-hint");

    // --- Unsaved changes: "Saved" goes, leaving asks first ------------------
    log("unsaved-change guard");
    await page.getByLabel("Model of line 1").fill(`${MODEL}-edited`);
    assert.equal(await page.getByTestId("saved").count(), 0, "Saved stays after a new edit");
    await page.getByTestId("unsaved").waitFor();
    let asked = null;
    page.once("dialog", (dialog) => {
      asked = dialog.message();
      dialog.dismiss();
    });
    await nav(page, "Fleet");
    await eventually("the leave question", 10_000, async () => asked !== null);
    assert.match(asked, /not saved/);
    assert.equal(new URL(page.url()).pathname, "/ui/routes/edit/e2e-chat", "left despite the answer");
    assert.equal(await page.getByLabel("Model of line 1").inputValue(), `${MODEL}-edited`);
    await screenshot(page, "route-editor-unsaved");
    page.once("dialog", (dialog) => dialog.accept());
    await nav(page, "Fleet");
    await page.waitForURL(`${base}/ui/fleet`);
    [status, body] = await api(control, "GET", "routes/e2e-chat");
    assert.equal(body.data.targets[0].model, MODEL, "the abandoned edit was saved");
    await page.goto(`${base}/ui/routes/edit/e2e-chat`);
    await page.getByTestId("rule-editor").waitFor();

    // --- Reload: the picker shows the held value --------------------------------
    log("reload the page");
    await page.reload();
    await page.getByTestId("rule-editor").waitFor();
    assert.equal(await page.locator("#rule-strategy").inputValue(), "precise_cache_aware");
    assert.equal(await shownOption(page, "#rule-strategy"), "precise_cache_aware");
    await page.getByTestId("telemetry-hint").waitFor();
    await screenshot(page, "route-editor-after-reload");

    // --- A route split into prefill and decode pools -------------------------
    log("create a disaggregated route");
    await nav(page, "Routing rules");
    await page.getByRole("link", { name: "New route" }).click();
    await page.locator("#rule-model").fill("e2e-split");
    await page.getByLabel("Provider of line 1").selectOption("gpu-kv");
    await page.getByLabel("Split prefill and decode").check();
    await page.locator("#rule-pd-protocol").selectOption("vllm");
    await page.locator("#rule-pd-min").fill("128");
    await page.getByLabel("Prefill provider of line 1").selectOption("file-gpu");
    await page.getByRole("button", { name: "Create route" }).click();
    await page.waitForURL(`${base}/ui/routes/edit/e2e-split`);
    await page.getByTestId("saved").waitFor();
    [status, body] = await api(control, "GET", "routes/e2e-split");
    assert.equal(status, 200, JSON.stringify(body));
    assert.equal(body.data.targets, undefined, JSON.stringify(body));
    assert.equal(body.data.disaggregation.protocol, "vllm", JSON.stringify(body));
    assert.equal(body.data.disaggregation.min_prefill_tokens, 128, JSON.stringify(body));
    assert.equal(body.data.disaggregation.prefill[0].provider, "file-gpu", JSON.stringify(body));
    assert.equal(body.data.disaggregation.decode[0].provider, "gpu-kv", JSON.stringify(body));
    await page.reload();
    await page.getByTestId("rule-editor").waitFor();
    assert.equal(await page.getByLabel("Split prefill and decode").isChecked(), true);
    assert.equal(await page.getByLabel("Prefill provider of line 1").inputValue(), "file-gpu");
    // Its decode pool names no strategy: it runs the decode default.
    assert.match(await shownOption(page, "#rule-strategy"), /^power_of_two \(default/);
    // Its cache guard is the prefill pool's (cache_aware by default).
    assert.equal(await page.locator("#rule-guard-min").getAttribute("placeholder"), "2");
    await screenshot(page, "route-editor-disaggregation");

    // --- A strategy the picker does not offer survives an unrelated edit ------
    log("save an unrelated edit of a route on adaptive");
    await page.goto(`${base}/ui/routes/edit/api-adaptive`);
    await page.getByTestId("rule-editor").waitFor();
    assert.equal(await page.locator("#rule-strategy").inputValue(), "adaptive");
    assert.match(await shownOption(page, "#rule-strategy"), /^adaptive \(current/);
    await page.getByLabel("Weight of line 1").fill("4");
    await page.getByRole("button", { name: "Save changes" }).click();
    await page.getByTestId("saved").waitFor();
    [status, body] = await api(control, "GET", "routes/api-adaptive");
    assert.equal(body.data.strategy, "adaptive", JSON.stringify(body));
    assert.equal(body.data.targets[0].weight, 4, JSON.stringify(body));
    assert.equal(await shownOption(page, "#rule-strategy").then((t) => t.startsWith("adaptive")), true);
    await screenshot(page, "route-editor-held-adaptive");

    // A refusal names the row by its key and sits on the line it is about;
    // the browser's own check says it is the browser's.
    log("errors on their field");
    await page.getByLabel("Weight of line 1").fill("0");
    await page.getByRole("button", { name: "Save changes" }).click();
    await page.getByTestId("entry-problem").waitFor();
    assert.match(await page.getByTestId("entry-problem").innerText(), /^Line 1: weight: /);
    const refusedBox = await page.getByTestId("error").innerText();
    assert.match(refusedBox, /The node refused this \(HTTP 422\)/);
    assert.match(refusedBox, /routes\["api-adaptive"\]\.targets\[0\]\.weight/);
    await screenshot(page, "route-editor-refusal-on-its-line");
    await page.getByLabel("Weight of line 1").fill("many");
    await page.getByRole("button", { name: "Save changes" }).click();
    await page.getByTestId("error").filter({ hasText: "Not sent: checked in the browser" }).waitFor();
    assert.equal(await page.getByTestId("error").getAttribute("data-source"), "browser");
    await page.getByLabel("Weight of line 1").fill("4");
    await page.getByTestId("unsaved").waitFor({ state: "detached" });

    // The file's route: shown as held, read-only, nothing to save.
    await page.goto(`${base}/ui/routes/edit/file-adaptive`);
    await page.getByTestId("file-managed-notice").waitFor();
    assert.equal(await page.locator("#rule-strategy").inputValue(), "adaptive");
    assert.equal(await page.locator("#rule-strategy").isDisabled(), true);
    assert.equal(await page.getByRole("button", { name: "Save changes" }).count(), 0);
    await screenshot(page, "route-editor-file-managed");

    // --- A provider group ---------------------------------------------------
    log("create a provider group");
    await nav(page, "Routing rules");
    await page.getByRole("link", { name: "New provider group" }).click();
    await page.locator("#rule-name").fill("Edge fleet");
    await page.locator("#rule-slug").fill("edge");
    assert.equal(await page.locator("#rule-strategy").inputValue(), "");
    assert.equal(
      await page.$$eval("#rule-strategy option", (options) => options.some((o) => o.value === "adaptive")),
      false,
      "the picker offers adaptive",
    );
    await page.locator("#rule-strategy").selectOption("weighted");
    await page.getByLabel("Provider of line 1").selectOption("gpu-kv");
    await page.getByRole("button", { name: "Add member" }).click();
    await page.getByLabel("Provider of line 2").selectOption("file-gpu");
    await page.getByLabel("Weight of line 2").fill("3");
    await page.getByRole("button", { name: "Create provider group" }).click();
    await page.waitForURL(`${base}/ui/groups/edit/edge`);
    await page.getByTestId("saved").waitFor();
    [status, body] = await api(control, "GET", "provider-groups/edge");
    assert.deepEqual(body.data, {
      name: "Edge fleet",
      slug: "edge",
      strategy: "weighted",
      members: [{ provider: "gpu-kv" }, { provider: "file-gpu", weight: 3 }],
    });
    await screenshot(page, "group-editor");

    // --- Fleet: known traffic through two gateways ------------------------
    log("fleet: known traffic through two gateways");
    const weightedTargets = [
      { provider: "gpu-kv", model: MODEL, weight: 3 },
      { provider: "file-gpu", model: MODEL, weight: 1 },
    ];
    const weights = Object.fromEntries(weightedTargets.map((t) => [`${t.provider}/${t.model}`, t.weight]));
    [status, body] = await api(control, "POST", "routes", { model: "e2e-weighted", strategy: "weighted", targets: weightedTargets });
    assert.equal(status, 201, JSON.stringify(body));
    for (const gw of [gateway, gateway2]) {
      await eventually(`${gw.name} to serve e2e-weighted`, 20_000, async () => (await chat(gw, "e2e-weighted", "warm")) === 200);
    }
    for (let i = 0; i < 8; i += 1) assert.equal(await chat(gateway, "e2e-weighted", `one ${i}`), 200);
    for (let i = 0; i < 12; i += 1) assert.equal(await chat(gateway2, "e2e-weighted", `two ${i}`), 200);
    const summedCounters = await routeCounters([gateway, gateway2], "e2e-weighted");
    const served = [...summedCounters.values()].reduce((n, c) => n + c.attempts, 0);
    assert.ok(served >= 22, `the gateways counted ${served} attempts`);
    await nav(page, "Fleet");
    await page.getByTestId("gateway-gw-1").waitFor();
    await page.getByTestId("gateway-gw-2").waitFor();
    const summed = expectedRows(summedCounters, weights);
    await eventually("the summed fleet to show the gateways' counters", 30_000, async () => {
      const rows = await fleetRows(page, "e2e-weighted");
      assert.deepEqual(rows, summed);
      return true;
    });
    assert.equal(await page.getByTestId("tile-in-flight").locator(".value").innerText(), "0");
    await checkLayout(page, "fleet at 1440 px");
    await screenshot(page, "fleet-two-gateways-summed");
    await page.getByLabel("Showing").selectOption("gw:gw-1");
    const one = expectedRows(await routeCounters([gateway], "e2e-weighted"), weights);
    await eventually("gw-1 alone to show its own counters", 20_000, async () => {
      assert.deepEqual(await fleetRows(page, "e2e-weighted"), one);
      return true;
    });
    await screenshot(page, "fleet-one-gateway");
    await page.getByLabel("Showing").selectOption("all");
    // The model sheet and the provider sheet of a control node show the
    // gateways' figures too.
    await page.goto(`${base}/ui/models/e2e-weighted`);
    await page.getByTestId("model-live-source").filter({ hasText: "summed over 2 reporting gateways" }).waitFor();
    await eventually("the model sheet's picks to be the gateways'", 20_000, async () => {
      const picks = await page.getByTestId("model-route-picks").allInnerTexts();
      assert.deepEqual(picks, summed.map((row) => row.picks));
      return true;
    });
    await page.goto(`${base}/ui/providers/gpu-kv`);
    for (const id of ["gw-1", "gw-2"]) {
      assert.match(await page.getByTestId(`provider-on-${id}`).innerText(), /fresh[\s\S]*healthy/);
    }
    await screenshot(page, "provider-sheet-on-each-gateway");

    // --- Catalog, model sheet, routing rules --------------------------------
    log("model catalog, model sheet, routing rules");
    await nav(page, "Model catalog");
    const adaptiveRow = page.getByTestId("catalog-row-api-adaptive");
    await adaptiveRow.waitFor();
    assert.match(await adaptiveRow.innerText(), /file-gpu\s+80%\s+file-gpu\s+20%/);
    assert.match(await page.getByTestId("catalog-row-e2e-chat").innerText(), /Weights ignored \(precise_cache_aware\)/);
    assert.match(await adaptiveRow.innerText(), /0\.02–0\.15/);
    await page.getByRole("button", { name: "Add a price" }).click();
    await page.getByLabel("Upstream model").fill("org/e2e-small");
    await page.getByLabel("Input price").fill("0.05");
    await page.getByLabel("Output price").fill("0.2");
    await page.getByTestId("price-list").getByRole("button", { name: "Save" }).click();
    await page.getByTestId("price-list").getByText("org/e2e-small").waitFor();
    assert.match(await page.getByTestId("price-list").getByTestId("saved").innerText(), /Created — configuration version \d+/);
    [status, body] = await api(control, "GET", "catalog/org/e2e-small");
    assert.deepEqual(body.data, { model: "org/e2e-small", input_per_mtok: 0.05, output_per_mtok: 0.2 });
    await screenshot(page, "model-catalog");
    await page.getByRole("link", { name: "e2e-chat" }).first().click();
    await page.getByTestId("model-targets").waitFor();
    assert.match(await page.getByTestId("model-targets").innerText(), /ignored by precise_cache_aware/);
    await screenshot(page, "model-sheet");
    await nav(page, "Routing rules");
    await page.getByTestId("rule-card-api-adaptive").waitFor();
    assert.equal(await page.getByTestId("rule-card-api-adaptive").getByTestId("traffic-share").count(), 2);
    assert.equal(await page.getByTestId("rule-card-e2e-chat").getByTestId("traffic-share").count(), 0);
    assert.match(await page.getByTestId("rule-card-e2e-chat").innerText(), /Weights are ignored by precise_cache_aware/);
    await screenshot(page, "routing-rules");

    // --- Adaptive routing: clamping and refusal, verbatim ------------------
    log("adaptive routing policy");
    await eventually("the gateway to serve api-adaptive", 20_000, async () => (await chat(gateway, "api-adaptive", "hi")) === 200);
    for (let i = 0; i < 6; i += 1) {
      assert.equal(await chat(gateway, i % 2 ? "api-adaptive" : "file-adaptive", `hello ${i}`), 200);
    }
    await nav(page, "Adaptive routing");
    await page.getByTestId("policy-form").waitFor();
    await page.locator("#policy-enabled").check();
    await page.locator("#policy-latency_weight").fill("1");
    await page.locator("#policy-cost_weight").fill("-1");
    await page.locator("#policy-load_weight").fill("0.5");
    await page.locator("#policy-exploration_ratio").fill("0.9");
    await page.locator("#policy-min_samples").fill("5");
    await page.getByRole("button", { name: "Save policy" }).click();
    const saved = page.getByTestId("policy-saved");
    await saved.waitFor();
    assert.equal(await page.locator("#policy-exploration_ratio").inputValue(), "0.5");
    assert.equal(await page.locator("#policy-cost_weight").inputValue(), "0");
    const warnings = await page.getByTestId("policy-warnings").innerText();
    assert.match(warnings, /0\.9 is above 0\.5; using 0\.5/);
    assert.match(await page.getByTestId("affected-routes").innerText(), /api-adaptive[\s\S]*file-adaptive|file-adaptive[\s\S]*api-adaptive/);
    await screenshot(page, "adaptive-routing-clamped");
    assert.match(await page.locator("label.check").filter({ has: page.locator("#policy-enabled") }).innerText(), /Adaptive routing enabled/);

    // --- Adaptive assignment: a route onto adaptive and off it, from here --
    log("adaptive assignment");
    await page.locator("#adaptive-add").selectOption("e2e-chat");
    await page.getByRole("button", { name: "Put on adaptive" }).click();
    await page.getByTestId("assignment-saved").filter({ hasText: "e2e-chat is on adaptive" }).waitFor();
    assert.equal(await page.getByTestId("adaptive-route-e2e-chat").count(), 1);
    [status, body] = await api(control, "GET", "routes/e2e-chat");
    assert.equal(body.data.strategy, "adaptive", JSON.stringify(body));
    await screenshot(page, "adaptive-assignment-on");
    await page.getByLabel("Strategy for e2e-chat").selectOption("precise_cache_aware");
    await page.getByTestId("adaptive-route-e2e-chat").getByRole("button", { name: "Move off" }).click();
    await page.getByTestId("assignment-saved").filter({ hasText: "moved to precise_cache_aware" }).waitFor();
    [status, body] = await api(control, "GET", "routes/e2e-chat");
    assert.equal(body.data.strategy, "precise_cache_aware", JSON.stringify(body));
    // The list follows the move at once, with the notice.
    assert.equal(await page.getByTestId("adaptive-route-e2e-chat").count(), 0);
    // A file-managed route is listed, not movable.
    assert.match(await page.getByTestId("adaptive-route-file-adaptive").innerText(), /set in rolter\.toml/);
    // The gateway converges on the new policy (a new snapshot, so new
    // balancers) and reports its scores for the traffic that follows.
    let sent = 0;
    await eventually("gw-1 to report api-adaptive on the new policy", 30_000, async () => {
      for (let i = 0; i < 4; i += 1) assert.equal(await chat(gateway, "api-adaptive", `traffic ${sent++}`), 200);
      const [, telemetry] = await api(control, "GET", "adaptive-routing-telemetry");
      const node = telemetry.routes?.find((r) => r.model === "api-adaptive")?.nodes.find((n) => n.node_id === "gw-1");
      return node?.policy.enabled && node.policy.exploration_ratio === 0.5 && node.targets.some((t) => t.picks > 0);
    });
    await page.reload();
    const board = page.getByTestId("scoreboard-api-adaptive");
    await board.getByText("gw-1", { exact: true }).waitFor();
    assert.match(await board.innerText(), /Runs: on · latency 1 · cost 0 · load 0\.5 · exploration 0\.5 · min samples 5/);
    await screenshot(page, "adaptive-routing-scoreboard");
    // An all-zero blend is refused; the message is the server's, verbatim.
    for (const key of ["latency_weight", "cost_weight", "load_weight"]) await page.locator(`#policy-${key}`).fill("0");
    await page.getByRole("button", { name: "Save policy" }).click();
    const refusal = page.getByTestId("error");
    await refusal.waitFor();
    const [refusedStatus, refused] = await api(control, "PUT", "adaptive-routing-policy", {
      enabled: true,
      latency_weight: 0,
      cost_weight: 0,
      load_weight: 0,
      exploration_ratio: 0.5,
      min_samples: 5,
    });
    assert.equal(refusedStatus, 422);
    assert.ok((await refusal.innerText()).includes(refused.error.message), await refusal.innerText());
    await screenshot(page, "adaptive-routing-refused");

    // --- Cluster ------------------------------------------------------------
    log("cluster");
    // The refused policy is still in the form: leaving asks, and we leave.
    let leaving = null;
    page.once("dialog", (dialog) => {
      leaving = dialog.message();
      dialog.accept();
    });
    await nav(page, "Cluster");
    await page.waitForURL(`${base}/ui/cluster`);
    assert.match(leaving ?? "", /not saved/, "left a refused policy without asking");
    await page.getByTestId("cluster-node").filter({ hasText: "gw-1" }).waitFor();
    await page.getByTestId("cluster-node").filter({ hasText: "gw-2" }).waitFor();
    const self = page.getByTestId("cluster-node").filter({ hasText: "control-1" });
    await self.waitFor();
    assert.match(await self.innerText(), new RegExp(control.admin.replace("http://", "").replace(/\./g, "\\.")));
    const gwRow = await page.getByTestId("cluster-node").filter({ hasText: "gw-1" }).innerText();
    assert.ok(gwRow.includes(gateway.admin.replace("http://", "")), `gw-1 listed at its outgoing port: ${gwRow}`);
    assert.match(gwRow, /applied/);
    // Times carry their zone.
    assert.match(gwRow, /UTC|GMT|[+-]\d/);
    await page.getByTestId("audit-log").getByText("route.update").first().waitFor();
    const diff = await page.getByTestId("audit-log").getByTestId("audit-diff").first().innerText();
    assert.match(diff, /strategy\s+adaptive\s+precise_cache_aware/, diff);
    await screenshot(page, "cluster");
    await nav(page, "Fleet");
    await page.getByTestId("fleet-route-e2e-chat").waitFor();
    // The charts: the gateways' pushes as 5 s points, summed.
    const weighted = page.getByTestId("fleet-route-e2e-weighted");
    await eventually("the traffic-share chart and sparklines to draw", 20_000, async () => {
      const chart = weighted.getByTestId("share-chart");
      const points = Number(await chart.getAttribute("data-points"));
      const sparks = await weighted.getByTestId("sparkline").evaluateAll((all) => all.map((s) => Number(s.dataset.points)));
      return points >= 2 && (await chart.locator("canvas").count()) === 1 && sparks.every((n) => n >= 2);
    });
    assert.equal(await weighted.getByTestId("sparkline").locator("canvas").count(), 2);
    await screenshot(page, "fleet-control-node-after-edits");

    // --- A frozen control node: the fleet says so within one poll timeout ---
    log("frozen control node");
    const indicator = page.getByTestId("fleet-updated");
    await eventually("the fleet to be live", 20_000, async () => (await indicator.getAttribute("data-state")) === "live");
    control.signal("SIGSTOP");
    const frozenAt = Date.now();
    try {
      // Stale within one poll timeout (4 s): an answer is late once it is a
      // poll interval and a second old.
      await eventually("the fleet to show stale numbers", 4_000, async () =>
        ["stale", "failed"].includes(await indicator.getAttribute("data-state")),
      );
      log(`stale shown ${Date.now() - frozenAt} ms after the freeze`);
      // A poll every second, each given 4 s: failed within 5 s of the freeze.
      await eventually("the fleet to say the node is not answering", 8_000, async () => (await indicator.getAttribute("data-state")) === "failed");
      log(`not answering shown ${Date.now() - frozenAt} ms after the freeze`);
      assert.match(await indicator.innerText(), /Not answering · updated \d+ s ago/);
      assert.equal(await page.getByTestId("fleet-data").getAttribute("class"), "dimmed");
      await screenshot(page, "fleet-node-not-answering");
    } finally {
      control.signal("SIGCONT");
    }
    await eventually("the fleet to be live again", 30_000, async () => (await indicator.getAttribute("data-state")) === "live");

    // --- An admin edits but has no adaptive routing ------------------------------
    log("admin role");
    await signOut(page);
    await signIn(page, base, TOKENS.admin);
    assert.equal(await page.locator("nav a").filter({ hasText: "Adaptive routing" }).count(), 0);
    await nav(page, "Routing rules");
    await page.getByRole("link", { name: "New route" }).waitFor();

    // --- A viewer cannot edit -------------------------------------------------
    log("viewer role");
    await signOut(page);
    await signIn(page, base, TOKENS.viewer);
    assert.equal(await page.locator("nav a").filter({ hasText: "Adaptive routing" }).count(), 0);
    await nav(page, "Routing rules");
    await page.getByTestId("viewer-notice").waitFor();
    assert.equal(await page.getByRole("link", { name: "New route" }).count(), 0);
    await page.getByTestId("rule-card-e2e-chat").getByRole("link", { name: "View" }).click();
    await page.getByTestId("rule-editor").waitFor();
    assert.equal(await page.locator("#rule-strategy").isDisabled(), true);
    assert.equal(await page.getByRole("button", { name: "Save changes" }).count(), 0);
    await screenshot(page, "viewer-route-read-only");
    await page.goto(`${base}/ui/providers/gpu-kv`);
    await page.getByTestId("provider-form").waitFor();
    assert.equal(await page.locator("#provider-base_url").isDisabled(), true);
    assert.equal(await page.getByRole("button", { name: "Save changes" }).count(), 0);
    [status, body] = await api(control, "PUT", "routes/e2e-chat", { targets: [{ provider: "gpu-kv" }] }, TOKENS.viewer);
    assert.equal(status, 403, JSON.stringify(body));
    await screenshot(page, "viewer-provider-read-only");

    // --- A standalone node: read-only, file-managed, live fleet ---------------
    log("standalone node");
    // gpu-kv publishes KV events only for prompts that fill a block, and
    // neither route is bound to send one there: go on (boundedly) until it has.
    let kvServed = 0;
    for (let i = 0; i < 40 && kvServed < 2; i += 1) {
      const long = `a long shared prefix for the kv cache ${"x ".repeat(64)} ${i}`;
      for (const route of ["chat-precise", "chat-weighted"]) {
        if ((await chatTarget(standalone, route, long)) === "gpu-kv") kvServed += 1;
      }
      assert.equal(await chat(standalone, "chat-weighted", `hello ${i}`), 200);
    }
    assert.ok(kvServed > 0, "gpu-kv served none of the long prompts");
    const standalonePage = await context.newPage();
    standalonePage.on("pageerror", (e) => pageErrors.push(e.message));
    await signIn(standalonePage, standalone.admin, TOKENS.superadmin);
    await standalonePage.getByTestId("fleet-route-chat-precise").waitFor();
    await eventually("the KV index of gpu-kv to be fresh on the fleet screen", 30_000, async () =>
      /fresh/.test(await standalonePage.getByTestId("fleet-route-chat-precise").getByTestId("kv-cell").innerText()),
    );
    await screenshot(standalonePage, "fleet-standalone-live");

    // A refused reload is on screen, with its reason, until the next one.
    log("refused reload on the standalone node");
    const goodConfig = readFileSync(standalone.configPath, "utf8");
    writeFileSync(standalone.configPath, goodConfig.replace('provider = "gpu-plain"', 'provider = "gpu-missing"'));
    let reload = await fetch(`${standalone.admin}/admin/reload`, {
      method: "POST",
      headers: { authorization: `Bearer ${TOKENS.superadmin}` },
    });
    assert.equal(reload.status, 422, await reload.text());
    const refusedNotice = standalonePage.getByTestId("last-reload");
    await eventually("the refused reload on the fleet screen", 20_000, async () => (await refusedNotice.getAttribute("data-applied")) === "false");
    assert.match(await refusedNotice.innerText(), /refused its last reload[\s\S]*gpu-missing/);
    await screenshot(standalonePage, "fleet-standalone-reload-refused");
    await nav(standalonePage, "Cluster");
    await standalonePage.getByTestId("node-reload").filter({ hasText: "refused" }).waitFor();
    assert.match(await standalonePage.getByTestId("node-reload").innerText(), /gpu-missing/);
    await screenshot(standalonePage, "cluster-standalone-reload-refused");
    writeFileSync(standalone.configPath, goodConfig);
    reload = await fetch(`${standalone.admin}/admin/reload`, {
      method: "POST",
      headers: { authorization: `Bearer ${TOKENS.superadmin}` },
    });
    assert.equal(reload.status, 200, await reload.text());
    await standalonePage.getByTestId("node-reload").filter({ hasText: "applied" }).waitFor();
    await nav(standalonePage, "Fleet");
    await nav(standalonePage, "Routing rules");
    const notice = standalonePage.getByTestId("read-only-notice");
    await notice.waitFor();
    assert.match(await notice.innerText(), /file-managed/);
    assert.equal(await standalonePage.getByRole("link", { name: "New route" }).count(), 0);
    await screenshot(standalonePage, "routing-rules-standalone-read-only");
    await standalonePage.goto(`${standalone.admin}/ui/routes/edit/chat-precise`);
    const standaloneHint = standalonePage.getByTestId("telemetry-hint");
    await standaloneHint.waitFor();
    // No documentation host here: the hint reads fine without a link.
    assert.equal(await standaloneHint.getByTestId("docs-link").count(), 0);
    assert.match(await standaloneHint.innerText(), /Target providers without one: GPU plain\./);
    assert.equal(await standalonePage.locator("#rule-strategy").isDisabled(), true);
    await screenshot(standalonePage, "route-editor-standalone-hint-without-docs");
    await standalonePage.goto(`${standalone.admin}/ui/providers/gpu-kv`);
    await standalonePage.getByTestId("live-sources").getByText("fresh", { exact: true }).waitFor();
    await screenshot(standalonePage, "provider-sheet-standalone-live-sources");

    // --- Every screen at 1440 and 900 px -------------------------------------
    log("every screen at 1440 and 900 px");
    await signOut(page);
    await signIn(page, base, TOKENS.superadmin);
    const screens = [
      ["fleet", "fleet"],
      ["models", "model-catalog"],
      [`models/e2e-weighted`, "model-sheet"],
      ["routes", "routing-rules"],
      ["routes/edit/e2e-weighted", "route-editor"],
      ["providers", "providers"],
      ["providers/gpu-kv", "provider-sheet"],
      ["adaptive", "adaptive-routing"],
      ["cluster", "cluster"],
    ];
    for (const width of [1440, 900]) {
      await page.setViewportSize({ width, height: 900 });
      for (const [path, name] of screens) {
        await page.goto(`${base}/ui/${path}`);
        await page.locator("main h1").first().waitFor();
        await page.waitForLoadState("networkidle").catch(() => {});
        await checkLayout(page, `${name} at ${width} px`);
        await screenshot(page, `${width}-${name}`);
      }
    }
    // The dark palette, for a system set to dark.
    await page.setViewportSize({ width: 1440, height: 900 });
    await page.emulateMedia({ colorScheme: "dark" });
    for (const [path, name] of [
      ["fleet", "fleet"],
      ["cluster", "cluster"],
    ]) {
      await page.goto(`${base}/ui/${path}`);
      await page.locator("main h1").first().waitFor();
      await page.waitForLoadState("networkidle").catch(() => {});
      await screenshot(page, `dark-${name}`);
    }
    await page.emulateMedia({ colorScheme: "light" });
    await page.setViewportSize({ width: 900, height: 900 });

    // At 900 px the menu folds away and opens on demand.
    assert.equal(await page.locator("nav a").filter({ hasText: /^Fleet/ }).isVisible(), false);
    await page.getByRole("button", { name: "Menu" }).click();
    await page.locator("nav a").filter({ hasText: /^Fleet/ }).click();
    await page.waitForURL(`${base}/ui/fleet`);
    assert.equal(await page.locator("nav a").filter({ hasText: /^Fleet/ }).isVisible(), false, "the menu stayed open");
    await page.setViewportSize({ width: 1440, height: 900 });

    assert.deepEqual(pageErrors, [], `errors in the page: ${pageErrors.join("; ")}`);
  } finally {
    await context.close();
  }
}

const started = Date.now();
let failed = false;
const stop = async (signal) => {
  log(`${signal}: stopping`);
  await stopAll();
  process.exit(130);
};
process.once("SIGINT", () => stop("SIGINT"));
process.once("SIGTERM", () => stop("SIGTERM"));
try {
  await main();
  log(`passed in ${((Date.now() - started) / 1000).toFixed(1)} s; screenshots in ${ARTIFACTS}`);
} catch (e) {
  failed = true;
  // The nodes' logs first and the failure last: CI keeps an output's tail.
  process.stderr.write(`\n${nodeLogs()}\n\nE2E FAILED after "${lastStep()}": ${e.stack ?? e}\n`);
} finally {
  await stopAll();
}
process.exit(failed ? 1 : 0);
