// The load-balancing strategies, as the backend knows them.
//
// STRATEGIES mirrors `rolter_balancer::StrategyKind::ALL` and READS_WEIGHTS
// the strategies whose `reads_weights()` is true (`build_with_stats` hands
// the weight slice to those three only; every other strategy is built from
// the target count and never consults a weight). `tests/dashboard.rs`
// reads both literals below and fails when they drift from the backend, so
// keep them as plain string arrays: a strategy added to the backend must be
// added here, or the dashboard would tell operators its weights do nothing
// (docs/design/balancer.md, "Strategies").

export const STRATEGIES = [
  "round_robin",
  "random",
  "power_of_two",
  "weighted",
  "consistent_hash",
  "cache_aware",
  "pipeline",
  "precise_cache_aware",
  "lmcache_aware",
  "adaptive",
  "predicted_latency",
  "lora_aware",
] as const;

export const READS_WEIGHTS = ["weighted", "pipeline", "adaptive"] as const;

export type Strategy = (typeof STRATEGIES)[number];

/// What a route or group runs when it names no strategy.
export const DEFAULT_STRATEGY: Strategy = "round_robin";

/// Whether `name` is a strategy this dashboard knows.
export function isKnownStrategy(name: string): name is Strategy {
  return (STRATEGIES as readonly string[]).includes(name);
}

/// Whether the strategy reads its targets' weights. The one place the
/// dashboard decides whether to state a traffic share: the Model Catalog,
/// the model sheet and the Routing Rules cards all ask here. An unknown
/// strategy reads none (the dashboard cannot vouch for it). `undefined` is a
/// route that names no strategy, which runs the default.
export function usesWeights(strategy: string | undefined | null): boolean {
  const name = strategy ?? DEFAULT_STRATEGY;
  return (READS_WEIGHTS as readonly string[]).includes(name);
}

/// Strategies that need a telemetry source on the target providers, and
/// which one. Without it they fall back to least load silently.
export const TELEMETRY_SOURCE: Partial<Record<Strategy, "kv_events" | "lmcache">> = {
  precise_cache_aware: "kv_events",
  lmcache_aware: "lmcache",
};

/// One line per strategy, for pickers and cards (README, "Routing").
export const STRATEGY_SUMMARY: Record<Strategy, string> = {
  round_robin: "Strict rotation over the eligible targets.",
  random: "Uniformly at random over the eligible targets.",
  power_of_two: "The less loaded (in-flight requests) of two random targets.",
  weighted: "Smooth weighted round robin: each target's share follows its weight.",
  consistent_hash:
    "A hash ring keyed by x-session-id (else the conversation): a session sticks to one target.",
  cache_aware:
    "Prefix affinity on the conversation text, spreading when a warm replica gets busy.",
  pipeline:
    "Filter, then a weighted sum of session affinity, weight, load and prefix affinity; the best wins.",
  precise_cache_aware:
    "Scores the caller's token blocks resident on each engine (vLLM KV events), then load.",
  lmcache_aware: "Prefers engines whose LMCache has free capacity, then load.",
  adaptive:
    "Blend of observed latency, catalog price and load under the deployment-wide adaptive-routing policy.",
  predicted_latency:
    "Ranks targets by a learned model of latency from queue depth and prompt size.",
  lora_aware: "Prefers a target that already holds the requested LoRA adapter, then prefix and load.",
};

/// A strategy's one-line description; unknown ones say so.
export function describeStrategy(name: string | null | undefined): string {
  const strategy = name ?? DEFAULT_STRATEGY;
  return isKnownStrategy(strategy)
    ? STRATEGY_SUMMARY[strategy]
    : "A strategy this dashboard does not know; the node runs it as configured.";
}

export interface WeightedTarget {
  weight?: number | null;
}

/// Each target's share of the traffic by weight, in [0, 1], or `null` when
/// the strategy ignores weights (then no share may be stated at all). A
/// missing weight counts as the default 1.
export function trafficShares(
  strategy: string | undefined | null,
  targets: readonly WeightedTarget[],
): number[] | null {
  if (!usesWeights(strategy)) return null;
  const weights = targets.map((t) => (t.weight == null ? 1 : Math.max(0, t.weight)));
  const total = weights.reduce((sum, w) => sum + w, 0);
  return weights.map((w) => (total > 0 ? w / total : 0));
}

/// What a card says instead of a share when the strategy ignores weights.
export function weightsIgnoredNote(strategy: string | undefined | null): string {
  const name = strategy ?? DEFAULT_STRATEGY;
  return `Weights are ignored by ${name}: a weight on its targets is stored and never consulted.`;
}
