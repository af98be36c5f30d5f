// The providers list and the provider sheet: every field of a
// `[[providers]]` table, its `kv_events`, `lmcache` and `engine_metrics`
// telemetry sources included, editable for providers kept in the database
// (control nodes).

import { useState, type FormEvent, type ReactNode } from "react";
import {
  ApiError,
  type EngineMetricsSource,
  type EngineTelemetry,
  type KvEventsSource,
  type LmcacheSource,
  type ProviderRow,
} from "../lib/api";
import { FIELD_HELP } from "../lib/api.gen";
import { applyEdits, fieldText, rowProblems, type FieldEdit, type FieldKind } from "../lib/edit";
import { useApp, useConfig, useGet, useLeaveGuard, useLiveState } from "../lib/hooks";
import { formatDuration, formatNumber, formatPercent } from "../lib/format";
import { distinctTargets, usersOf } from "../lib/routing";
import { href, navigate } from "../lib/router";
import {
  Badge,
  Empty,
  ErrorBox,
  FileManagedBadge,
  Help,
  Link,
  Loading,
  LoadState,
  PageHead,
  Panel,
  ReadOnlyNotice,
  SavedNotice,
  Table,
  type SavedAnswer,
} from "../components/common";

export function Providers() {
  const { canEdit } = useApp();
  const config = useConfig();
  return (
    <>
      <PageHead
        title="Providers"
        actions={
          canEdit && (
            <Link className="button primary" to={href.newProvider()}>
              New provider
            </Link>
          )
        }
      >
        The engines rolter sends requests to, and the telemetry sources the cache-aware strategies read:
        <code>kv_events</code> for precise_cache_aware, <code>lmcache</code> for lmcache_aware.
      </PageHead>
      <ReadOnlyNotice />
      <LoadState loaded={config} what="the providers">
        {(data) => (
          <Panel testId="providers-table">
            {data.providers.data.length === 0 ? (
              <Empty>No providers yet.</Empty>
            ) : (
              <Table
                columns={[
                  { label: "Name" },
                  { label: "Slug" },
                  { label: "Base URL" },
                  { label: "KV events" },
                  { label: "LMCache" },
                  { label: "Used by" },
                  { label: "Defined in" },
                ]}
              >
                {data.providers.data.map((provider) => {
                  const users = usersOf(provider, data.routes.data, data.groups.data);
                  const slug = provider.slug ?? "";
                  return (
                    <tr key={slug} data-testid={`provider-row-${slug}`}>
                      <td>
                        <Link to={href.provider(slug)}>{provider.name}</Link>
                      </td>
                      <td className="mono">{slug}</td>
                      <td className="mono small">{provider.base_url}</td>
                      <td className="mono small">{provider.kv_events?.endpoint ?? <span className="faint">—</span>}</td>
                      <td className="mono small">{provider.lmcache?.endpoint ?? <span className="faint">—</span>}</td>
                      <td className="small">
                        {[...users.routes, ...users.groups.map((g) => `${g}/…`)].join(", ") || (
                          <span className="faint">nothing</span>
                        )}
                      </td>
                      <td>{data.providers.file_managed.includes(slug) ? <FileManagedBadge /> : <Badge tone="accent">database</Badge>}</td>
                    </tr>
                  );
                })}
              </Table>
            )}
          </Panel>
        )}
      </LoadState>
    </>
  );
}

const PROVIDER = FIELD_HELP.ProviderTable;
const GENERAL: { key: keyof ProviderRow; label: string; kind: FieldKind; help: string; createOnly?: boolean }[] = [
  { key: "name", label: "Name", kind: "text", help: PROVIDER.name },
  { key: "slug", label: "Slug", kind: "text", help: `${PROVIDER.slug} It cannot be changed later.`, createOnly: true },
  { key: "base_url", label: "Base URL", kind: "text", help: PROVIDER.base_url },
  { key: "api_key_env", label: "API key variable", kind: "text", help: `${PROVIDER.api_key_env} Set on every node that serves traffic.` },
  { key: "health_path", label: "Health path", kind: "text", help: PROVIDER.health_path },
  { key: "max_loras", label: "Max LoRAs", kind: "int", help: PROVIDER.max_loras },
  { key: "max_concurrency", label: "Max concurrency", kind: "int", help: PROVIDER.max_concurrency },
  { key: "ca_file", label: "CA file", kind: "text", help: PROVIDER.ca_file },
];

const KV = FIELD_HELP.KvEventsTable;
const KV_FIELDS: { key: keyof KvEventsSource; label: string; kind: FieldKind; help: string }[] = [
  { key: "endpoint", label: "Endpoint", kind: "text", help: KV.endpoint },
  { key: "replay_endpoint", label: "Replay endpoint", kind: "text", help: KV.replay_endpoint },
  { key: "topic", label: "Topic", kind: "text", help: KV.topic },
  { key: "block_size", label: "Block size", kind: "int", help: KV.block_size },
  { key: "data_parallel_size", label: "Data-parallel ranks", kind: "int", help: KV.data_parallel_size },
];

const LMCACHE = FIELD_HELP.LmcacheTable;
const LMCACHE_FIELDS: { key: keyof LmcacheSource; label: string; kind: FieldKind; help: string }[] = [
  { key: "endpoint", label: "Endpoint", kind: "text", help: LMCACHE.endpoint },
  { key: "metric", label: "Metric", kind: "text", help: LMCACHE.metric },
  { key: "poll_interval_secs", label: "Poll interval (s)", kind: "int", help: LMCACHE.poll_interval_secs },
  { key: "stale_after_secs", label: "Stale after (s)", kind: "int", help: LMCACHE.stale_after_secs },
];

const METRICS = FIELD_HELP.EngineMetricsTable;
const METRICS_FIELDS: { key: keyof EngineMetricsSource; label: string; kind: FieldKind; help: string }[] = [
  { key: "endpoint", label: "Endpoint", kind: "text", help: METRICS.endpoint },
  { key: "poll_interval_ms", label: "Poll interval (ms)", kind: "int", help: METRICS.poll_interval_ms },
  { key: "stale_after_ms", label: "Stale after (ms)", kind: "int", help: METRICS.stale_after_ms },
];

type Texts = Record<string, string>;

function textsOf<T extends object>(row: T | null | undefined, keys: readonly { key: keyof T }[]): Texts {
  const texts: Texts = {};
  for (const { key } of keys) texts[key as string] = fieldText(row?.[key]);
  return texts;
}

/// The answer of the last write, for the sheet the reload rebuilds.
let flash: { slug: string; answer: SavedAnswer } | null = null;

function takeFlash(slug: string | null): SavedAnswer | null {
  const held = flash;
  flash = null;
  return held && held.slug === slug ? held.answer : null;
}

export function ProviderSheet(props: { slug: string | null }) {
  const config = useConfig();
  const data = config.data;
  if (config.error) return <ErrorBox error={config.error} title="Could not read the providers" />;
  if (!data) return <Loading what="the provider" />;
  const original = props.slug === null ? null : data.providers.data.find((p) => p.slug === props.slug);
  if (original === undefined) {
    return (
      <PageHead title={props.slug}>
        No provider <code>{props.slug}</code> on this node. <Link to={href.providers()}>Back to the providers</Link>.
      </PageHead>
    );
  }
  const fileManaged = original !== null && data.providers.file_managed.includes(original.slug ?? "");
  const users = original ? usersOf(original, data.routes.data, data.groups.data) : { routes: [], groups: [] };
  return (
    <ProviderForm
      key={JSON.stringify(original)}
      original={original}
      fileManaged={fileManaged}
      users={users}
      onSaved={config.reload}
    />
  );
}

function ProviderForm(props: {
  original: ProviderRow | null;
  fileManaged: boolean;
  users: { routes: string[]; groups: string[] };
  onSaved: () => void;
}) {
  const { api, canEdit, session } = useApp();
  const { original } = props;
  const creating = original === null;
  const readOnly = !canEdit || props.fileManaged;
  const [general, setGeneral] = useState<Texts>(() => textsOf(original ?? undefined, GENERAL));
  const [tlsVerify, setTlsVerify] = useState(fieldText(original?.tls_verify));
  const [kvOn, setKvOn] = useState(original?.kv_events != null);
  const [kv, setKv] = useState<Texts>(() => textsOf(original?.kv_events, KV_FIELDS));
  const [lmOn, setLmOn] = useState(original?.lmcache != null);
  const [lm, setLm] = useState<Texts>(() => textsOf(original?.lmcache, LMCACHE_FIELDS));
  const [lmFormat, setLmFormat] = useState(fieldText(original?.lmcache?.format));
  const [emOn, setEmOn] = useState(original?.engine_metrics != null && original.engine_metrics.enabled !== false);
  const [em, setEm] = useState<Texts>(() => textsOf(original?.engine_metrics, METRICS_FIELDS));
  const [errors, setErrors] = useState<Record<string, string>>({});
  const [error, setError] = useState<ApiError | string | null>(null);
  const [answer, setAnswer] = useState<SavedAnswer | null>(() => takeFlash(original?.slug ?? null));
  const [busy, setBusy] = useState(false);
  const formText = JSON.stringify([general, tlsVerify, kvOn, kv, lmOn, lm, lmFormat, emOn, em]);
  const [savedText, setSavedText] = useState(formText);
  const dirty = !readOnly && formText !== savedText;
  useLeaveGuard(dirty && !busy);
  // "Saved" is about the form as saved: the next edit clears it.
  const saved = busy || error || dirty ? null : answer;

  const save = async (e: FormEvent) => {
    e.preventDefault();
    setError(null);
    setAnswer(null);
    const edits: FieldEdit[] = GENERAL.map(({ key, kind }) => ({ key, kind, text: general[key] }));
    edits.push({ key: "tls_verify", kind: "bool", text: tlsVerify });
    const { row, errors: found } = applyEdits<ProviderRow>(original ?? {}, edits);
    const all: Record<string, string> = { ...found };
    if (kvOn) {
      const result = applyEdits<KvEventsSource>(original?.kv_events ?? {}, KV_FIELDS.map(({ key, kind }) => ({ key, kind, text: kv[key] })));
      Object.entries(result.errors).forEach(([k, m]) => (all[`kv_events.${k}`] = m));
      row.kv_events = result.row;
    } else {
      delete row.kv_events;
    }
    if (lmOn) {
      const result = applyEdits<LmcacheSource>(original?.lmcache ?? {}, [
        ...LMCACHE_FIELDS.map(({ key, kind }) => ({ key, kind, text: lm[key] })),
        { key: "format", kind: "text" as const, text: lmFormat },
      ]);
      Object.entries(result.errors).forEach(([k, m]) => (all[`lmcache.${k}`] = m));
      row.lmcache = result.row;
    } else {
      delete row.lmcache;
    }
    if (emOn) {
      const result = applyEdits<EngineMetricsSource>(
        original?.engine_metrics ?? {},
        METRICS_FIELDS.map(({ key, kind }) => ({ key, kind, text: em[key] })),
      );
      Object.entries(result.errors).forEach(([k, m]) => (all[`engine_metrics.${k}`] = m));
      delete result.row.enabled;
      row.engine_metrics = result.row;
    } else {
      delete row.engine_metrics;
    }
    setErrors(all);
    if (Object.keys(all).length) return setError("Some fields need a fix: see below.");
    setBusy(true);
    try {
      const written = (creating
        ? await api.create("providers", row)
        : await api.replace("providers", original?.slug ?? "", row)) as SavedAnswer & { data: ProviderRow };
      setBusy(false);
      setSavedText(formText);
      const slug = written.data.slug ?? "";
      // The sheet is rebuilt from the reloaded configuration: the answer
      // waits for it there.
      flash = { slug, answer: { ...written, created: creating } };
      if (creating) {
        navigate(href.provider(slug), true, true);
      } else {
        setAnswer(flash.answer);
      }
      props.onSaved();
    } catch (err) {
      setError(err as ApiError);
      setErrors(rowProblems(err, "providers"));
      setBusy(false);
    }
  };

  const remove = async () => {
    if (!original?.slug || !window.confirm(`Delete the provider ${original.name}?`)) return;
    setBusy(true);
    try {
      await api.remove("providers", original.slug);
      navigate(href.providers(), false, true);
    } catch (err) {
      setError(err as ApiError);
      setBusy(false);
    }
  };

  const field = (
    id: string,
    label: string,
    help: string,
    value: string,
    onChange: (v: string) => void,
    options: { disabled?: boolean; error?: string } = {},
  ): ReactNode => (
    <>
      <label htmlFor={id}>{label}</label>
      <div>
        <input id={id} value={value} disabled={options.disabled} onChange={(e) => onChange(e.target.value)} />
        <Help text={help} />
        {options.error && <div className="field-error">{options.error}</div>}
      </div>
    </>
  );

  return (
    <>
      <PageHead
        title={
          <>
            {creating ? "New provider" : original?.name} {props.fileManaged && <FileManagedBadge />}
          </>
        }
        actions={
          <Link className="button" to={href.providers()}>
            All providers
          </Link>
        }
      >
        {creating
          ? "An OpenAI-compatible engine. Routes and provider groups name it by its slug."
          : `Slug ${original?.slug}. Used by ${
              [...props.users.routes, ...props.users.groups.map((g) => `${g}/…`)].join(", ") || "no route yet"
            }.`}
      </PageHead>
      <ReadOnlyNotice />
      {props.fileManaged && canEdit && (
        <div className="notice info" data-testid="file-managed-notice">
          <strong>This provider is defined in rolter.toml</strong>
          <p>It is read-only here: change it in the control node's rolter.toml and reload.</p>
        </div>
      )}
      {!creating && original?.slug && session.node_role === "control" && <OnGateways slug={original.slug} />}
      {!creating && original?.slug && session.node_role !== "control" && <LiveSources slug={original.slug} provider={original} />}
      <form onSubmit={save} data-testid="provider-form">
        <fieldset disabled={readOnly} style={{ border: "none", padding: 0, margin: 0 }}>
          <Panel title="Connection">
            <div className="form-grid">
              {GENERAL.map(({ key, label, help, createOnly }) =>
                field(`provider-${key}`, label, help, general[key], (v) => setGeneral((g) => ({ ...g, [key]: v })), {
                  disabled: createOnly && !creating,
                  error: errors[key],
                }),
              )}
              <label htmlFor="provider-tls_verify">Verify TLS</label>
              <div>
                <select id="provider-tls_verify" value={tlsVerify} onChange={(e) => setTlsVerify(e.target.value)}>
                  <option value="">default (verify)</option>
                  <option value="true">verify</option>
                  <option value="false">do not verify (warned)</option>
                </select>
                <Help text={PROVIDER.tls_verify} />
              </div>
            </div>
          </Panel>
          <Panel title="Telemetry sources" aside="read by the load-reading strategies, precise_cache_aware and lmcache_aware" testId="telemetry-sources">
            <div className="source-box">
              <label className="source-head">
                <input type="checkbox" checked={emOn} onChange={(e) => setEmOn(e.target.checked)} data-testid="engine-metrics-toggle" />
                <strong>Engine metrics</strong>
                <span className="muted small">
                  the engine's own running, waiting and KV-cache figures (vLLM or SGLang /metrics), so every gateway node
                  balances on the same load
                </span>
              </label>
              {emOn && (
                <div className="form-grid">
                  {METRICS_FIELDS.map(({ key, label, help }) =>
                    field(`em-${key}`, label, help, em[key], (v) => setEm((m) => ({ ...m, [key]: v })), {
                      error: errors[`engine_metrics.${key}`],
                    }),
                  )}
                </div>
              )}
            </div>
            <div className="source-box">
              <label className="source-head">
                <input type="checkbox" checked={kvOn} onChange={(e) => setKvOn(e.target.checked)} data-testid="kv-toggle" />
                <strong>KV events</strong>
                <span className="muted small">the engine's vLLM KV-cache event stream, for precise_cache_aware</span>
              </label>
              {kvOn && (
                <div className="form-grid">
                  {KV_FIELDS.map(({ key, label, help }) =>
                    field(`kv-${key}`, label, help, kv[key], (v) => setKv((k) => ({ ...k, [key]: v })), {
                      error: errors[`kv_events.${key}`],
                    }),
                  )}
                </div>
              )}
            </div>
            <div className="source-box">
              <label className="source-head">
                <input type="checkbox" checked={lmOn} onChange={(e) => setLmOn(e.target.checked)} data-testid="lmcache-toggle" />
                <strong>LMCache</strong>
                <span className="muted small">the cache's occupancy signal, for lmcache_aware</span>
              </label>
              {lmOn && (
                <div className="form-grid">
                  {field(`lm-endpoint`, "Endpoint", LMCACHE_FIELDS[0].help, lm.endpoint, (v) => setLm((l) => ({ ...l, endpoint: v })), {
                    error: errors["lmcache.endpoint"],
                  })}
                  <label htmlFor="lm-format">Format</label>
                  <div>
                    <select id="lm-format" value={lmFormat} onChange={(e) => setLmFormat(e.target.value)}>
                      <option value="">default (json)</option>
                      <option value="json">json: {"{occupancy, cache_available}"}</option>
                      <option value="prometheus">prometheus: a gauge in text exposition</option>
                    </select>
                  </div>
                  {LMCACHE_FIELDS.slice(1).map(({ key, label, help }) =>
                    field(`lm-${key}`, label, help, lm[key], (v) => setLm((l) => ({ ...l, [key]: v })), {
                      error: errors[`lmcache.${key}`],
                    }),
                  )}
                </div>
              )}
            </div>
          </Panel>
        </fieldset>
        <ErrorBox error={error} />
        <SavedNotice saved={saved} />
        {dirty && (
          <p className="muted small" data-testid="unsaved">
            Unsaved changes.
          </p>
        )}
        {!readOnly && (
          <div className="form-actions">
            <button className="primary" type="submit" disabled={busy}>
              {busy ? "Saving…" : creating ? "Create provider" : "Save changes"}
            </button>
            <Link className="button" to={href.providers()}>
              Cancel
            </Link>
            {!creating && (
              <button type="button" className="danger" onClick={remove} disabled={busy} style={{ marginLeft: "auto" }}>
                Delete provider
              </button>
            )}
          </div>
        )}
      </form>
    </>
  );
}

/// What this node reads from the provider's sources right now.
/// A control node's view of one provider: what each gateway's push says of
/// its targets (health, breaker, in flight, KV index, LMCache).
function OnGateways(props: { slug: string }) {
  const live = useLiveState(5000);
  const reports = live.gateways ?? [];
  return (
    <Panel title="On each gateway" aside="as each gateway last pushed it; refreshed every 5 s" testId="provider-gateways">
      {live.loaded.error && <ErrorBox error={live.loaded.error} title="Could not read the gateways" />}
      {live.loaded.data !== null && reports.length === 0 && <Empty>No gateway has reported yet.</Empty>}
      {reports.length > 0 && (
        <Table
          columns={[
            { label: "Gateway" },
            { label: "Last report" },
            { label: "Health" },
            { label: "In flight", num: true },
            { label: "Engine load", num: true },
            { label: "KV index" },
            { label: "LMCache" },
          ]}
        >
          {reports.map((report) => {
            const targets = distinctTargets(report.state.routes).filter((t) => t.provider === props.slug);
            const first = targets[0];
            return (
              <tr key={report.node_id} data-testid={`provider-on-${report.node_id}`} className={report.stale ? "dimmed" : undefined}>
                <td className="mono">{report.node_id}</td>
                <td>
                  {report.stale ? <Badge tone="warn">stale</Badge> : <Badge tone="ok">fresh</Badge>}{" "}
                  {formatDuration(report.age_ms)} ago
                </td>
                {!first ? (
                  <td colSpan={5} className="faint">
                    no route of this gateway lists it
                  </td>
                ) : (
                  <>
                    <td>
                      {first.healthy ? <Badge tone="ok">healthy</Badge> : <Badge tone="bad">down</Badge>}{" "}
                      {first.breaker !== "closed" && <Badge tone="bad">breaker {first.breaker.replace("_", "-")}</Badge>}
                    </td>
                    <td className="num">{formatNumber(targets.reduce((n, t) => n + t.in_flight, 0))}</td>
                    <td className="num">{formatNumber(Math.max(...targets.map((t) => t.combined_load)))}</td>
                    <td className="small">
                      {first.kv_index == null
                        ? "no source"
                        : first.kv_index.usable
                          ? `fresh, ${formatNumber(first.kv_index.blocks_resident)} blocks`
                          : "stale"}
                    </td>
                    <td className="small">
                      {first.lmcache == null
                        ? "no source"
                        : `${first.lmcache.fresh ? "fresh" : "stale"}${
                            first.lmcache.occupancy != null ? `, ${formatPercent(first.lmcache.occupancy)} full` : ""
                          }`}
                    </td>
                  </>
                )}
              </tr>
            );
          })}
        </Table>
      )}
    </Panel>
  );
}

function LiveSources(props: { slug: string; provider: ProviderRow }) {
  const telemetry = useGet<EngineTelemetry>("/admin/kv-index", { intervalMs: 5000 });
  if (!props.provider.kv_events && !props.provider.lmcache) return null;
  const kv = telemetry.data?.kv_indexes.find((k) => k.provider === props.slug);
  const lm = telemetry.data?.lmcache[props.slug];
  return (
    <Panel title="Sources on this node" aside="refreshed every 5 s" testId="live-sources">
      {telemetry.error && <ErrorBox error={telemetry.error} />}
      <div className="form-grid">
        {props.provider.kv_events && (
          <>
            <label>KV index</label>
            <div>
              {!kv || !kv.configured ? (
                <span className="muted">No subscriber on this node (control nodes serve no traffic and subscribe to nothing).</span>
              ) : (
                <>
                  {kv.usable ? <Badge tone="ok">fresh</Badge> : <Badge tone="warn">stale</Badge>}{" "}
                  {formatNumber(kv.blocks_resident)} blocks resident · {formatNumber(kv.messages)} messages ·{" "}
                  {formatNumber(kv.gaps)} gaps
                  <div className="help">
                    {kv.ranks
                      .map(
                        (r) =>
                          `rank ${r.rank}: ${r.connected ? "connected" : "disconnected"}, ${
                            r.usable ? "usable" : r.rebuilding ? "rebuilding" : "stale"
                          }${r.last_message_age_ms != null ? `, last event ${formatDuration(r.last_message_age_ms)} ago` : ""}`,
                      )
                      .join("; ")}
                  </div>
                </>
              )}
            </div>
          </>
        )}
        {props.provider.lmcache && (
          <>
            <label>LMCache</label>
            <div>
              {!lm || lm.polls === 0 ? (
                <span className="muted">Not polled on this node yet.</span>
              ) : (
                <>
                  {lm.fresh ? <Badge tone="ok">fresh</Badge> : <Badge tone="warn">stale</Badge>}{" "}
                  {lm.occupancy == null ? "no reading" : `${formatPercent(lm.occupancy)} full`} ·{" "}
                  {lm.age_ms == null ? "never read" : `read ${formatDuration(lm.age_ms)} ago`} · {formatNumber(lm.failures)} failed polls
                </>
              )}
            </div>
          </>
        )}
      </div>
    </Panel>
  );
}
