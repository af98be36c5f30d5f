import { describe, expect, it } from "vitest";
import { shareOverTime, sumHistories, type FleetHistory } from "./history";

const point = (at: number, rps: number, inFlight = 0) => ({
  at_unix_ms: at,
  requests_per_s: rps,
  errors_per_s: rps / 10,
  in_flight: inFlight,
  ttft_p50_ms: 12,
  ttft_p95_ms: 30,
});

describe("sumHistories", () => {
  it("adds the gateways' rates slot by slot, a fast pusher by its mean", () => {
    const fleet: FleetHistory = {
      gateways: [
        { node_id: "gw-1", interval_ms: 1000, series: [{ route: "chat", target: "a/m", points: [point(5_100, 2, 1), point(6_100, 4, 3)] }] },
        { node_id: "gw-2", interval_ms: 5000, series: [{ route: "chat", target: "a/m", points: [point(9_000, 10, 2)] }] },
        { node_id: "gw-3", interval_ms: 5000, series: [{ route: "chat", target: "a/m", points: [point(9_000, 1000)] }] },
      ],
    };
    const sum = sumHistories(fleet, 5000, ["gw-1", "gw-2"]);
    expect(sum.series).toHaveLength(1);
    const [slot] = sum.series[0].points;
    expect(sum.series[0].points).toHaveLength(1);
    expect(slot.at_unix_ms).toBe(10_000);
    expect(slot.requests_per_s).toBe(13);
    expect(slot.errors_per_s).toBeCloseTo(1.3);
    expect(slot.in_flight).toBe(5);
    expect(slot.ttft_p50_ms).toBeNull();
  });
});

describe("shareOverTime", () => {
  it("is each target's share of the route's requests at each time", () => {
    const history = {
      interval_ms: 5000,
      series: [
        { route: "chat", target: "a/m", points: [point(5_000, 3), point(10_000, 0)] },
        { route: "chat", target: "b/m", points: [point(5_000, 1), point(10_000, 0)] },
        { route: "other", target: "a/m", points: [point(5_000, 100)] },
      ],
    };
    const { times, shares } = shareOverTime(history, "chat", ["a/m", "b/m"]);
    expect(times).toEqual([5_000, 10_000]);
    expect(shares).toEqual([
      [0.75, null],
      [0.25, null],
    ]);
  });
});
