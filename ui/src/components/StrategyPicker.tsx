import type { ProviderRow } from "../lib/api";
import { effectiveStrategy, neededSource, pickerOptions, providersLackingSource } from "../lib/picker";
import { describeStrategy, usesWeights } from "../lib/strategies";
import { DocsLink, Link } from "./common";
import { useApp } from "../lib/hooks";
import { href } from "../lib/router";

/// The documentation page the telemetry-source hint links.
export const CACHE_AWARE_DOCS_PAGE = "strategies.md#setting-up-the-telemetry-strategies";

/// The strategy <select> of the route and group editors (see picker.ts for
/// the rules). `held` is what the row holds; `value` the select's value.
export function StrategyPicker(props: {
  id: string;
  held: string | null | undefined;
  value: string;
  onChange: (value: string) => void;
  disabled?: boolean;
  /// The providers the row's targets name, for the telemetry-source hint.
  targetProviders: string[];
  providers: ProviderRow[];
  /// "route" or "provider group", in the hint.
  noun: string;
  /// What the row runs when it names no strategy, if not the default.
  fallback?: string;
}) {
  const options = pickerOptions(props.held, props.fallback);
  const strategy = effectiveStrategy(props.value, props.fallback);
  return (
    <div>
      <select
        id={props.id}
        data-testid="strategy-picker"
        value={props.value}
        disabled={props.disabled}
        onChange={(e) => props.onChange(e.target.value)}
      >
        {options.map((o) => (
          <option key={o.value} value={o.value}>
            {o.label}
          </option>
        ))}
      </select>
      <div className="help">
        {describeStrategy(strategy)}{" "}
        {usesWeights(strategy) ? "Reads target weights." : "Ignores target weights."}
      </div>
      {strategy === "adaptive" && (
        <div className="help" data-testid="adaptive-note">
          adaptive is governed by the deployment-wide adaptive-routing policy and is not offered here;
          this {props.noun} keeps it unless you choose another strategy.
        </div>
      )}
      <TelemetryHint strategy={strategy} noun={props.noun} targetProviders={props.targetProviders} providers={props.providers} />
    </div>
  );
}

/// What precise_cache_aware and lmcache_aware need, and where it is set.
export function TelemetryHint(props: {
  strategy: string;
  noun: string;
  targetProviders: string[];
  providers: ProviderRow[];
}) {
  const { session } = useApp();
  const source = neededSource(props.strategy);
  if (!source) return null;
  const table = source === "kv_events" ? "[providers.kv_events]" : "[providers.lmcache]";
  const lacking = providersLackingSource(props.strategy, props.targetProviders, props.providers);
  const what =
    source === "kv_events"
      ? "a KV-event source (the engine's vLLM KV-cache event stream)"
      : "an LMCache source (the cache's occupancy signal)";
  return (
    <div className="hint" data-testid="telemetry-hint">
      <p>
        <strong>{props.strategy}</strong> needs {what} on the target providers; without one it falls back
        to least-load routing silently. Set it on the provider sheet under “Telemetry sources” (
        <Link to={href.providers()}>Providers</Link>), or in <code>{table}</code> of rolter.toml for a
        provider defined there.
      </p>
      {lacking.length > 0 && (
        <p data-testid="lacking-source">
          Target providers without one: {lacking.join(", ")}.
        </p>
      )}
      {session.docs_url && (
        <p>
          <DocsLink page={CACHE_AWARE_DOCS_PAGE}>How cache-aware routing works</DocsLink>
        </p>
      )}
    </div>
  );
}
