// The strategy picker of the route and provider-group editors, as pure
// functions (docs/design/balancer.md, "Choosing a strategy in the dashboard").
//
// - It offers every strategy except `adaptive`, which the deployment-wide
//   policy governs from its own screen.
// - It always renders the value the route holds, even one it would not
//   offer: a native <select> whose value matches no option shows the first
//   option instead (before #897 a group on adaptive read as round_robin).
//   So a held value outside the offer becomes an extra, labelled option.
// - Saving never rewrites a strategy the operator did not touch: an
//   untouched picker saves exactly what the row held, including nothing at
//   all (a row that names no strategy stays without one).

import {
  DEFAULT_STRATEGY,
  STRATEGIES,
  TELEMETRY_SOURCE,
  isKnownStrategy,
  type Strategy,
} from "./strategies";

/// The strategies the picker offers by itself.
export const OFFERED: readonly Strategy[] = STRATEGIES.filter((s) => s !== "adaptive");

/// The <select> value standing for "the row names no strategy".
export const UNSET = "";

export interface PickerOption {
  value: string;
  label: string;
  /// Shown only because the row holds it; not offered otherwise.
  heldOnly: boolean;
}

/// Why a held value is outside the offer, for its option label.
export function heldReason(value: string): string {
  if (value === "adaptive") return "governed by the adaptive-routing policy";
  if (!isKnownStrategy(value)) return "not known to this dashboard";
  return "not offered here";
}

/// The options for a row holding `held` (`undefined`: it names none). The
/// held value is always among them, first when it is outside the offer.
/// `fallback` is what the row runs when it names none (a disaggregated
/// route's decode pool defaults to power_of_two).
export function pickerOptions(held: string | undefined | null, fallback: string = DEFAULT_STRATEGY): PickerOption[] {
  const options: PickerOption[] = [];
  if (held == null) {
    options.push({
      value: UNSET,
      label: `${fallback} (default; not set on this row)`,
      heldOnly: true,
    });
  } else if (!(OFFERED as readonly string[]).includes(held)) {
    options.push({
      value: held,
      label: `${held} (current; ${heldReason(held)})`,
      heldOnly: true,
    });
  }
  for (const strategy of OFFERED) {
    options.push({ value: strategy, label: strategy, heldOnly: false });
  }
  return options;
}

/// The <select> value that shows what the row holds.
export function pickerValue(held: string | undefined | null): string {
  return held ?? UNSET;
}

/// The strategy to save: the held one, as held, unless the operator picked
/// another. `selected` is the <select>'s value; `touched` whether the
/// operator changed it at all.
export function strategyToSave(
  held: string | undefined | null,
  selected: string,
  touched: boolean,
): string | undefined {
  const original = held ?? undefined;
  if (!touched || selected === pickerValue(held)) return original;
  return selected === UNSET ? original : selected;
}

/// The strategy a route runs, for hints and shares (`undefined` is
/// `fallback`, the default).
export function effectiveStrategy(value: string | undefined | null, fallback: string = DEFAULT_STRATEGY): string {
  return value == null || value === UNSET ? fallback : value;
}

/// The telemetry source the strategy needs on its target providers, if any.
export function neededSource(strategy: string | undefined | null): "kv_events" | "lmcache" | null {
  const name = effectiveStrategy(strategy);
  return isKnownStrategy(name) ? TELEMETRY_SOURCE[name] ?? null : null;
}

export interface SourceCarrier {
  slug?: string | null;
  name?: string | null;
  kv_events?: unknown;
  lmcache?: unknown;
}

/// The target providers that lack the source `strategy` needs; empty when it
/// needs none or all have it. Providers not found are counted as lacking.
export function providersLackingSource(
  strategy: string | undefined | null,
  targetProviders: readonly string[],
  providers: readonly SourceCarrier[],
): string[] {
  const source = neededSource(strategy);
  if (source === null) return [];
  const lacking: string[] = [];
  for (const ref of new Set(targetProviders)) {
    const provider = providers.find((p) => p.slug === ref || p.name === ref);
    if (!provider || provider[source] == null) lacking.push(provider?.name ?? ref);
  }
  return lacking;
}
