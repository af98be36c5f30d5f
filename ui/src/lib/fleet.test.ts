import { describe, expect, it } from "vitest";
import type { LiveRoute, LiveTarget } from "./api";
import { configuredShares, observedShares, sumGateways, type GatewayReport } from "./fleet";

function target(provider: string, over: Partial<LiveTarget> = {}): LiveTarget {
  return {
    provider,
    model: "m",
    weight: 1,
    base_url: `http://${provider}`,
    breaker: "closed",
    failures: 0,
    in_flight: 0,
    latency_ewma_ms: null,
    latency_samples: 0,
    picks: 0,
    requests: 0,
    healthy: true,
    combined_load: 0,
    route_traffic: { attempts: 0, failures: 0, latency_mean_ms: null },
    ...over,
  } as LiveTarget;
}

function route(model: string, targets: LiveTarget[], picks: number[], over: Partial<LiveRoute> = {}): LiveRoute {
  return {
    model,
    strategy: "weighted",
    reads_weights: true,
    health_panic: false,
    queued: 0,
    token_sources: [],
    targets,
    report: { targets: picks.map((p) => ({ picks: p, components: {}, signals: {} })) },
    ...over,
  } as LiveRoute;
}

function gateway(node_id: string, routes: LiveRoute[], stale = false): GatewayReport {
  return {
    node_id,
    age_ms: stale ? 60_000 : 500,
    interval_ms: 1000,
    stale,
    reported_at: "2026-12-02T10:00:00Z",
    state: { version: 3, node_id, routes, groups: [], addressed_routes: 0 },
  } as GatewayReport;
}

describe("sumGateways", () => {
  it("adds each gateway's own traffic and says on how many gateways shared state holds", () => {
    const one = gateway("gw-1", [
      route(
        "chat",
        [
          target("a", {
            in_flight: 2,
            requests: 10,
            latency_ewma_ms: 100,
            latency_samples: 10,
            combined_load: 7,
            route_traffic: { attempts: 6, failures: 1, latency_mean_ms: 100 },
          }),
          target("b", { requests: 4, route_traffic: { attempts: 4, failures: 0, latency_mean_ms: 50 } }),
        ],
        [6, 4],
        { queued: 1 },
      ),
    ]);
    const two = gateway("gw-2", [
      route(
        "chat",
        [
          target("b", { healthy: false, breaker: "open", route_traffic: { attempts: 2, failures: 2, latency_mean_ms: 80 } }),
          target("a", {
            in_flight: 3,
            requests: 30,
            latency_ewma_ms: 200,
            latency_samples: 30,
            combined_load: 5,
            route_traffic: { attempts: 18, failures: 0, latency_mean_ms: 200 },
          }),
        ],
        [2, 18],
        { queued: 2 },
      ),
    ]);
    const sum = sumGateways([one, two]);
    expect(sum.summed).toEqual(["gw-1", "gw-2"]);
    const [chat] = sum.routes;
    expect(chat.queued).toBe(3);
    const [a, b] = chat.targets;
    expect(a.provider).toBe("a");
    expect(a.in_flight).toBe(5);
    expect(a.requests).toBe(40);
    expect(a.latency_ewma_ms).toBe(175);
    expect(a.combined_load).toBe(7);
    expect(a.route_traffic).toEqual({ attempts: 24, failures: 1, latency_mean_ms: 175 });
    expect(b.route_traffic).toEqual({ attempts: 6, failures: 2, latency_mean_ms: 60 });
    expect(b.healthy).toBe(false);
    expect(b.breaker).toBe("open");
    expect(b.seenOn).toMatchObject({ gateways: 2, down: 1, breakerOpen: 1 });
    // Picks follow the target, not its position on each gateway.
    expect(chat.report.targets.map((t) => t.picks)).toEqual([24, 6]);
  });

  it("leaves stale gateways out and keeps routes only some gateways have", () => {
    const sum = sumGateways([
      gateway("gw-1", [route("chat", [target("a", { requests: 1 })], [1])]),
      gateway("gw-2", [route("chat", [target("a", { requests: 100 })], [100]), route("new", [target("a")], [0])]),
      gateway("gw-3", [route("chat", [target("a", { requests: 1000 })], [1000])], true),
    ]);
    expect(sum.summed).toEqual(["gw-1", "gw-2"]);
    expect(sum.routes.map((r) => r.model)).toEqual(["chat", "new"]);
    expect(sum.routes[0].targets[0].requests).toBe(101);
  });
});

describe("shares", () => {
  it("sets the observed share of a route's attempts beside the configured share by weight", () => {
    const r = route(
      "chat",
      [
        target("a", { weight: 3, route_traffic: { attempts: 24, failures: 0 } }),
        target("b", { route_traffic: { attempts: 8, failures: 0 } }),
        target("c", { route_traffic: { attempts: 8, failures: 0 } }),
      ],
      [24, 8, 8],
    );
    expect(observedShares(r)).toEqual([0.6, 0.2, 0.2]);
    expect(configuredShares(r)).toEqual([0.6, 0.2, 0.2]);
    expect(observedShares(route("idle", [target("a")], [0]))).toEqual([null]);
  });
});
