// Recent traffic for the charts: a node's own history (`/admin/history`) or
// each gateway's as its control node keeps it (`/api/v1/fleet/history`),
// summed over gateways slot by slot.

import type { Schemas } from "./api";

export type History = Schemas["HistoryAnswer"];
export type HistoryPoint = Schemas["Point"];
export type FleetHistory = Schemas["FleetHistoryAnswer"];

/// One route target's points, oldest first.
export function seriesOf(history: History | null | undefined, route: string, target: string): HistoryPoint[] {
  return history?.series.find((s) => s.route === route && s.target === target)?.points ?? [];
}

/// The gateways' histories as one: each point lands in the `slotMs` slot
/// its time falls in, and the gateways' rates and in-flight counts of a
/// slot add up. Time to first token is each gateway's own and is left out
/// of the sum.
export function sumHistories(fleet: FleetHistory | null | undefined, slotMs: number, only?: readonly string[]): History {
  const slots = new Map<string, Map<number, HistoryPoint>>();
  for (const gateway of fleet?.gateways ?? []) {
    if (only && !only.includes(gateway.node_id)) continue;
    for (const series of gateway.series) {
      const key = `${series.route}\u0000${series.target}`;
      const bySlot = slots.get(key) ?? new Map<number, HistoryPoint>();
      // A gateway that pushes more often than a slot adds its mean rate.
      const perSlot = new Map<number, HistoryPoint[]>();
      for (const point of series.points) {
        const slot = Math.floor(point.at_unix_ms / slotMs);
        perSlot.set(slot, [...(perSlot.get(slot) ?? []), point]);
      }
      for (const [slot, points] of perSlot) {
        const mean = (f: (p: HistoryPoint) => number) => points.reduce((n, p) => n + f(p), 0) / points.length;
        const was = bySlot.get(slot);
        bySlot.set(slot, {
          at_unix_ms: (slot + 1) * slotMs,
          requests_per_s: (was?.requests_per_s ?? 0) + mean((p) => p.requests_per_s),
          errors_per_s: (was?.errors_per_s ?? 0) + mean((p) => p.errors_per_s),
          in_flight: (was?.in_flight ?? 0) + points[points.length - 1].in_flight,
          ttft_p50_ms: null,
          ttft_p95_ms: null,
        });
      }
      slots.set(key, bySlot);
    }
  }
  return {
    interval_ms: slotMs,
    series: [...slots.entries()].map(([key, bySlot]) => {
      const [route, target] = key.split("\u0000");
      return { route, target, points: [...bySlot.values()].sort((a, b) => a.at_unix_ms - b.at_unix_ms) };
    }),
  };
}

/// A route's traffic share over time: the times, and per target its share
/// of the route's requests at each (`null` where the route had none).
export function shareOverTime(
  history: History | null | undefined,
  route: string,
  targets: readonly string[],
): { times: number[]; shares: (number | null)[][] } {
  const series = targets.map((t) => seriesOf(history, route, t));
  const times = [...new Set(series.flatMap((s) => s.map((p) => p.at_unix_ms)))].sort((a, b) => a - b);
  const rate = series.map((s) => new Map(s.map((p) => [p.at_unix_ms, p.requests_per_s])));
  const shares = targets.map((_, i) =>
    times.map((t) => {
      const total = rate.reduce((n, r) => n + (r.get(t) ?? 0), 0);
      return total > 0 ? (rate[i].get(t) ?? 0) / total : null;
    }),
  );
  return { times, shares };
}
