import { describe, expect, it } from "vitest";
import {
  OFFERED,
  UNSET,
  effectiveStrategy,
  neededSource,
  pickerOptions,
  pickerValue,
  providersLackingSource,
  strategyToSave,
} from "./picker";
import { STRATEGIES } from "./strategies";

/// What a native <select> shows: the option whose value is the select's
/// value, else the first option.
function displayed(held: string | undefined) {
  const options = pickerOptions(held);
  const value = pickerValue(held);
  return (options.find((o) => o.value === value) ?? options[0]).value;
}

describe("the strategy picker offers", () => {
  it("every strategy except adaptive", () => {
    expect(OFFERED).toEqual(STRATEGIES.filter((s) => s !== "adaptive"));
    const offered = pickerOptions("round_robin").filter((o) => !o.heldOnly).map((o) => o.value);
    expect(offered).not.toContain("adaptive");
    expect(offered).toContain("precise_cache_aware");
    expect(offered).toContain("lmcache_aware");
  });

  it("no extra option when the held value is offered", () => {
    expect(pickerOptions("weighted").filter((o) => o.heldOnly)).toEqual([]);
    expect(pickerOptions("weighted")).toHaveLength(OFFERED.length);
  });
});

describe("a row that names no strategy", () => {
  it("shows what it runs: the default, or the caller's fallback", () => {
    expect(pickerOptions(undefined)[0].label).toBe("round_robin (default; not set on this row)");
    expect(pickerOptions(undefined, "power_of_two")[0].label).toBe("power_of_two (default; not set on this row)");
    expect(effectiveStrategy(UNSET, "power_of_two")).toBe("power_of_two");
    expect(effectiveStrategy("weighted", "power_of_two")).toBe("weighted");
  });
});

describe("the picker renders the held value", () => {
  it.each(["adaptive", "brand_new_strategy", "round_robin", "lora_aware"])(
    "%s, even when it would not offer it",
    (held) => {
      expect(displayed(held)).toBe(held);
    },
  );

  it("adaptive (from rolter.toml or the API) as a labelled extra option, first", () => {
    const [first] = pickerOptions("adaptive");
    expect(first).toMatchObject({ value: "adaptive", heldOnly: true });
    expect(first.label).toContain("adaptive-routing policy");
  });

  it("a strategy unknown to the dashboard as such", () => {
    const [first] = pickerOptions("brand_new_strategy");
    expect(first).toMatchObject({ value: "brand_new_strategy", heldOnly: true });
    expect(first.label).toContain("not known to this dashboard");
  });

  it("a row without a strategy as the default, not as a chosen value", () => {
    expect(displayed(undefined)).toBe(UNSET);
    const [first] = pickerOptions(undefined);
    expect(first.label).toContain("round_robin (default");
    expect(effectiveStrategy(UNSET)).toBe("round_robin");
  });
});

describe("saving never rewrites a strategy the operator did not touch", () => {
  it.each([["adaptive"], ["brand_new_strategy"], ["precise_cache_aware"], [undefined]])(
    "an untouched picker saves %s as held",
    (held) => {
      expect(strategyToSave(held, pickerValue(held), false)).toBe(held);
    },
  );

  it("even if the select reports another value without a change event", () => {
    expect(strategyToSave("adaptive", "round_robin", false)).toBe("adaptive");
  });

  it("a touched picker saves the operator's choice", () => {
    expect(strategyToSave("adaptive", "weighted", true)).toBe("weighted");
    expect(strategyToSave(undefined, "round_robin", true)).toBe("round_robin");
    expect(strategyToSave("round_robin", "precise_cache_aware", true)).toBe("precise_cache_aware");
  });

  it("changing away and back saves the held value as it was", () => {
    expect(strategyToSave("adaptive", "adaptive", true)).toBe("adaptive");
    expect(strategyToSave(undefined, UNSET, true)).toBeUndefined();
  });
});

describe("telemetry-source hints", () => {
  const providers = [
    { slug: "gpu-a", name: "GPU A", kv_events: { endpoint: "tcp://10.0.0.1:5557" } },
    { slug: "gpu-b", name: "GPU B" },
    { slug: "gpu-c", name: "GPU C", lmcache: { endpoint: "http://10.0.0.3:9000" } },
  ];

  it("name the source each cache strategy needs", () => {
    expect(neededSource("precise_cache_aware")).toBe("kv_events");
    expect(neededSource("lmcache_aware")).toBe("lmcache");
    expect(neededSource("cache_aware")).toBeNull();
    expect(neededSource(undefined)).toBeNull();
  });

  it("list the target providers without it", () => {
    expect(providersLackingSource("precise_cache_aware", ["gpu-a", "gpu-b"], providers)).toEqual(["GPU B"]);
    expect(providersLackingSource("lmcache_aware", ["GPU C", "gpu-a", "gpu-a"], providers)).toEqual(["GPU A"]);
    expect(providersLackingSource("round_robin", ["gpu-b"], providers)).toEqual([]);
    expect(providersLackingSource("precise_cache_aware", ["ghost"], providers)).toEqual(["ghost"]);
  });
});
