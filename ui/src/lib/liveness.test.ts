import { describe, expect, it } from "vitest";
import { ApiError } from "./api";
import { liveness } from "./hooks";

describe("liveness", () => {
  const now = 100_000;
  it("is live while the last poll answered within an interval and a second", () => {
    expect(liveness({ error: null, updatedAt: now - 2_900 }, 2_000, true, now)).toBe("live");
    expect(liveness({ error: null, updatedAt: null }, 2_000, true, now)).toBe("live");
  });

  it("goes stale once an answer is late, and failed when the poll failed or timed out", () => {
    expect(liveness({ error: null, updatedAt: now - 3_100 }, 2_000, true, now)).toBe("stale");
    const timedOut = new ApiError(0, "The node did not answer within 4 s.", "timeout");
    expect(liveness({ error: timedOut, updatedAt: now - 500 }, 2_000, true, now)).toBe("failed");
  });

  it("goes stale as soon as the call under way is late, before any timeout", () => {
    expect(liveness({ error: null, updatedAt: now - 2_500, pendingSince: now - 900 }, 2_000, true, now)).toBe("live");
    expect(liveness({ error: null, updatedAt: now - 2_500, pendingSince: now - 1_100 }, 2_000, true, now)).toBe("stale");
    // The first load is loading, not stale.
    expect(liveness({ error: null, updatedAt: null, pendingSince: now - 5_000 }, 2_000, true, now)).toBe("live");
  });

  it("says paused when the operator paused it, whatever the data", () => {
    expect(liveness({ error: new ApiError(0, "x"), updatedAt: 0 }, 2_000, false, now)).toBe("paused");
  });
});
