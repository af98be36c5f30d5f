// The fleet as a control node shows it: each gateway's pushed live state
// (`GET /api/v1/fleet/gateways`), and their sum. Counters a gateway keeps of
// its own traffic add up; an engine's shared state (health, breaker, parking,
// its reported load) is each gateway's view of the same engine, so the sum
// says on how many gateways it holds instead of adding it.

import type { LiveRoute, LiveRoutes, LiveTarget, Schemas } from "./api";

export type GatewayReport = Schemas["GatewayView"];

/// How many of the summed gateways see a target in each shared state.
export interface SeenOn {
  gateways: number;
  down: number;
  breakerOpen: number;
  parked: number;
  saturated: number;
  kvStale: number;
}

export type FleetTarget = LiveTarget & { seenOn?: SeenOn };
export type FleetRoute = Omit<LiveRoute, "targets"> & { targets: FleetTarget[] };
export type FleetState = Omit<LiveRoutes, "routes"> & { routes: FleetRoute[] };

function targetKey(t: { provider: string; model: string }): string {
  return `${t.provider}/${t.model}`;
}

/// The weighted mean of `values` by `weights`; `null` without weight.
function weightedMean(pairs: readonly [number | null | undefined, number][]): number | null {
  let sum = 0;
  let weight = 0;
  for (const [value, w] of pairs) {
    if (value == null || w <= 0) continue;
    sum += value * w;
    weight += w;
  }
  return weight > 0 ? sum / weight : null;
}

const BREAKER_RANK: Record<string, number> = { closed: 0, half_open: 1, open: 2 };

function sumTarget(views: readonly LiveTarget[]): FleetTarget {
  const first = views[0];
  const traffic = views.map((v) => v.route_traffic).filter((t): t is NonNullable<typeof t> => t != null);
  const freshest = views
    .map((v) => v.engine_reading)
    .filter((r): r is NonNullable<typeof r> => r != null)
    .sort((a, b) => a.age_ms - b.age_ms)[0];
  const kv = views.map((v) => v.kv_index).filter((k): k is NonNullable<typeof k> => k != null);
  const lm = views.map((v) => v.lmcache).filter((l): l is NonNullable<typeof l> => l != null);
  const parked = views.map((v) => v.parked_until_ms).filter((p): p is number => p != null);
  return {
    ...first,
    in_flight: views.reduce((n, v) => n + v.in_flight, 0),
    requests: views.reduce((n, v) => n + v.requests, 0),
    failures: views.reduce((n, v) => n + v.failures, 0),
    picks: views.reduce((n, v) => n + v.picks, 0),
    latency_samples: views.reduce((n, v) => n + v.latency_samples, 0),
    latency_ewma_ms: weightedMean(views.map((v) => [v.latency_ewma_ms, v.latency_samples])),
    // Each gateway's figure already holds the engine's own reading: the
    // largest is the best single estimate, adding them would count it again.
    combined_load: Math.max(...views.map((v) => v.combined_load)),
    engine_reading: freshest ?? null,
    healthy: views.every((v) => v.healthy),
    breaker: views.map((v) => v.breaker).reduce((a, b) => ((BREAKER_RANK[b] ?? 0) > (BREAKER_RANK[a] ?? 0) ? b : a)),
    parked_until_ms: parked.length ? Math.max(...parked) : null,
    saturated: views.find((v) => v.saturated != null)?.saturated ?? null,
    route_traffic: traffic.length
      ? {
          attempts: traffic.reduce((n, t) => n + t.attempts, 0),
          failures: traffic.reduce((n, t) => n + t.failures, 0),
          latency_mean_ms: weightedMean(traffic.map((t) => [t.latency_mean_ms, t.attempts])),
        }
      : null,
    kv_index: kv.length
      ? {
          configured: kv.some((k) => k.configured),
          usable: kv.every((k) => k.usable),
          blocks_resident: Math.max(...kv.map((k) => k.blocks_resident)),
          last_message_age_ms: kv.some((k) => k.last_message_age_ms != null)
            ? Math.min(...kv.map((k) => k.last_message_age_ms ?? Infinity))
            : null,
        }
      : null,
    lmcache: lm.length ? { ...lm[0], fresh: lm.every((l) => l.fresh) } : null,
    seenOn: {
      gateways: views.length,
      down: views.filter((v) => !v.healthy).length,
      breakerOpen: views.filter((v) => v.breaker !== "closed").length,
      parked: parked.length,
      saturated: views.filter((v) => v.saturated != null).length,
      kvStale: kv.filter((k) => k.configured && !k.usable).length,
    },
  };
}

type Report = LiveRoute["report"];

function sumReports(routes: readonly LiveRoute[], keys: readonly string[]): Report {
  const picks = new Map<string, number>();
  for (const route of routes) {
    route.targets.forEach((t, i) => {
      const key = targetKey(t);
      picks.set(key, (picks.get(key) ?? 0) + (route.report.targets[i]?.picks ?? 0));
    });
  }
  const decisions = routes.map((r) => r.report.decisions).filter((d): d is NonNullable<typeof d> => d != null);
  const cache = routes.map((r) => r.report.cache_decisions).filter((d): d is NonNullable<typeof d> => d != null);
  return {
    decisions: decisions.length
      ? {
          engaged: decisions.some((d) => d.engaged),
          blend: decisions.reduce((n, d) => n + d.blend, 0),
          fallback: decisions.reduce((n, d) => n + d.fallback, 0),
          exploration: decisions.reduce((n, d) => n + d.exploration, 0),
        }
      : null,
    cache_decisions: cache.length
      ? {
          affinity: cache.reduce((n, d) => n + d.affinity, 0),
          spread: cache.reduce((n, d) => n + d.spread, 0),
          cold: cache.reduce((n, d) => n + d.cold, 0),
        }
      : null,
    // Scores are each gateway's own ranking: only picks add up.
    targets: keys.map((key) => ({ picks: picks.get(key) ?? 0, components: {}, signals: {} })),
  };
}

/// The fresh gateways' states summed: routes by model, targets by provider
/// and upstream model (a gateway still on an older configuration adds the
/// routes it has). Stale reports are left out; `summed` names the others.
export function sumGateways(reports: readonly GatewayReport[]): FleetState & { summed: string[] } {
  const fresh = reports.filter((r) => !r.stale);
  const byModel = new Map<string, LiveRoute[]>();
  for (const report of fresh) {
    for (const route of report.state.routes) {
      const list = byModel.get(route.model) ?? [];
      list.push(route);
      byModel.set(route.model, list);
    }
  }
  const routes: FleetRoute[] = [...byModel.entries()]
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([, views]) => {
      const byTarget = new Map<string, LiveTarget[]>();
      for (const view of views) {
        for (const target of view.targets) {
          const key = targetKey(target);
          byTarget.set(key, [...(byTarget.get(key) ?? []), target]);
        }
      }
      const keys = [...byTarget.keys()];
      return {
        ...views[0],
        health_panic: views.some((v) => v.health_panic),
        queued: views.reduce((n, v) => n + v.queued, 0),
        token_sources: [],
        targets: keys.map((key) => sumTarget(byTarget.get(key) ?? [])),
        report: sumReports(views, keys),
      };
    });
  return {
    version: Math.max(0, ...fresh.map((r) => r.state.version)),
    node_id: "all gateways",
    last_reload: null,
    routes,
    groups: [],
    addressed_routes: 0,
    summed: fresh.map((r) => r.node_id),
  };
}

/// A route's observed share of its traffic per target (attempts this
/// route sent it over all it sent), `null` before any.
export function observedShares(route: { targets: readonly LiveTarget[] }): (number | null)[] {
  const attempts = route.targets.map((t) => t.route_traffic?.attempts ?? 0);
  const total = attempts.reduce((a, b) => a + b, 0);
  return attempts.map((a) => (total > 0 ? a / total : null));
}

/// The configured share of each target by weight.
export function configuredShares(route: { targets: readonly { weight: number }[] }): number[] {
  const total = route.targets.reduce((n, t) => n + t.weight, 0);
  return route.targets.map((t) => (total > 0 ? t.weight / total : 0));
}
