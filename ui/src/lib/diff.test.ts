import { describe, expect, it } from "vitest";
import { fieldChanges, shownValue } from "./diff";

describe("fieldChanges", () => {
  it("lists only the fields an update changed, nested ones by path", () => {
    const before = { model: "chat", strategy: "weighted", targets: [{ provider: "a", weight: 1 }, { provider: "b" }] };
    const after = { model: "chat", strategy: "adaptive", targets: [{ provider: "a", weight: 4 }, { provider: "b" }] };
    expect(fieldChanges(before, after)).toEqual([
      { field: "strategy", before: "weighted", after: "adaptive" },
      { field: "targets[0].weight", before: 1, after: 4 },
    ]);
  });

  it("shows a create as every field new and a delete as every field gone", () => {
    expect(fieldChanges(undefined, { slug: "gpu", kv_events: { block_size: 16 } })).toEqual([
      { field: "slug", before: undefined, after: "gpu" },
      { field: "kv_events.block_size", before: undefined, after: 16 },
    ]);
    expect(fieldChanges({ model: "m", input_per_mtok: 0.1 }, undefined).map((c) => c.field)).toEqual([
      "model",
      "input_per_mtok",
    ]);
    expect(shownValue(undefined)).toBe("—");
    expect(shownValue([])).toBe("[]");
  });

  it("sees a field removed from a list", () => {
    expect(fieldChanges({ targets: [{ provider: "a" }, { provider: "b" }] }, { targets: [{ provider: "a" }] })).toEqual([
      { field: "targets[1].provider", before: "b", after: undefined },
    ]);
  });
});
