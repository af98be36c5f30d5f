import { describe, expect, it } from "vitest";
import {
  DEFAULT_STRATEGY,
  READS_WEIGHTS,
  STRATEGIES,
  STRATEGY_SUMMARY,
  describeStrategy,
  trafficShares,
  usesWeights,
  weightsIgnoredNote,
} from "./strategies";

describe("usesWeights", () => {
  it("is true for exactly weighted, pipeline and adaptive", () => {
    expect(STRATEGIES.filter((s) => usesWeights(s))).toEqual(["weighted", "pipeline", "adaptive"]);
    expect([...READS_WEIGHTS]).toEqual(["weighted", "pipeline", "adaptive"]);
  });

  it("treats a row without a strategy as the default, which ignores weights", () => {
    expect(DEFAULT_STRATEGY).toBe("round_robin");
    expect(usesWeights(undefined)).toBe(false);
    expect(usesWeights(null)).toBe(false);
  });

  it("never vouches for a strategy it does not know", () => {
    expect(usesWeights("weighted_v2")).toBe(false);
    expect(usesWeights("")).toBe(false);
  });
});

describe("trafficShares", () => {
  it("states shares by weight for strategies that read weights", () => {
    expect(trafficShares("weighted", [{ weight: 3 }, { weight: 1 }])).toEqual([0.75, 0.25]);
    // A missing weight is the default 1.
    expect(trafficShares("pipeline", [{ weight: 2 }, {}, { weight: null }])).toEqual([0.5, 0.25, 0.25]);
    expect(trafficShares("adaptive", [{ weight: 1 }])).toEqual([1]);
  });

  it("states none for every other strategy, weights or not", () => {
    for (const strategy of STRATEGIES.filter((s) => !usesWeights(s))) {
      expect(trafficShares(strategy, [{ weight: 3 }, { weight: 1 }])).toBeNull();
    }
    expect(trafficShares(undefined, [{ weight: 5 }])).toBeNull();
    expect(trafficShares("something_new", [{ weight: 5 }])).toBeNull();
  });

  it("says the weights are ignored, naming the strategy", () => {
    expect(weightsIgnoredNote("cache_aware")).toContain("ignored by cache_aware");
    expect(weightsIgnoredNote(undefined)).toContain("ignored by round_robin");
  });
});

describe("descriptions", () => {
  it("describe every strategy and admit unknown ones", () => {
    for (const strategy of STRATEGIES) expect(STRATEGY_SUMMARY[strategy].length).toBeGreaterThan(10);
    expect(describeStrategy("mystery")).toContain("does not know");
  });
});
