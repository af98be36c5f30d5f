// Adaptive routing (superadmin): the deployment-wide policy, the routes it
// reaches, and the scoreboard each reporting node pushes.

import { useState, type FormEvent } from "react";
import { ApiError, type Policy, type PolicyAnswer, type RouteRow, type Telemetry, type TelemetryNode } from "../lib/api";
import { FIELD_HELP } from "../lib/api.gen";
import { fieldText, parseField } from "../lib/edit";
import { useApp, useConfig, useGet, useLeaveGuard, useNow } from "../lib/hooks";
import { formatAgo, formatDuration, formatMs, formatNumber, formatPrice, formatScore, formatTime } from "../lib/format";
import { href } from "../lib/router";
import { Badge, Empty, ErrorBox, FileManagedBadge, Help, Link, Loading, LoadState, PageHead, Panel, Table } from "../components/common";
import { OFFERED } from "../lib/picker";
import { DEFAULT_STRATEGY } from "../lib/strategies";

const POLICY = FIELD_HELP.AdaptiveRoutingTable;
const NUMBERS: { key: keyof Policy; label: string; kind: "float" | "int"; help: string }[] = [
  { key: "latency_weight", label: "Latency weight", kind: "float", help: POLICY.latency_weight },
  { key: "cost_weight", label: "Cost weight", kind: "float", help: POLICY.cost_weight },
  { key: "load_weight", label: "Load weight", kind: "float", help: POLICY.load_weight },
  { key: "exploration_ratio", label: "Exploration ratio", kind: "float", help: POLICY.exploration_ratio },
  { key: "min_samples", label: "Min samples", kind: "int", help: POLICY.min_samples },
];

const TELEMETRY_POLL_MS = 5000;

export function AdaptiveRouting() {
  const { isSuperadmin } = useApp();
  const policy = useGet<PolicyAnswer>("/api/v1/adaptive-routing-policy");
  const config = useConfig();
  /// The stored policy after a save here, which the scoreboard compares
  /// each node's policy with.
  const [savedPolicy, setSavedPolicy] = useState<Policy | null>(null);
  if (!isSuperadmin) {
    return (
      <PageHead title="Adaptive routing">
        The adaptive-routing policy and its scoreboard need a superadmin token.
      </PageHead>
    );
  }
  const adaptiveRoutes = (config.data?.routes.data ?? []).filter((r) => r.strategy === "adaptive").map((r) => r.model ?? "");
  const adaptiveGroups = (config.data?.groups.data ?? []).filter((g) => g.strategy === "adaptive").map((g) => g.slug ?? "");
  return (
    <>
      <PageHead title="Adaptive routing">
        One policy for the whole deployment governs every route and provider group on the <code>adaptive</code>{" "}
        strategy. Until a route has evidence (min samples, latency for two targets) and while the policy is off, it
        routes like pipeline, so changing the policy moves no traffic on routes that have not engaged.
      </PageHead>
      <LoadState loaded={policy} what="the policy">
        {(answer) => (
          <PolicyForm
            key={JSON.stringify(answer.data ?? answer.policy)}
            answer={answer}
            adaptiveRoutes={adaptiveRoutes}
            adaptiveGroups={adaptiveGroups}
            onSaved={setSavedPolicy}
          />
        )}
      </LoadState>
      <Scoreboard stored={savedPolicy ?? policy.data?.data ?? policy.data?.policy ?? null} />
    </>
  );
}

function PolicyForm(props: {
  answer: PolicyAnswer;
  adaptiveRoutes: string[];
  adaptiveGroups: string[];
  onSaved: (stored: Policy) => void;
}) {
  const { api, session } = useApp();
  const stored = props.answer.data ?? props.answer.policy ?? {};
  const managedBy = props.answer.managed_by;
  const readOnly = session.read_only || managedBy !== undefined;
  const [enabled, setEnabled] = useState(stored.enabled ?? false);
  const [texts, setTexts] = useState<Record<string, string>>(() =>
    Object.fromEntries(NUMBERS.map(({ key }) => [key, fieldText(stored[key])])),
  );
  const [result, setResult] = useState<{ answer: PolicyAnswer; sent: Policy } | null>(null);
  const [error, setError] = useState<ApiError | string | null>(null);
  const [busy, setBusy] = useState(false);
  const formText = JSON.stringify([enabled, texts]);
  const [savedText, setSavedText] = useState(formText);
  const dirty = !readOnly && formText !== savedText;
  useLeaveGuard(dirty && !busy);

  const save = async (e: FormEvent) => {
    e.preventDefault();
    setError(null);
    setResult(null);
    const sent: Policy = { enabled };
    const problems: string[] = [];
    for (const { key, kind } of NUMBERS) {
      const parsed = parseField(kind, texts[key]);
      if (!parsed.ok) problems.push(`${key}: ${parsed.error}`);
      else if (parsed.value !== undefined) (sent as Record<string, unknown>)[key] = parsed.value;
    }
    if (problems.length) return setError(problems.join("; "));
    setBusy(true);
    try {
      const answer = await api.request<PolicyAnswer>("PUT", "/api/v1/adaptive-routing-policy", sent);
      const now = answer.data ?? {};
      const stored = Object.fromEntries(NUMBERS.map(({ key }) => [key, fieldText(now[key])]));
      setEnabled(now.enabled ?? false);
      setTexts(stored);
      setSavedText(JSON.stringify([now.enabled ?? false, stored]));
      setResult({ answer, sent });
      props.onSaved(now);
    } catch (err) {
      setError(err as ApiError);
    }
    setBusy(false);
  };

  const changed = result
    ? NUMBERS.filter(({ key }) => result.sent[key] !== undefined && result.sent[key] !== result.answer.data?.[key])
    : [];
  const policyWarnings = (result?.answer.warnings ?? []).filter((w) => w.field?.startsWith("adaptive_routing"));
  const otherWarnings = (result?.answer.warnings ?? []).filter((w) => !w.field?.startsWith("adaptive_routing"));
  const meta = result?.answer ?? props.answer;
  const routes = result?.answer.affected_routes ?? props.adaptiveRoutes;
  const groups = result?.answer.affected_provider_groups ?? props.adaptiveGroups;

  return (
    <>
      <form className="panel" onSubmit={save} data-testid="policy-form">
        <div className="panel-head">
          <h2>Policy</h2>
          <span className="muted small">
            {managedBy
              ? `managed by ${managedBy}`
              : meta.updated_by
                ? `last changed by ${meta.updated_by}, ${formatTime(meta.updated_at)}`
                : "never changed: defaults"}
          </span>
        </div>
        {readOnly && (
          <div className="notice info">
            <strong>Read-only on this node.</strong>
            <p>The policy is managed by {managedBy ?? "rolter.toml"}: change it there.</p>
          </div>
        )}
        <fieldset disabled={readOnly || busy} style={{ border: "none", padding: 0, margin: 0 }}>
          <div className="form-grid">
            <label htmlFor="policy-enabled">Kill switch</label>
            <div>
              <label className="check">
                <input id="policy-enabled" type="checkbox" checked={enabled} onChange={(e) => setEnabled(e.target.checked)} />
                Adaptive routing enabled
              </label>
              <div className="small muted" data-testid="kill-switch-state">
                {enabled
                  ? "On: engaged routes blend latency, cost and load."
                  : "Off: every adaptive route routes like pipeline."}
              </div>
              <Help text={POLICY.enabled} />
            </div>
            {NUMBERS.map(({ key, label, help }) => (
              <PolicyField
                key={key}
                id={`policy-${key}`}
                label={label}
                help={help}
                value={texts[key]}
                onChange={(v) => setTexts((t) => ({ ...t, [key]: v }))}
              />
            ))}
          </div>
        </fieldset>
        <div style={{ marginTop: 14 }}>
          <ErrorBox error={error} title="The policy was refused" />
          {result && !dirty && (
            <div className={`notice ${policyWarnings.length || changed.length ? "warn" : "ok"}`} data-testid="policy-saved">
              <strong>
                Saved{result.answer.version != null ? ` — configuration version ${result.answer.version}` : ""}
                {changed.length ? "; the server clamped some values, the form shows what it stored." : "."}
              </strong>
              {changed.length > 0 && (
                <ul data-testid="clamped">
                  {changed.map(({ key }) => (
                    <li key={key}>
                      <code>{key}</code>: you entered {String(result.sent[key])}, stored {String(result.answer.data?.[key])}
                    </li>
                  ))}
                </ul>
              )}
              {policyWarnings.length > 0 && (
                <ul data-testid="policy-warnings">
                  {policyWarnings.map((w, i) => (
                    <li key={i} className="error-message">
                      {w.field && <code>{w.field}</code>} {w.message}
                    </li>
                  ))}
                </ul>
              )}
              {otherWarnings.length > 0 && (
                <p className="small muted">
                  Other warnings of the configuration: {otherWarnings.map((w) => `${w.field ?? ""} ${w.message}`).join("; ")}
                </p>
              )}
            </div>
          )}
        </div>
        {!readOnly && (
          <div className="form-actions">
            <button className="primary" type="submit" disabled={busy}>
              {busy ? "Saving…" : "Save policy"}
            </button>
          </div>
        )}
      </form>
      <Assignment routes={routes} groups={groups} />
    </>
  );
}

/// The routes and groups on adaptive, and moving a route onto it or off it
/// (the route editors' pickers leave adaptive out, per the specification:
/// this screen, superadmin only, is where a route joins it).
function Assignment(props: { routes: string[]; groups: string[] }) {
  const { api, canEdit } = useApp();
  const config = useConfig();
  const [choice, setChoice] = useState("");
  const [offTo, setOffTo] = useState<Record<string, string>>({});
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<ApiError | null>(null);
  const [done, setDone] = useState<string | null>(null);
  // The rows the node answered to a move, shown at once; the configuration
  // read after the move replaces them.
  const [written, setWritten] = useState<{ base: unknown; rows: Record<string, RouteRow> }>({ base: null, rows: {} });
  const overrides = written.base === config.data ? written.rows : {};
  const rows = (config.data?.routes.data ?? []).map((r) => overrides[r.model ?? ""] ?? r);
  const fileManaged = config.data?.routes.file_managed ?? [];
  // The saved list, or the configuration as it is now once a move is made.
  const onAdaptive = done === null ? props.routes : rows.filter((r) => r.strategy === "adaptive").map((r) => r.model ?? "");
  const candidates = rows.filter((r) => r.strategy !== "adaptive" && !fileManaged.includes(r.model ?? ""));

  const move = async (model: string, strategy: string | null) => {
    const row = rows.find((r) => r.model === model);
    if (!row) return;
    setBusy(true);
    setError(null);
    const next = { ...row };
    if (strategy === null) delete next.strategy;
    else next.strategy = strategy;
    try {
      const answer = (await api.replace("routes", model, next)) as { data: RouteRow; version?: number };
      setWritten({ base: config.data, rows: { ...overrides, [model]: answer.data } });
      setDone(
        `${model} ${strategy === "adaptive" ? "is on adaptive" : `moved to ${strategy ?? "the default strategy"}`}${
          answer.version != null ? ` — configuration version ${answer.version}` : ""
        }.`,
      );
      setChoice("");
      config.reload();
    } catch (e) {
      setError(e as ApiError);
    }
    setBusy(false);
  };

  return (
    <Panel title="Routes on adaptive" aside="the routes and provider groups this policy governs" testId="affected-routes">
      {error && <ErrorBox error={error} title="The move was refused" />}
      {done && (
        <div className="notice ok" data-testid="assignment-saved" role="status">
          <strong>{done}</strong>
        </div>
      )}
      {onAdaptive.length === 0 && props.groups.length === 0 ? (
        <Empty>No route or provider group uses the adaptive strategy: the policy changes nothing yet.</Empty>
      ) : (
        <Table columns={[{ label: "Route or group" }, canEdit && { label: "Move off adaptive" }]}>
          {onAdaptive.map((r) => (
            <tr key={r} data-testid={`adaptive-route-${r}`}>
              <td>
                <Link to={href.model(r)}>{r}</Link> {fileManaged.includes(r) && <FileManagedBadge />}
              </td>
              {canEdit && (
                <td>
                  {fileManaged.includes(r) ? (
                    <span className="faint small">set in rolter.toml</span>
                  ) : (
                    <span className="inline-form">
                      <select
                        aria-label={`Strategy for ${r}`}
                        value={offTo[r] ?? ""}
                        onChange={(e) => setOffTo((o) => ({ ...o, [r]: e.target.value }))}
                      >
                        <option value="">{DEFAULT_STRATEGY} (default)</option>
                        {OFFERED.filter((k) => k !== DEFAULT_STRATEGY).map((k) => (
                          <option key={k} value={k}>
                            {k}
                          </option>
                        ))}
                      </select>
                      <button type="button" disabled={busy} onClick={() => move(r, offTo[r] || null)}>
                        Move off
                      </button>
                    </span>
                  )}
                </td>
              )}
            </tr>
          ))}
          {props.groups.map((g) => (
            <tr key={g}>
              <td>
                <Link to={href.editGroup(g)}>{g}/&lt;model&gt;</Link> <span className="muted small">provider group</span>
              </td>
              {canEdit && <td className="faint small">groups keep the strategy their row sets</td>}
            </tr>
          ))}
        </Table>
      )}
      {canEdit && (
        <div className="inline-form" style={{ marginTop: 12 }}>
          <label htmlFor="adaptive-add">Put a route on adaptive</label>
          <select id="adaptive-add" value={choice} onChange={(e) => setChoice(e.target.value)}>
            <option value="">choose a route</option>
            {candidates.map((r) => (
              <option key={r.model} value={r.model ?? ""}>
                {r.model} ({r.strategy ?? DEFAULT_STRATEGY})
              </option>
            ))}
          </select>
          <button type="button" className="primary" disabled={busy || !choice} onClick={() => move(choice, "adaptive")}>
            Put on adaptive
          </button>
        </div>
      )}
    </Panel>
  );
}

function PolicyField(props: { id: string; label: string; help: string; value: string; onChange: (v: string) => void }) {
  return (
    <>
      <label htmlFor={props.id}>{props.label}</label>
      <div>
        <input id={props.id} inputMode="decimal" value={props.value} onChange={(e) => props.onChange(e.target.value)} />
        <Help text={props.help} />
      </div>
    </>
  );
}

function Scoreboard(props: { stored: Policy | null }) {
  const { session } = useApp();
  const telemetry = useGet<Telemetry>("/api/v1/adaptive-routing-telemetry", {
    intervalMs: TELEMETRY_POLL_MS,
  });
  const now = useNow();
  return (
    <Panel
      title="Scoreboard"
      aside={`per route, one entry per reporting node · samples older than 60 s are left out · refreshed every ${TELEMETRY_POLL_MS / 1000} s${
        telemetry.updatedAt ? ` · updated ${formatDuration(now - telemetry.updatedAt)} ago` : ""
      }`}
      testId="scoreboard"
    >
      {telemetry.error && <ErrorBox error={telemetry.error} title="Could not read the telemetry" />}
      {telemetry.loading && !telemetry.data && <Loading what="the telemetry" />}
      {telemetry.data && telemetry.data.routes.length === 0 && (
        <Empty>
          {session.node_role === "control"
            ? "No gateway reports an adaptive route right now. Gateways push their scores every telemetry_interval_secs (15 s by default) for the routes they run on adaptive."
            : "This node runs no route on the adaptive strategy."}
        </Empty>
      )}
      {telemetry.data?.routes.map((route) => (
        <div key={route.model} style={{ marginBottom: 18 }} data-testid={`scoreboard-${route.model}`}>
          <h3>
            <Link to={href.model(route.model)}>{route.model}</Link>{" "}
            <span className="muted small">
              {route.nodes.length} node{route.nodes.length === 1 ? "" : "s"}
            </span>
          </h3>
          {route.nodes.map((node) => (
            <NodeEntry key={node.node_id} node={node} stored={props.stored} now={now} />
          ))}
        </div>
      ))}
    </Panel>
  );
}

function samePolicy(a: Policy, b: Policy | null): boolean {
  if (!b) return true;
  return (["enabled", "latency_weight", "cost_weight", "load_weight", "exploration_ratio", "min_samples"] as const).every(
    (k) => b[k] === undefined || a[k] === b[k],
  );
}

function NodeEntry(props: { node: TelemetryNode; stored: Policy | null; now: number }) {
  const { node } = props;
  const d = node.decisions;
  const total = d.blend + d.fallback + d.exploration;
  const pct = (n: number) => (total ? `${(n / total) * 100}%` : "0%");
  const p = node.policy;
  return (
    <div className="node-block" data-testid="scoreboard-node">
      <div className="node-meta">
        <strong className="mono">{node.node_id}</strong>
        <span className="muted small">{node.reported_at ? `reported ${formatAgo(node.reported_at, props.now)}` : "this node"}</span>
        {d.engaged ? <Badge tone="ok">blend engaged</Badge> : <Badge>not engaged: routing like pipeline</Badge>}
        <span style={{ minWidth: 200 }}>
          <div className="split" title={`blend ${d.blend}, fallback ${d.fallback}, exploration ${d.exploration}`}>
            <span className="blend" style={{ width: pct(d.blend) }} />
            <span className="fallback" style={{ width: pct(d.fallback) }} />
            <span className="exploration" style={{ width: pct(d.exploration) }} />
          </div>
          <div className="legend">
            <span>
              <i style={{ background: "var(--accent)" }} />
              blend {formatNumber(d.blend)}
            </span>
            <span>
              <i style={{ background: "#9aa5b4" }} />
              fallback {formatNumber(d.fallback)}
            </span>
            <span>
              <i style={{ background: "#e0a43a" }} />
              exploration {formatNumber(d.exploration)}
            </span>
          </div>
        </span>
      </div>
      <div className="small muted" style={{ marginBottom: 6 }}>
        Runs: {p.enabled ? "on" : "off"} · latency {p.latency_weight} · cost {p.cost_weight} · load {p.load_weight} ·
        exploration {p.exploration_ratio} · min samples {p.min_samples}{" "}
        {!samePolicy(p, props.stored) && <Badge tone="warn">differs from the stored policy: not converged yet</Badge>}
      </div>
      <Table
        className="wrap-heads"
        columns={[
          { label: "Target" },
          {
            label: (
              <span title="latency ratio × latency weight + cost ratio × cost weight + load ratio × load weight: at most the sum of the weights; the highest is picked">
                Score (higher wins)
              </span>
            ),
            num: true,
          },
          { label: <span title="Best latency / this target's: 1 is the fastest">Latency ratio (1 = best)</span>, num: true },
          { label: <span title="Best price / this target's: 1 is the cheapest">Cost ratio (1 = best)</span>, num: true },
          { label: <span title="(Least in flight + 1) / (this target's + 1): 1 is the least loaded">Load ratio (1 = best)</span>, num: true },
          { label: "Latency EWMA (ms, lower is better)", num: true },
          { label: "Price (per Mtok, in + out)", num: true },
          { label: "In flight (requests)", num: true },
          { label: "Picks", num: true },
          { label: "Last pick", num: true },
        ]}
      >
        {node.targets.map((t) => (
          <tr key={t.target}>
            <td>
              {t.provider} <span className="muted">→</span> <span className="mono">{t.upstream_model}</span>
            </td>
            <td className="num">
              <strong>{formatScore(t.score)}</strong>
            </td>
            <td className="num">{formatScore(t.latency)}</td>
            <td className="num">{formatScore(t.cost)}</td>
            <td className="num">{formatScore(t.load)}</td>
            <td className="num">{formatMs(t.latency_ms)}</td>
            <td className="num">{formatPrice(t.price)}</td>
            <td className="num">{formatNumber(t.in_flight)}</td>
            <td className="num">{formatNumber(t.picks)}</td>
            <td className="num">{t.last_pick_age_ms == null ? "never" : `${formatDuration(t.last_pick_age_ms)} ago`}</td>
          </tr>
        ))}
      </Table>
    </div>
  );
}
