import { useState } from "react";
import type { LiveRoutes, LiveTarget, ProviderRow } from "../lib/api";
import { useApp, useConfig, useGet, useNow } from "../lib/hooks";
import { distinctTargets, findProvider } from "../lib/routing";
import { formatDuration, formatMs, formatNumber, formatPercent } from "../lib/format";
import { href } from "../lib/router";
import { Badge, Empty, ErrorBox, Link, Loading, PageHead, Panel, StrategyBadge, Table } from "../components/common";

/// How often the fleet is polled while the screen is open.
export const FLEET_POLL_MS = 2000;

export function Fleet() {
  const { session } = useApp();
  const [live, setLive] = useState(true);
  const routes = useGet<LiveRoutes>("/admin/routes", { intervalMs: FLEET_POLL_MS, live });
  const config = useConfig();
  const now = useNow();
  const providers = config.data?.providers.data ?? [];
  const all = routes.data?.routes ?? [];
  // The tiles count each target once: routes that share one share its counters.
  const targets = distinctTargets(all);

  return (
    <>
      <PageHead
        title="Fleet"
        actions={
          <>
            <span className="muted small" data-testid="fleet-updated">
              <span className={`live-dot ${live ? "" : "paused"}`} />
              {live ? "Live" : "Paused"}
              {routes.updatedAt && ` · updated ${formatDuration(now - routes.updatedAt)} ago`}
              {routes.data && ` · configuration version ${routes.data.version}`}
            </span>
            <button type="button" onClick={() => setLive((l) => !l)}>
              {live ? "Pause" : "Resume"}
            </button>
          </>
        }
      >
        Every target of every route with its health, breaker, parking, load (the engine's own figures where its metrics
        are read), saturation, flow-control queue and latency, refreshed every{" "}
        {FLEET_POLL_MS / 1000} s, and the freshness of its KV-event index and LMCache signal where its provider has
        those sources.
      </PageHead>
      {session.node_role === "control" && (
        <div className="notice info">
          <strong>This is a control node: it serves no inference traffic.</strong>
          <p>
            Load, latency and picks below are this node's own (zero); gateways count their own traffic. Per-gateway
            adaptive scores are on the Adaptive routing screen; Prometheus scrapes each gateway's /metrics.
          </p>
        </div>
      )}
      {routes.error && <ErrorBox error={routes.error} title="Could not read the fleet" />}
      {routes.loading && !routes.data && <Loading what="the fleet" />}
      {routes.data && (
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
          <Tile label="In flight" value={targets.reduce((n, t) => n + t.in_flight, 0)} />
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
      {routes.data && all.length === 0 && <Empty>No routes are configured on this node.</Empty>}
      {all.map((route) => (
        <Panel
          key={route.model}
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
              {route.report.decisions ? decisionsLine(route.report.decisions) : undefined}
            </>
          }
        >
          <Table className="fleet"
            columns={[
              { label: "Target" },
              { label: "Health" },
              { label: "Breaker" },
              { label: "Parked" },
              { label: "Load", num: true },
              { label: "Latency EWMA", num: true },
              { label: "Route", num: true },
              { label: "Total", num: true },
              { label: "Failures", num: true },
              { label: "KV index" },
              { label: "LMCache" },
            ]}
          >
            {route.targets.map((target) => (
              <TargetRow key={`${target.provider}/${target.model}`} target={target} providers={providers} />
            ))}
          </Table>
        </Panel>
      ))}
    </>
  );
}

function decisionsLine(d: { engaged: boolean; blend: number; fallback: number; exploration: number }) {
  return `${d.engaged ? "blend engaged" : "blend not engaged"} · blend ${d.blend} · fallback ${d.fallback} · exploration ${d.exploration}`;
}

function Tile(props: { label: string; value: number; tone?: "bad" | "warn" }) {
  return (
    <div className="tile">
      <div className="label">{props.label}</div>
      <div className={`value ${props.tone ?? ""}`}>{formatNumber(props.value)}</div>
    </div>
  );
}

function TargetRow(props: { target: LiveTarget; providers: ProviderRow[] }) {
  const { target } = props;
  const provider = findProvider(props.providers, target.provider);
  return (
    <tr data-testid="fleet-target">
      <td>
        <Link to={href.provider(target.provider)}>{provider?.name ?? target.provider}</Link>
        <div className="muted small mono">{target.model}</div>
      </td>
      <td>{target.healthy ? <Badge tone="ok">healthy</Badge> : <Badge tone="bad">down</Badge>}</td>
      <td>
        {target.breaker === "closed" ? (
          <Badge tone="ok">closed</Badge>
        ) : target.breaker === "open" ? (
          <Badge tone="bad">open</Badge>
        ) : (
          <Badge tone="warn">half-open</Badge>
        )}
      </td>
      <td className="nowrap">
        {target.parked_until_ms == null ? (
          <span className="faint">no</span>
        ) : (
          <Badge tone="warn">for {formatDuration(target.parked_until_ms)}</Badge>
        )}
      </td>
      <td className="num">
        {formatNumber(target.combined_load)}{" "}
        {target.saturated != null && (
          <Badge tone="warn" title="Takes no new request: at max_concurrency, or the engine's queue or KV cache is full">
            saturated: {target.saturated.replace("_", " ")}
          </Badge>
        )}
        <div className="faint small">
          {formatNumber(target.in_flight)} here
          {target.max_concurrency != null && ` of ${formatNumber(target.max_concurrency)}`}
          {target.engine_reading &&
            ` · engine ${formatNumber(target.engine_reading.running)} running, ${formatNumber(
              target.engine_reading.waiting,
            )} waiting${target.engine_reading.kv_usage != null ? `, KV ${formatPercent(target.engine_reading.kv_usage)}` : ""}, ${
              target.engine_reading.fresh ? "" : "stale, "
            }read ${formatDuration(target.engine_reading.age_ms)} ago`}
        </div>
      </td>
      <td className="num">
        {formatMs(target.latency_ewma_ms)}
        <div className="faint small">{formatNumber(target.latency_samples)} samples</div>
      </td>
      <td className="num" title="Attempts this route sent the target">
        {target.route_traffic ? formatNumber(target.route_traffic.attempts) : <span className="faint">—</span>}
        {target.route_traffic && target.route_traffic.failures > 0 && (
          <div className="faint small">{formatNumber(target.route_traffic.failures)} failed</div>
        )}
      </td>
      <td className="num" title="Attempts the target took from every route that lists it">
        {formatNumber(target.requests)}
      </td>
      <td className="num">{formatNumber(target.failures)}</td>
      <td className="small">
        <KvCell target={target} />
      </td>
      <td className="small">
        <LmcacheCell target={target} />
      </td>
    </tr>
  );
}

function KvCell(props: { target: LiveTarget }) {
  const kv = props.target.kv_index;
  if (!kv) return <span className="faint">no source</span>;
  if (!kv.configured) return <Badge title="No KV-event subscriber runs on this node">not subscribed here</Badge>;
  return (
    <span data-testid="kv-cell">
      {kv.usable ? <Badge tone="ok">fresh</Badge> : <Badge tone="warn">stale</Badge>}{" "}
      {formatNumber(kv.blocks_resident)} blocks
      <div className="faint">
        {kv.last_message_age_ms == null ? "no event yet" : `last event ${formatDuration(kv.last_message_age_ms)} ago`}
      </div>
    </span>
  );
}

function LmcacheCell(props: { target: LiveTarget }) {
  const lm = props.target.lmcache;
  if (!lm) return <span className="faint">no source</span>;
  return (
    <span>
      {lm.fresh ? <Badge tone="ok">fresh</Badge> : <Badge tone="warn">stale</Badge>}{" "}
      {lm.occupancy == null ? "no reading" : `${formatPercent(lm.occupancy)} full`}
      {!lm.cache_available && lm.occupancy != null && <div className="faint">cache unavailable</div>}
      <div className="faint">{lm.age_ms == null ? "never polled" : `read ${formatDuration(lm.age_ms)} ago`}</div>
    </span>
  );
}
