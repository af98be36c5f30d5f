import { describe, expect, it } from "vitest";
import { distinctTargets, groupView, priceRange, routeView, usersOf } from "./routing";

const providers = [
  { slug: "gpu-a", name: "GPU A" },
  { slug: "gpu-b", name: "GPU B" },
];
const catalog = [
  { model: "Qwen/Qwen3-8B", input_per_mtok: 0.1, output_per_mtok: 0.4 },
  { model: "small", input_per_mtok: 0.05, output_per_mtok: 0.2 },
];

describe("routeView", () => {
  it("lists targets by provider name and upstream model with catalog prices and shares", () => {
    const view = routeView(
      {
        model: "chat",
        strategy: "weighted",
        targets: [
          { provider: "gpu-a", model: "Qwen/Qwen3-8B", weight: 3 },
          { provider: "GPU B", model: "small" },
        ],
      },
      providers,
      catalog,
    );
    expect(view.sharesStated).toBe(true);
    expect(view.targets.map((t) => [t.providerName, t.upstreamModel, t.share])).toEqual([
      ["GPU A", "Qwen/Qwen3-8B", 0.75],
      ["GPU B", "small", 0.25],
    ]);
    expect(priceRange(view.targets, "input_per_mtok")).toEqual([0.05, 0.1]);
  });

  it("states no share when the strategy ignores weights; the upstream model defaults to the public one", () => {
    const view = routeView({ model: "small", targets: [{ provider: "gpu-a", weight: 9 }] }, providers, catalog);
    expect(view.strategy).toBe("round_robin");
    expect(view.strategyHeld).toBeUndefined();
    expect(view.sharesStated).toBe(false);
    expect(view.targets[0]).toMatchObject({ upstreamModel: "small", share: null, weight: 9 });
    expect(view.targets[0].price?.output_per_mtok).toBe(0.2);
  });
});

describe("groupView", () => {
  it("shows passthrough members without a model or price", () => {
    const view = groupView({ slug: "fleet", strategy: "adaptive", members: [{ provider: "gpu-a" }] }, providers, catalog);
    expect(view.targets[0]).toMatchObject({ upstreamModel: null, price: null, share: 1 });
  });
});

describe("usersOf", () => {
  it("finds routes and groups naming a provider by slug or name", () => {
    const users = usersOf(
      { slug: "gpu-b", name: "GPU B" },
      [{ model: "a", targets: [{ provider: "GPU B" }] }, { model: "b", targets: [{ provider: "gpu-a" }] }],
      [{ slug: "g", members: [{ provider: "gpu-b" }] }],
    );
    expect(users).toEqual({ routes: ["a"], groups: ["g"] });
  });
});

describe("distinctTargets", () => {
  it("counts a target listed by several routes once, in first-seen order", () => {
    const a = { provider: "gpu-a", model: "m", in_flight: 3 };
    const routes = [
      { targets: [a, { provider: "gpu-b", model: "m", in_flight: 1 }] },
      { targets: [{ ...a }, { provider: "gpu-a", model: "other", in_flight: 0 }] },
    ];
    const targets = distinctTargets(routes);
    expect(targets.map((t) => `${t.provider}/${t.model}`)).toEqual(["gpu-a/m", "gpu-b/m", "gpu-a/other"]);
    expect(targets.reduce((n, t) => n + t.in_flight, 0)).toBe(4);
  });
});
