// Routes as the Model Catalog, the model sheet and the Routing Rules cards
// show them: each target by provider name and upstream model, its catalog
// price, and a traffic share only where the strategy reads weights
// (`usesWeights`, the one shared decision).

import type { CatalogRow, GroupRow, ProviderRow, RouteRow, TargetEntry } from "./api";
import { DEFAULT_STRATEGY, trafficShares } from "./strategies";

export interface TargetLine {
  /// The provider as the row names it (slug or name).
  providerRef: string;
  /// Its slug when the provider is known.
  providerSlug: string | null;
  providerName: string;
  /// The upstream model sent to the provider; `null` = passthrough (a group
  /// member that forwards what the caller asked for).
  upstreamModel: string | null;
  weight: number;
  /// Share of the traffic by weight, or `null` when the strategy ignores
  /// weights.
  share: number | null;
  price: CatalogRow | null;
}

export interface RuleView {
  key: string;
  strategy: string;
  /// The strategy as the row writes it (`undefined`: the default).
  strategyHeld: string | null | undefined;
  sharesStated: boolean;
  targets: TargetLine[];
}

export function findProvider(
  providers: readonly ProviderRow[],
  ref: string | null | undefined,
): ProviderRow | undefined {
  if (!ref) return undefined;
  return providers.find((p) => p.slug === ref) ?? providers.find((p) => p.name === ref);
}

export function priceOf(catalog: readonly CatalogRow[], model: string | null): CatalogRow | null {
  if (model == null) return null;
  return catalog.find((c) => c.model === model) ?? null;
}

function lines(
  strategy: string | null | undefined,
  entries: readonly TargetEntry[],
  defaultModel: string | null,
  providers: readonly ProviderRow[],
  catalog: readonly CatalogRow[],
): TargetLine[] {
  const shares = trafficShares(strategy, entries);
  return entries.map((entry, i) => {
    const provider = findProvider(providers, entry.provider);
    const upstreamModel = entry.model ?? defaultModel;
    return {
      providerRef: entry.provider ?? "",
      providerSlug: provider?.slug ?? null,
      providerName: provider?.name ?? entry.provider ?? "",
      upstreamModel,
      weight: entry.weight ?? 1,
      share: shares ? shares[i] : null,
      price: priceOf(catalog, upstreamModel),
    };
  });
}

/// A route: targets default their upstream model to the public one.
export function routeView(
  route: RouteRow,
  providers: readonly ProviderRow[],
  catalog: readonly CatalogRow[],
): RuleView {
  const shares = trafficShares(route.strategy, route.targets ?? []);
  return {
    key: route.model ?? "",
    strategy: route.strategy ?? DEFAULT_STRATEGY,
    strategyHeld: route.strategy,
    sharesStated: shares !== null,
    targets: lines(route.strategy, route.targets ?? [], route.model ?? null, providers, catalog),
  };
}

/// A provider group: members without a model forward the requested one.
export function groupView(
  group: GroupRow,
  providers: readonly ProviderRow[],
  catalog: readonly CatalogRow[],
): RuleView {
  const shares = trafficShares(group.strategy, group.members ?? []);
  return {
    key: group.slug ?? "",
    strategy: group.strategy ?? DEFAULT_STRATEGY,
    strategyHeld: group.strategy,
    sharesStated: shares !== null,
    targets: lines(group.strategy, group.members ?? [], null, providers, catalog),
  };
}

/// The lowest and highest price over the targets that are priced.
export function priceRange(
  targets: readonly TargetLine[],
  field: "input_per_mtok" | "output_per_mtok",
): [number, number] | null {
  const prices = targets
    .map((t) => t.price?.[field])
    .filter((p): p is number => typeof p === "number");
  if (prices.length === 0) return null;
  return [Math.min(...prices), Math.max(...prices)];
}

/// Routes and groups whose targets name `provider` (slug or name).
export function usersOf(
  provider: ProviderRow,
  routes: readonly RouteRow[],
  groups: readonly GroupRow[],
): { routes: string[]; groups: string[] } {
  const names = (ref: string | null | undefined) => ref === provider.slug || ref === provider.name;
  return {
    routes: routes
      .filter((r) => (r.targets ?? []).some((t) => names(t.provider)))
      .map((r) => r.model ?? ""),
    groups: groups
      .filter((g) => (g.members ?? []).some((m) => names(m.provider)))
      .map((g) => g.slug ?? ""),
  };
}

/// Each engine-side target once, however many routes list it: a target is
/// one `(provider, upstream model)` with one set of counters (in flight,
/// health, breaker, parking), so the fleet's totals count it once.
export function distinctTargets<T extends { provider: string; model: string }>(
  routes: readonly { targets: readonly T[] }[],
): T[] {
  const seen = new Map<string, T>();
  for (const route of routes) {
    for (const target of route.targets) {
      const key = `${target.provider}/${target.model}`;
      if (!seen.has(key)) seen.set(key, target);
    }
  }
  return [...seen.values()];
}
