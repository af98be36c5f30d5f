import { useCallback, useMemo, useState } from "react";
import type { Gateways, LastReload, LiveRoutes, ProviderRow } from "../lib/api";
import { liveness, useApp, useConfig, useGateways, useGet, useLoad, useNow, type Loaded } from "../lib/hooks";
import { configuredShares, observedShares, sumGateways, type FleetRoute, type FleetState, type FleetTarget } from "../lib/fleet";
import { distinctTargets, findProvider } from "../lib/routing";
import { seriesOf, shareOverTime, sumHistories, type FleetHistory, type History, type HistoryPoint } from "../lib/history";
import { ShareChart, Sparkline } from "../components/Charts";
import { formatDuration, formatMs, formatNumber, formatPercent, formatTime } from "../lib/format";
import { href } from "../lib/router";
import { Badge, Empty, ErrorBox, LiveIndicator, Link, Loading, PageHead, Panel, StrategyBadge, Table } from "../components/common";

/// How often the fleet is polled while the screen is open.
export const FLEET_POLL_MS = 1000;
/// The history's resolution (`src/history.rs`), and how often it is read.
const HISTORY_MS = 5000;

/// What the screen shows: this node, one gateway's report, or the sum of
/// every fresh gateway's (a control node's default: it serves no traffic).
type Viewing = { kind: "node" } | { kind: "all" } | { kind: "gateway"; id: string };

const NO_PROVIDERS: ProviderRow[] = [];
const NO_REPORTS: Gateways["gateways"] = [];
const NO_ROUTES: FleetRoute[] = [];

/// The document, the gateways it sums, its age and its charts' data for
/// what is being viewed.
function viewOf(
  viewing: Viewing,
  isControl: boolean,
  own: LiveRoutes | null,
  reports: Gateways["gateways"] | null,
  history: History | FleetHistory | null,
): { shown: FleetState | null; summed: string[] | null; age: number | null; charts: History | null } {
  const fleetHistory = history && "gateways" in history ? history : null;
  if (viewing.kind === "node" || !isControl) {
    return { shown: own, summed: null, age: null, charts: fleetHistory ? null : (history as History | null) };
  }
  if (!reports) return { shown: null, summed: null, age: null, charts: null };
  if (viewing.kind === "all") {
    const sum = sumGateways(reports);
    return { shown: sum, summed: sum.summed, age: null, charts: sumHistories(fleetHistory, HISTORY_MS, sum.summed) };
  }
  const report = reports.find((r) => r.node_id === viewing.id);
  return {
    shown: report?.state ?? null,
    summed: null,
    age: report ? report.age_ms : null,
    charts: sumHistories(fleetHistory, HISTORY_MS, [viewing.id]),
  };
}

export function Fleet() {
  const { api, session } = useApp();
  const isControl = session.node_role === "control";
  const [live, setLive] = useState(true);
  const [viewing, setViewing] = useState<Viewing>(isControl ? { kind: "all" } : { kind: "node" });
  const routes = useGet<LiveRoutes>("/admin/routes", { intervalMs: FLEET_POLL_MS, live });
  const gateways = useGateways({ intervalMs: FLEET_POLL_MS, live });
  const history = useLoad(
    useCallback(
      (): Promise<History | FleetHistory> =>
        isControl ? api.get<FleetHistory>("/api/v1/fleet/history") : api.get<History>("/admin/history"),
      [api, isControl],
    ),
    { intervalMs: HISTORY_MS, live },
  );
  const config = useConfig();
  // Often enough that a call running late shows within a quarter second;
  // only the indicator and the dimming follow it (the panels are memoized).
  const now = useNow(250);
  const providers = config.data?.providers.data ?? NO_PROVIDERS;
  const reports = gateways.data?.gateways ?? NO_REPORTS;

  // The document on screen, recomputed only when an answer arrives.
  const view = useMemo(
    () => viewOf(viewing, isControl, routes.data, gateways.data ? reports : null, history.data),
    [viewing, isControl, routes.data, gateways.data, reports, history.data],
  );
  const { shown, summed, age, charts } = view;
  const source: Loaded<unknown> = viewing.kind === "node" || !isControl ? routes : gateways;
  const state = liveness(source, FLEET_POLL_MS, live, now);
  const all = shown?.routes ?? NO_ROUTES;
  // The tiles count each target once: routes that share one share its counters.
  const targets = useMemo(() => distinctTargets(all), [all]);
  const panels = useMemo(
    () => all.map((route) => <RoutePanel key={route.model} route={route} providers={providers} history={charts} />),
    [all, providers, charts],
  );

  return (
    <>
      <PageHead
        title="Fleet"
        actions={
          <>
            <LiveIndicator loaded={source} state={state} now={now} testId="fleet-updated">
              {shown && ` · configuration version ${shown.version}`}
            </LiveIndicator>
            <button type="button" onClick={() => setLive((l) => !l)}>
              {live ? "Pause" : "Resume"}
            </button>
          </>
        }
      >
        Every target of every route: the engine's shared state (health, breaker, parking, load, latency, saturation,
        KV index, LMCache) and each route's own traffic to it (picks, failures, latency, share), refreshed
        every {FLEET_POLL_MS / 1000} s.
      </PageHead>
      {isControl && (
        <GatewayStrip
          reports={reports}
          viewing={viewing}
          onView={setViewing}
          loaded={gateways}
          summed={summed}
        />
      )}
      {source.error && <ErrorBox error={source.error} title="Could not read the fleet" />}
      {source.loading && !source.data && <Loading what="the fleet" />}
      {viewing.kind === "node" && routes.data && <LastReloadNotice reload={routes.data.last_reload ?? null} who="This node" />}
      {viewing.kind === "gateway" && shown && (
        <LastReloadNotice reload={shown.last_reload ?? null} who={`Gateway ${viewing.id}`} />
      )}
      {viewing.kind === "gateway" && !shown && gateways.data && (
        <Empty>Gateway {viewing.id} has not reported in the last 10 minutes.</Empty>
      )}
      {viewing.kind === "node" && isControl && (
        <div className="notice info">
          <strong>This control node serves no inference traffic.</strong>
          <p>Its own counters stay at zero; choose a gateway, or all of them, above.</p>
        </div>
      )}
      <div className={state === "live" || state === "paused" ? "" : "dimmed"} data-testid="fleet-data" data-state={state}>
        {shown && (
          <div className="tiles">
            <Tile label="Routes" value={all.length} />
            <Tile label="Targets" value={targets.length} />
            <Tile
              label="Unhealthy targets"
              value={targets.filter((t) => !t.healthy).length}
              tone={targets.some((t) => !t.healthy) ? "bad" : undefined}
            />
            <Tile
              label="Breakers not closed"
              value={targets.filter((t) => t.breaker !== "closed").length}
              tone={targets.some((t) => t.breaker !== "closed") ? "bad" : undefined}
            />
            <Tile
              label="Parked"
              value={targets.filter((t) => t.parked_until_ms != null).length}
              tone={targets.some((t) => t.parked_until_ms != null) ? "warn" : undefined}
            />
            <Tile label="In flight" value={targets.reduce((n, t) => n + t.in_flight, 0)} testId="tile-in-flight" />
            <Tile
              label="Saturated"
              value={targets.filter((t) => t.saturated != null).length}
              tone={targets.some((t) => t.saturated != null) ? "warn" : undefined}
            />
            <Tile
              label="Queued"
              value={all.reduce((n, r) => n + r.queued, 0)}
              tone={all.some((r) => r.queued > 0) ? "warn" : undefined}
            />
          </div>
        )}
        {age !== null && age > FLEET_POLL_MS && <p className="muted small">As reported {formatDuration(age)} ago.</p>}
        {shown && all.length === 0 && <Empty>No routes here.</Empty>}
        {panels}
      </div>
    </>
  );
}

/// The gateways a control node heard from: what to show, and each one's
/// last report.
function GatewayStrip(props: {
  reports: Gateways["gateways"];
  viewing: Viewing;
  onView: (v: Viewing) => void;
  loaded: Loaded<Gateways | null>;
  summed: string[] | null;
}) {
  const { reports, viewing } = props;
  const value = viewing.kind === "gateway" ? `gw:${viewing.id}` : viewing.kind;
  return (
    <Panel
      testId="gateways"
      title="Gateways"
      aside={
        <label className="inline">
          Showing{" "}
          <select
            aria-label="Showing"
            value={value}
            onChange={(e) => {
              const v = e.target.value;
              props.onView(v === "all" ? { kind: "all" } : v === "node" ? { kind: "node" } : { kind: "gateway", id: v.slice(3) });
            }}
          >
            <option value="all">All gateways, summed</option>
            {reports.map((r) => (
              <option key={r.node_id} value={`gw:${r.node_id}`}>
                {r.node_id}
              </option>
            ))}
            <option value="node">This control node</option>
          </select>
        </label>
      }
    >
      {props.loaded.data && reports.length === 0 && (
        <Empty>No gateway has reported yet: gateways push their state every telemetry interval.</Empty>
      )}
      {reports.length > 0 && (
        <Table columns={[{ label: "Gateway" }, { label: "Last report" }, { label: "Configuration" }, { label: "Last reload" }]}>
          {reports.map((r) => (
            <tr key={r.node_id} data-testid={`gateway-${r.node_id}`} className={r.stale ? "dimmed" : undefined}>
              <td>
                <button type="button" className="link" onClick={() => props.onView({ kind: "gateway", id: r.node_id })}>
                  {r.node_id}
                </button>{" "}
                {props.summed && !props.summed.includes(r.node_id) && <span className="faint small">not in the sum</span>}
              </td>
              <td data-testid="report-age">
                {r.stale ? <Badge tone="warn">stale</Badge> : <Badge tone="ok">fresh</Badge>} {formatDuration(r.age_ms)} ago
                <div className="faint small">pushes every {formatDuration(r.interval_ms)}</div>
              </td>
              <td>version {r.state.version}</td>
              <td className="small">
                <ReloadLine reload={r.state.last_reload ?? null} />
              </td>
            </tr>
          ))}
        </Table>
      )}
    </Panel>
  );
}

function ReloadLine(props: { reload: LastReload | null }) {
  const { reload } = props;
  if (!reload) return <span className="faint">none since start</span>;
  return reload.applied ? (
    <span>
      <Badge tone="ok">applied</Badge> version {reload.version}, {formatTime(reload.at_unix_ms)}
    </span>
  ) : (
    <span>
      <Badge tone="bad">refused</Badge> {formatTime(reload.at_unix_ms)}
    </span>
  );
}

/// The node's last configuration change; a refusal with its reasons.
function LastReloadNotice(props: { reload: LastReload | null; who: string }) {
  const { reload } = props;
  if (!reload) return null;
  if (reload.applied) {
    return (
      <p className="muted small" data-testid="last-reload" data-applied="true">
        Last reload: applied {reload.source}, version {reload.version}, {formatTime(reload.at_unix_ms)}
        {reload.warnings.length > 0 && ` · ${reload.warnings.length} warning${reload.warnings.length > 1 ? "s" : ""}: ${reload.warnings.join("; ")}`}
      </p>
    );
  }
  return (
    <div className="notice error" role="alert" data-testid="last-reload" data-applied="false">
      <strong>
        {props.who} refused its last reload ({reload.source}, {formatTime(reload.at_unix_ms)}); it still serves version{" "}
        {reload.version}.
      </strong>
      <ul>
        {reload.errors.map((e, i) => (
          <li key={i} className="error-message">
            {e}
          </li>
        ))}
      </ul>
    </div>
  );
}

function decisionsLine(route: FleetRoute): string | null {
  const d = route.report.decisions;
  if (d) {
    return `${d.engaged ? "blend engaged" : "blend not engaged"} · blend ${d.blend} · fallback ${d.fallback} · exploration ${d.exploration}`;
  }
  const c = route.report.cache_decisions;
  if (c) return `affinity hit ${c.affinity} · load spread ${c.spread} · cold ${c.cold}`;
  return null;
}

function RoutePanel(props: { route: FleetRoute; providers: ProviderRow[]; history: History | null }) {
  const { route } = props;
  const labels = route.targets.map((t) => `${t.provider}/${t.model}`);
  const share = shareOverTime(props.history, route.model, labels);
  const observed = observedShares(route);
  const configured = configuredShares(route);
  const decisions = decisionsLine(route);
  return (
    <Panel
      testId={`fleet-route-${route.model}`}
      title={
        <>
          <Link to={href.model(route.model)}>{route.model}</Link> <StrategyBadge strategy={route.strategy} />
        </>
      }
      aside={
        <>
          {route.queued > 0 && (
            <Badge tone="warn" title="Requests waiting in flow control for a target of this route">
              {formatNumber(route.queued)} queued
            </Badge>
          )}{" "}
          {decisions && <span data-testid="decisions">{decisions}</span>}
        </>
      }
    >
      <Table
        className="fleet"
        columns={[
          { label: "Target, its cache sources" },
          { label: "Engine health" },
          { label: "Engine load", num: true },
          { label: "Engine latency", num: true },
          { label: "Route picks", num: true },
          { label: "Route failures", num: true },
          { label: "Route latency", num: true },
          route.reads_weights && { label: "Share, observed / set", num: true },
          { label: "Engine requests, all routes", num: true },
          { label: "Requests/s, 15 min" },
        ]}
      >
        {route.targets.map((target, i) => (
          <TargetRow
            key={`${target.provider}/${target.model}`}
            target={target}
            share={route.reads_weights ? [observed[i], configured[i]] : null}
            providers={props.providers}
            points={seriesOf(props.history, route.model, labels[i])}
          />
        ))}
      </Table>
      {route.targets.length > 1 && <ShareChart times={share.times} shares={share.shares} labels={labels} />}
    </Panel>
  );
}

function Tile(props: { label: string; value: number; tone?: "bad" | "warn"; testId?: string }) {
  return (
    <div className="tile" data-testid={props.testId}>
      <div className="label">{props.label}</div>
      <div className={`value ${props.tone ?? ""}`}>{formatNumber(props.value)}</div>
    </div>
  );
}

/// " (1 of 2)" when summed over several gateways: on how many of them the
/// shared state holds (the badge's title says so in words).
function onGateways(count: number, target: FleetTarget): string {
  const of = target.seenOn?.gateways;
  return of && of > 1 ? ` (${count} of ${of})` : "";
}

function gatewaysTitle(count: number, target: FleetTarget): string | undefined {
  const of = target.seenOn?.gateways;
  return of && of > 1 ? `on ${count} of the ${of} gateways summed` : undefined;
}

function TargetRow(props: {
  target: FleetTarget;
  share: [number | null, number] | null;
  providers: ProviderRow[];
  points: HistoryPoint[];
}) {
  const { target } = props;
  const provider = findProvider(props.providers, target.provider);
  const seen = target.seenOn;
  return (
    <tr data-testid="fleet-target" data-target={`${target.provider}/${target.model}`}>
      <td>
        <Link to={href.provider(target.provider)}>{provider?.name ?? target.provider}</Link>
        <div className="muted small mono">{target.model}</div>
        <div className="small sources">
          <KvCell target={target} />
          <LmcacheCell target={target} />
        </div>
      </td>
      <td className="small">
        {target.healthy ? <Badge tone="ok">healthy</Badge> : <Badge tone="bad" title={gatewaysTitle(seen?.down ?? 0, target)}>
            down{onGateways(seen?.down ?? 0, target)}
          </Badge>}{" "}
        {target.breaker === "closed" ? null : target.breaker === "open" ? (
          <Badge tone="bad">breaker open{onGateways(seen?.breakerOpen ?? 0, target)}</Badge>
        ) : (
          <Badge tone="warn">breaker half-open{onGateways(seen?.breakerOpen ?? 0, target)}</Badge>
        )}
        {target.parked_until_ms != null && (
          <div>
            <Badge tone="warn">
              parked for {formatDuration(target.parked_until_ms)}
              {onGateways(seen?.parked ?? 0, target)}
            </Badge>
          </div>
        )}
      </td>
      <td className="num">
        {formatNumber(target.combined_load)}{" "}
        {target.saturated != null && (
          <Badge tone="warn" title="Takes no new request: at max_concurrency, or the engine's queue or KV cache is full">
            saturated: {target.saturated.replace("_", " ")}
          </Badge>
        )}
        <div className="faint small detail">
          {formatNumber(target.in_flight)} in flight {seen && seen.gateways > 1 ? "from these gateways" : "from here"}
          {target.max_concurrency != null && `, limit ${formatNumber(target.max_concurrency)}`}
        </div>
        {target.engine_reading && (
          <div className="faint small detail">
            engine: {formatNumber(target.engine_reading.running)} running, {formatNumber(target.engine_reading.waiting)} waiting
            {target.engine_reading.kv_usage != null && `, KV ${formatPercent(target.engine_reading.kv_usage)}`};{" "}
            {target.engine_reading.fresh ? "" : "stale, "}read {formatDuration(target.engine_reading.age_ms)} ago
          </div>
        )}
      </td>
      <td className="num">
        {formatMs(target.latency_ewma_ms)}
        <div className="faint small">EWMA of {formatNumber(target.latency_samples)}</div>
      </td>
      <td className="num" data-testid="route-picks" title="Attempts this route sent the target: every pick, retries included">
        {target.route_traffic ? formatNumber(target.route_traffic.attempts) : <span className="faint">—</span>}
      </td>
      <td className="num" data-testid="route-failures">
        {target.route_traffic ? formatNumber(target.route_traffic.failures) : <span className="faint">—</span>}
      </td>
      <td className="num" data-testid="route-latency">
        {formatMs(target.route_traffic?.latency_mean_ms)}
        {target.route_traffic?.latency_mean_ms != null && <div className="faint small">mean</div>}
      </td>
      {props.share && (
        <td className="num" data-testid="route-share">
          {formatPercent(props.share[0])} / {formatPercent(props.share[1])}
        </td>
      )}
      <td className="num" data-testid="engine-requests">
        {formatNumber(target.requests)}
        {target.failures > 0 && <div className="faint small">{formatNumber(target.failures)} failed</div>}
      </td>
      <td>
        <Sparkline points={props.points} />
      </td>
    </tr>
  );
}

function KvCell(props: { target: FleetTarget }) {
  const kv = props.target.kv_index;
  if (!kv) return null;
  if (!kv.configured) return <Badge title="No KV-event subscriber runs on this node">KV: not subscribed here</Badge>;
  const stale = props.target.seenOn?.kvStale ?? 0;
  return (
    <div data-testid="kv-cell">
      KV {kv.usable ? <Badge tone="ok">fresh</Badge> : <Badge tone="warn" title={gatewaysTitle(stale, props.target)}>
          stale{onGateways(stale, props.target)}
        </Badge>}{" "}
      {formatNumber(kv.blocks_resident)} blocks
      <div className="faint">
        {kv.last_message_age_ms == null ? "no event yet" : `last event ${formatDuration(kv.last_message_age_ms)} ago`}
      </div>
    </div>
  );
}

function LmcacheCell(props: { target: FleetTarget }) {
  const lm = props.target.lmcache;
  if (!lm) return null;
  return (
    <div>
      LMCache {lm.fresh ? <Badge tone="ok">fresh</Badge> : <Badge tone="warn">stale</Badge>}{" "}
      {lm.occupancy == null ? "no reading" : `${formatPercent(lm.occupancy)} full`}
      {!lm.cache_available && lm.occupancy != null && <div className="faint">cache unavailable</div>}
      <div className="faint">{lm.age_ms == null ? "never polled" : `read ${formatDuration(lm.age_ms)} ago`}</div>
    </div>
  );
}
