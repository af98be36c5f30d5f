// The processes the dashboard's end-to-end suite runs against: a fresh
// PostgreSQL database, `rolter fake-llm` engines and `rolter serve` nodes
// (control, gateway, standalone), all on loopback with free ports. Every
// process started here is stopped by `stopAll()`, which the suite runs on
// success, failure and SIGINT/SIGTERM alike.

import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, writeFileSync, openSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

const children = [];
const cleanups = [];

let lastLogged = "";

export function log(message) {
  lastLogged = message;
  const at = new Date().toISOString().slice(11, 23);
  process.stdout.write(`[e2e ${at}] ${message}\n`);
}

/// The last line `log` wrote: where a failure happened.
export function lastStep() {
  return lastLogged;
}

export async function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/// Polls `check` every 100 ms until it returns something truthy, at most
/// `limitMs`; fails naming `what`.
export async function eventually(what, limitMs, check) {
  const deadline = Date.now() + limitMs;
  let last;
  while (Date.now() < deadline) {
    try {
      const value = await check();
      if (value) return value;
    } catch (e) {
      last = e;
    }
    await sleep(100);
  }
  throw new Error(`not within ${limitMs} ms: ${what}${last ? ` (last error: ${last.message})` : ""}`);
}

export function tempDir(prefix) {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/// A database of its own on the PostgreSQL at `adminUrl`, dropped by
/// `stopAll()`.
export function createDatabase(adminUrl) {
  const name = `rolter_ui_e2e_${process.pid}_${Date.now()}`;
  execFileSync("psql", [adminUrl, "-v", "ON_ERROR_STOP=1", "-q", "-c", `CREATE DATABASE ${name}`], { stdio: "pipe" });
  cleanups.push(() => {
    try {
      execFileSync("psql", [adminUrl, "-q", "-c", `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`], { stdio: "pipe" });
    } catch (e) {
      log(`dropping ${name} failed: ${e.message}`);
    }
  });
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  return url.toString();
}

function track(child, name, logFile) {
  const entry = { child, name, logFile, exited: false };
  child.on("exit", () => (entry.exited = true));
  children.push(entry);
  return entry;
}

/// `rolter fake-llm` on a free port; resolves with its addresses once it
/// printed them.
export async function startEngine(bin, name, extra = []) {
  const child = spawn(bin, ["fake-llm", "--name", name, "--listen", "127.0.0.1:0", ...extra], {
    stdio: ["ignore", "pipe", "ignore"],
  });
  track(child, `engine ${name}`, null);
  const line = await new Promise((resolve, reject) => {
    let buffer = "";
    const timer = setTimeout(() => reject(new Error(`fake engine ${name} printed no address`)), 10_000);
    child.stdout.on("data", (chunk) => {
      buffer += chunk;
      const end = buffer.indexOf("\n");
      if (end >= 0) {
        clearTimeout(timer);
        resolve(buffer.slice(0, end));
      }
    });
    child.on("exit", (code) => reject(new Error(`fake engine ${name} exited with ${code}`)));
  });
  child.stdout.resume();
  const word = (key) => {
    const words = line.split(/\s+/);
    const i = words.indexOf(key);
    return i >= 0 ? words[i + 1] : null;
  };
  const http = line.match(/http:\/\/(\S+)/)?.[1];
  if (!http) throw new Error(`unexpected first line from fake-llm: ${line}`);
  return { name, url: `http://${http}`, kvEvents: word("kv-events"), kvReplay: word("replay") };
}

/// `rolter serve` on `config` (a rolter.toml without listeners: they are
/// added here), waiting until `/readyz` answers 200.
export async function startNode(bin, name, config, env) {
  const dir = tempDir(`rolter-e2e-${name}-`);
  const listen = await freePort();
  const admin = await freePort();
  const listeners = `listen = ["127.0.0.1:${listen}"]\nadmin_listen = "127.0.0.1:${admin}"\n`;
  const text = config.includes("[server]\n")
    ? config.replace("[server]\n", `[server]\n${listeners}`)
    : `[server]\n${listeners}\n${config}`;
  writeFileSync(join(dir, "rolter.toml"), text);
  writeFileSync(
    join(dir, "pingora.yaml"),
    `---\nversion: 1\nthreads: 1\npid_file: ${join(dir, "rolter.pid")}\nupgrade_sock: ${join(dir, "upgrade.sock")}\ngrace_period_seconds: 1\ngraceful_shutdown_timeout_seconds: 1\n`,
  );
  const logFile = join(dir, `${name}.log`);
  const out = openSync(logFile, "a");
  const child = spawn(bin, ["serve", "-c", join(dir, "pingora.yaml"), "--config", join(dir, "rolter.toml")], {
    stdio: ["ignore", out, out],
    env: { ...process.env, RUST_LOG: "warn", ...env },
  });
  const entry = track(child, name, logFile);
  const node = {
    name,
    proxy: `http://127.0.0.1:${listen}`,
    admin: `http://127.0.0.1:${admin}`,
    configPath: join(dir, "rolter.toml"),
    log: () => readFileSync(logFile, "utf8"),
    /// SIGSTOP freezes it (a node that stops answering), SIGCONT thaws it.
    signal: (sig) => child.kill(sig),
  };
  await eventually(`${name} to be ready`, 30_000, async () => {
    if (entry.exited) throw new Error(`${name} exited:\n${node.log()}`);
    const response = await fetch(`${node.admin}/readyz`).catch(() => null);
    return response?.ok;
  }).catch((e) => {
    throw new Error(`${e.message}\n--- ${name} log ---\n${node.log().slice(-3000)}`);
  });
  return node;
}

/// Stops every process started here (SIGTERM, then SIGKILL after 3 s) and
/// removes what was created.
export async function stopAll() {
  for (const entry of children) {
    // A frozen process handles SIGTERM only once thawed.
    if (!entry.exited) entry.child.kill("SIGCONT");
    if (!entry.exited) entry.child.kill("SIGTERM");
  }
  const deadline = Date.now() + 3000;
  while (children.some((e) => !e.exited) && Date.now() < deadline) await sleep(50);
  for (const entry of children) {
    if (!entry.exited) entry.child.kill("SIGKILL");
  }
  while (children.some((e) => !e.exited) && Date.now() < deadline + 2000) await sleep(50);
  for (const cleanup of cleanups.splice(0).reverse()) cleanup();
}

/// The log tails of the nodes, for a failure report.
export function nodeLogs() {
  return children
    .filter((e) => e.logFile)
    .map((e) => {
      let text = "";
      try {
        text = readFileSync(e.logFile, "utf8");
      } catch {
        // gone already
      }
      return `--- ${e.name} (last lines) ---\n${text.split("\n").slice(-25).join("\n")}`;
    })
    .join("\n");
}
