import { useState, type FormEvent } from "react";
import { ApiError, type CatalogRow } from "../lib/api";
import { applyEdits, fieldText } from "../lib/edit";
import { useApp, useConfig, useLiveState } from "../lib/hooks";
import { observedShares } from "../lib/fleet";
import { formatMs, formatNumber, formatPercent, formatPrice } from "../lib/format";
import { groupView, priceRange, routeView, type RuleView, type TargetLine } from "../lib/routing";
import { describeStrategy, weightsIgnoredNote } from "../lib/strategies";
import { href } from "../lib/router";
import {
  Badge,
  Empty,
  ErrorBox,
  FileManagedBadge,
  Link,
  Loading,
  LoadState,
  PageHead,
  Panel,
  ReadOnlyNotice,
  SavedNotice,
  StrategyBadge,
  Table,
  type SavedAnswer,
} from "../components/common";
import { TelemetryHint } from "../components/StrategyPicker";
import { FLEET_POLL_MS } from "./Fleet";

function PriceRange(props: { rule: RuleView; field: "input_per_mtok" | "output_per_mtok" }) {
  const range = priceRange(props.rule.targets, props.field);
  if (!range) return <span className="faint">not priced</span>;
  const [low, high] = range;
  return <>{low === high ? formatPrice(low) : `${formatPrice(low)}–${formatPrice(high)}`}</>;
}

/// The traffic split of a rule: shares where the strategy reads weights,
/// else that the weights are ignored.
export function SplitCell(props: { rule: RuleView }) {
  const { rule } = props;
  if (!rule.sharesStated) {
    return (
      <span className="muted small" data-testid="weights-ignored">
        Weights ignored ({rule.strategy})
      </span>
    );
  }
  return (
    <span className="small" data-testid="traffic-share">
      {rule.targets.map((t, i) => (
        <div key={i}>
          {t.providerName} <strong>{formatPercent(t.share)}</strong>
        </div>
      ))}
    </span>
  );
}

function TargetsCell(props: { targets: TargetLine[] }) {
  return (
    <>
      {props.targets.map((t, i) => (
        <div key={i}>
          {t.providerSlug ? <Link to={href.provider(t.providerSlug)}>{t.providerName}</Link> : t.providerName}{" "}
          <span className="muted">→</span>{" "}
          <span className="mono">{t.upstreamModel ?? <em className="faint">requested model</em>}</span>
        </div>
      ))}
    </>
  );
}

export function ModelCatalog() {
  const config = useConfig();
  const data = config.data;
  const providers = data?.providers.data ?? [];
  const catalog = data?.catalog.data ?? [];
  return (
    <>
      <PageHead title="Model catalog">
        The models clients can call, where each goes and what it costs. Prices come from the catalog (per million
        tokens, by upstream model); a traffic split is stated only where the strategy reads target weights.
      </PageHead>
      <LoadState loaded={config} what="the catalog">
        {(data) => (
          <>
            <Panel title="Public models" aside={`${data.routes.data.length} routes`} testId="catalog-models">
              {data.routes.data.length === 0 ? (
                <Empty>No routes yet.</Empty>
              ) : (
                <Table
                  columns={[
                    { label: "Model" },
                    { label: "Strategy" },
                    { label: "Served by" },
                    { label: "Traffic split" },
                    { label: "Input / Mtok", num: true },
                    { label: "Output / Mtok", num: true },
                  ]}
                >
                  {data.routes.data.map((route) => {
                    const rule = routeView(route, providers, catalog);
                    return (
                      <tr key={rule.key} data-testid={`catalog-row-${rule.key}`}>
                        <td>
                          <Link to={href.model(rule.key)}>{rule.key}</Link>{" "}
                          {data.routes.file_managed.includes(rule.key) && <FileManagedBadge />}
                        </td>
                        <RuleCells rule={rule} />
                        <td className="num">
                          <PriceRange rule={rule} field="input_per_mtok" />
                        </td>
                        <td className="num">
                          <PriceRange rule={rule} field="output_per_mtok" />
                        </td>
                      </tr>
                    );
                  })}
                </Table>
              )}
            </Panel>
            {data.groups.data.length > 0 && (
              <Panel title="Provider-group addresses" aside="callers send group-slug/model">
                <Table
                  columns={[
                    { label: "Address" },
                    { label: "Strategy" },
                    { label: "Members" },
                    { label: "Traffic split" },
                  ]}
                >
                  {data.groups.data.map((group) => {
                    const rule = groupView(group, providers, catalog);
                    return (
                      <tr key={rule.key}>
                        <td className="mono">
                          {rule.key}/&lt;model&gt;{" "}
                          {data.groups.file_managed.includes(rule.key) && <FileManagedBadge />}
                        </td>
                        <RuleCells rule={rule} />
                      </tr>
                    );
                  })}
                </Table>
              </Panel>
            )}
            <PriceList catalog={catalog} fileManaged={data.catalog.file_managed} routesUsing={(model) =>
              data.routes.data
                .filter((r) => (r.targets ?? []).some((t) => (t.model ?? r.model) === model))
                .map((r) => r.model ?? "")
            } onChange={config.reload} />
          </>
        )}
      </LoadState>
    </>
  );
}

/// A route's or group's strategy, targets and traffic split, as cells.
function RuleCells(props: { rule: RuleView }) {
  return (
    <>
      <td>
        <StrategyBadge strategy={props.rule.strategy} />
      </td>
      <td>
        <TargetsCell targets={props.rule.targets} />
      </td>
      <td>
        <SplitCell rule={props.rule} />
      </td>
    </>
  );
}

function PriceList(props: {
  catalog: CatalogRow[];
  fileManaged: string[];
  routesUsing: (model: string) => string[];
  onChange: () => void;
}) {
  const { canEdit } = useApp();
  const [editing, setEditing] = useState<string | null>(null);
  const [saved, setSaved] = useState<SavedAnswer | null>(null);
  const done = (answer: SavedAnswer | null) => {
    setEditing(null);
    setSaved(answer);
    if (answer) props.onChange();
  };
  return (
    <Panel title="Prices" aside="currency units per million tokens, by upstream model" testId="price-list">
      <ReadOnlyNotice />
      {editing === null && <SavedNotice saved={saved} />}
      <Table
        columns={[
          { label: "Upstream model" },
          { label: "Input", num: true },
          { label: "Output", num: true },
          { label: "Used by" },
          {},
        ]}
      >
        {props.catalog.map((entry) => {
          const model = entry.model ?? "";
          const fileManaged = props.fileManaged.includes(model);
          if (editing === model) {
            return (
              <PriceForm
                key={model}
                entry={entry}
                onDone={done}
              />
            );
          }
          const users = props.routesUsing(model);
          return (
            <tr key={model}>
              <td className="mono">
                {model} {fileManaged && <FileManagedBadge />}
              </td>
              <td className="num">{formatPrice(entry.input_per_mtok)}</td>
              <td className="num">{formatPrice(entry.output_per_mtok)}</td>
              <td className="small">
                {users.length === 0 ? <span className="faint">no route</span> : users.join(", ")}
              </td>
              <td className="num">
                {canEdit && !fileManaged && (
                  <button type="button" onClick={() => setEditing(model)}>
                    Edit
                  </button>
                )}
              </td>
            </tr>
          );
        })}
        {props.catalog.length === 0 && (
          <tr>
            <td colSpan={5} className="muted">
              No prices: every model is cost-neutral for adaptive routing.
            </td>
          </tr>
        )}
        {canEdit &&
          (editing === "" ? (
            <PriceForm
              entry={null}
              onDone={done}
            />
          ) : (
            <tr>
              <td colSpan={5}>
                <button type="button" onClick={() => setEditing("")}>
                  Add a price
                </button>
              </td>
            </tr>
          ))}
      </Table>
    </Panel>
  );
}

/// A price's form; `onDone` gets what the node answered to a write, `null`
/// when nothing was written.
function PriceForm(props: { entry: CatalogRow | null; onDone: (answer: SavedAnswer | null) => void }) {
  const { api } = useApp();
  const [model, setModel] = useState(fieldText(props.entry?.model));
  const [input, setInput] = useState(fieldText(props.entry?.input_per_mtok));
  const [output, setOutput] = useState(fieldText(props.entry?.output_per_mtok));
  const [error, setError] = useState<ApiError | string | null>(null);
  const [busy, setBusy] = useState(false);
  const creating = props.entry === null;

  const save = async (e: FormEvent) => {
    e.preventDefault();
    const { row, errors } = applyEdits<CatalogRow>(props.entry ?? {}, [
      { key: "model", kind: "text", text: model },
      { key: "input_per_mtok", kind: "float", text: input },
      { key: "output_per_mtok", kind: "float", text: output },
    ]);
    const problems = Object.entries(errors).map(([field, message]) => `${field}: ${message}`);
    if (problems.length) return setError(problems.join("; "));
    setBusy(true);
    try {
      const answer = (creating
        ? await api.create("catalog", row)
        : await api.replace("catalog", props.entry?.model ?? "", row)) as SavedAnswer;
      props.onDone({ ...answer, created: creating });
    } catch (err) {
      setError(err as ApiError);
      setBusy(false);
    }
  };
  const remove = async () => {
    if (!props.entry?.model || !window.confirm(`Delete the price of ${props.entry.model}?`)) return;
    setBusy(true);
    try {
      const answer = (await api.remove("catalog", props.entry.model)) as SavedAnswer | undefined;
      props.onDone({ version: answer?.version, warnings: answer?.warnings, deleted: true });
    } catch (err) {
      setError(err as ApiError);
      setBusy(false);
    }
  };
  return (
    <tr>
      <td colSpan={5}>
        <form onSubmit={save} className="actions">
          <input
            aria-label="Upstream model"
            placeholder="upstream model, e.g. Qwen/Qwen3-8B"
            value={model}
            disabled={!creating}
            onChange={(e) => setModel(e.target.value)}
          />
          <input aria-label="Input price" placeholder="input / Mtok" value={input} onChange={(e) => setInput(e.target.value)} />
          <input aria-label="Output price" placeholder="output / Mtok" value={output} onChange={(e) => setOutput(e.target.value)} />
          <button className="primary" type="submit" disabled={busy}>
            Save
          </button>
          <button type="button" onClick={() => props.onDone(null)}>
            Cancel
          </button>
          {!creating && (
            <button type="button" className="danger" onClick={remove} disabled={busy}>
              Delete
            </button>
          )}
        </form>
        <div style={{ marginTop: 8 }}>
          <ErrorBox error={error} />
        </div>
      </td>
    </tr>
  );
}

export function ModelSheet(props: { model: string }) {
  const { canEdit } = useApp();
  const config = useConfig();
  const live = useLiveState(FLEET_POLL_MS);
  const data = config.data;
  const route = data?.routes.data.find((r) => r.model === props.model);
  const liveRoute = live.state?.routes.find((r) => r.model === props.model);
  const observed = liveRoute ? observedShares(liveRoute) : [];
  const fileManaged = data?.routes.file_managed.includes(props.model) ?? false;
  if (config.error) return <ErrorBox error={config.error} title="Could not read the configuration" />;
  if (!data) return <Loading what="the model" />;
  if (!route) {
    return (
      <PageHead title={props.model}>
        No route serves <code>{props.model}</code> on this node. <Link to={href.models()}>Back to the catalog</Link>.
      </PageHead>
    );
  }
  const rule = routeView(route, data.providers.data, data.catalog.data);
  return (
    <>
      <PageHead
        title={
          <>
            {rule.key} <StrategyBadge strategy={rule.strategy} /> {fileManaged && <FileManagedBadge />}
          </>
        }
        actions={
          <Link className="button" to={href.editRoute(rule.key)}>
            {canEdit && !fileManaged ? "Edit routing rule" : "View routing rule"}
          </Link>
        }
      >
        {describeStrategy(rule.strategy)}
      </PageHead>
      <Panel title="Targets" aside={`${rule.targets.length} target${rule.targets.length === 1 ? "" : "s"}`} testId="model-targets">
        {!rule.sharesStated && (
          <p className="muted" data-testid="weights-ignored">
            {weightsIgnoredNote(rule.strategy)}
          </p>
        )}
        <Table
          columns={[
            { label: "Provider" },
            { label: "Upstream model" },
            { label: "Weight", num: true },
            rule.sharesStated && { label: "Traffic share", num: true },
            { label: "Input / Mtok", num: true },
            { label: "Output / Mtok", num: true },
            rule.sharesStated && { label: "Observed share", num: true },
            { label: "Engine health" },
            { label: "In flight", num: true },
            { label: "Engine latency", num: true },
            { label: "Route picks", num: true },
          ]}
        >
          {rule.targets.map((t, i) => {
            const at = liveRoute?.targets.findIndex((l) => l.provider === t.providerSlug && l.model === t.upstreamModel) ?? -1;
            const load = at >= 0 ? liveRoute?.targets[at] : undefined;
            return (
              <tr key={i}>
                <td>
                  {t.providerSlug ? <Link to={href.provider(t.providerSlug)}>{t.providerName}</Link> : t.providerName}
                </td>
                <td className="mono">{t.upstreamModel}</td>
                <td className={`num ${rule.sharesStated ? "" : "faint"}`}>{t.weight}</td>
                {rule.sharesStated && (
                  <td className="num" data-testid="traffic-share">
                    {formatPercent(t.share, 1)}
                  </td>
                )}
                <td className="num">{t.price ? formatPrice(t.price.input_per_mtok) : <span className="faint">—</span>}</td>
                <td className="num">{t.price ? formatPrice(t.price.output_per_mtok) : <span className="faint">—</span>}</td>
                {rule.sharesStated && (
                  <td className="num" data-testid="observed-share">
                    {at >= 0 ? formatPercent(observed[at]) : "—"}
                  </td>
                )}
                <td>{load ? load.healthy ? <Badge tone="ok">healthy</Badge> : <Badge tone="bad">down</Badge> : "—"}</td>
                <td className="num">{load ? formatNumber(load.in_flight) : "—"}</td>
                <td className="num">{load ? formatMs(load.latency_ewma_ms) : "—"}</td>
                <td className="num" data-testid="model-route-picks">
                  {load?.route_traffic ? formatNumber(load.route_traffic.attempts) : "—"}
                </td>
              </tr>
            );
          })}
        </Table>
        {live.gateways && (
          <p className="muted small" data-testid="model-live-source">
            Live figures: summed over {live.gateways.filter((g) => !g.stale).length} reporting gateway
            {live.gateways.filter((g) => !g.stale).length === 1 ? "" : "s"} (this control node serves no traffic).
          </p>
        )}
        <TelemetryHint
          strategy={rule.strategy}
          noun="route"
          targetProviders={rule.targets.map((t) => t.providerRef)}
          providers={data.providers.data}
        />
      </Panel>
    </>
  );
}
