// The route and provider-group editors. Both start from the row as the node
// sent it and change only what the operator touched (lib/edit.ts); the
// strategy picker follows lib/picker.ts.

import { Fragment, useState, type FormEvent } from "react";
import { ApiError, type GroupRow, type ProviderRow, type RouteRow } from "../lib/api";
import { applyEdits, draftOf, entriesOf, fieldText, newDraft, rowProblems, type EntryDraft } from "../lib/edit";
import { useApp, useConfig, useLeaveGuard } from "../lib/hooks";
import { formatPercent } from "../lib/format";
import { effectiveStrategy, pickerValue, strategyToSave } from "../lib/picker";
import { trafficShares, usesWeights } from "../lib/strategies";
import { href, navigate } from "../lib/router";
import {
  ErrorBox,
  FileManagedBadge,
  Link,
  Loading,
  PageHead,
  ReadOnlyNotice,
  SavedNotice,
  Table,
  type SavedAnswer,
} from "../components/common";
import { StrategyPicker } from "../components/StrategyPicker";
import { FIELD_HELP } from "../lib/api.gen";

/// The Rust field docs of `tokenizer`, `tokenizer_budget_kib` and `endpoints`.
const TOKENIZER_HELP = FIELD_HELP.RouteTable;
/// The Rust field docs of `cache_guard`.
const GUARD_HELP = FIELD_HELP.CacheGuardTable;
/// `disaggregation.decode_strategy` when it is left out (the gateway's
/// `DEFAULT_DECODE_STRATEGY`).
const DECODE_DEFAULT_STRATEGY = "power_of_two";
/// `disaggregation.prefill_strategy` when it is left out.
const PREFILL_DEFAULT_STRATEGY = "cache_aware";
/// The Rust field docs of `disaggregation`.
const SPLIT_HELP = FIELD_HELP.DisaggregationTable;

/** The strategies that read `cache_guard`, and their defaults (the balancer's
 * `CacheGuard::default()` and `CacheGuard::PRECISE`). */
const GUARD_DEFAULTS: Record<string, { min_load: string; load_ratio: string }> = {
  cache_aware: { min_load: "2", load_ratio: "1.5" },
  precise_cache_aware: { min_load: "4", load_ratio: "2.0" },
};

type Kind = "route" | "group";

type Saved = SavedAnswer;

export function RouteEditor(props: { model: string | null }) {
  return <RuleEditor kind="route" ruleKey={props.model} />;
}

export function GroupEditor(props: { slug: string | null }) {
  return <RuleEditor kind="group" ruleKey={props.slug} />;
}

/// The answer of a create, shown by the editor the page moves to.
let flash: Saved | null = null;

function RuleEditor(props: { kind: Kind; ruleKey: string | null }) {
  const config = useConfig();
  const [saved, setSaved] = useState<Saved | null>(() => {
    const shown = flash;
    flash = null;
    return shown;
  });
  const data = config.data;
  if (config.error) return <ErrorBox error={config.error} title="Could not read the configuration" />;
  if (!data) return <Loading what="the rule" />;
  const listing = props.kind === "route" ? data.routes : data.groups;
  const key = props.ruleKey;
  const original =
    key === null
      ? null
      : (props.kind === "route"
          ? data.routes.data.find((r) => r.model === key)
          : data.groups.data.find((g) => g.slug === key)) ?? undefined;
  if (original === undefined) {
    return (
      <PageHead title={key}>
        No {props.kind === "route" ? "route" : "provider group"} <code>{key}</code> on this node.{" "}
        <Link to={href.routes()}>Back to the routing rules</Link>.
      </PageHead>
    );
  }
  return (
    <EditorForm
      key={JSON.stringify(original)}
      kind={props.kind}
      original={original}
      fileManaged={key !== null && listing.file_managed.includes(key)}
      providers={data.providers.data}
      saved={saved}
      onSaved={(answer, movedTo) => {
        if (movedTo) {
          flash = { ...answer, created: true };
          navigate(movedTo, true, true);
        } else {
          setSaved(answer);
          config.reload();
        }
      }}
    />
  );
}

function EditorForm(props: {
  kind: Kind;
  original: RouteRow | GroupRow | null;
  fileManaged: boolean;
  providers: ProviderRow[];
  saved: Saved | null;
  /// After a write: its answer, and the editor to move to after a create.
  onSaved: (answer: Saved, movedTo: string | null) => void;
}) {
  const { api, canEdit } = useApp();
  const { kind, original } = props;
  const route = kind === "route" ? (original as RouteRow | null) : null;
  const group = kind === "group" ? (original as GroupRow | null) : null;
  const creating = original === null;
  const readOnly = !canEdit || props.fileManaged;
  const noun = kind === "route" ? "route" : "provider group";
  const ruleKey = kind === "route" ? route?.model ?? "" : group?.slug ?? "";

  const [model, setModel] = useState(fieldText(route?.model));
  const [name, setName] = useState(fieldText(group?.name));
  const [slug, setSlug] = useState(fieldText(group?.slug));
  const [tokenizer, setTokenizer] = useState(fieldText(original?.tokenizer));
  const [budget, setBudget] = useState(fieldText(original?.tokenizer_budget_kib));
  const [guardMin, setGuardMin] = useState(fieldText(original?.cache_guard?.min_load));
  const [guardRatio, setGuardRatio] = useState(fieldText(original?.cache_guard?.load_ratio));
  const [endpoints, setEndpoints] = useState((original?.endpoints ?? []).join(", "));
  // A route with `disaggregation`: its own targets and strategy are the
  // decode pool's, the prefill pool is edited below them.
  const heldSplit = route?.disaggregation ?? null;
  const [split, setSplit] = useState(heldSplit !== null);
  const [protocol, setProtocol] = useState(heldSplit?.protocol ?? "vllm");
  const [prefillStrategy, setPrefillStrategy] = useState(fieldText(heldSplit?.prefill_strategy));
  const [minPrefill, setMinPrefill] = useState(fieldText(heldSplit?.min_prefill_tokens));
  const [prefillDrafts, setPrefillDrafts] = useState<EntryDraft[]>(() =>
    heldSplit?.prefill?.length ? heldSplit.prefill.map(draftOf) : [newDraft(props.providers[0]?.slug ?? "")],
  );
  const held = heldSplit ? heldSplit.decode_strategy : original?.strategy;
  const [strategy, setStrategy] = useState(pickerValue(held));
  const [touched, setTouched] = useState(false);
  const initialEntries = (kind === "route" ? heldSplit?.decode ?? route?.targets : group?.members) ?? [];
  const [drafts, setDrafts] = useState<EntryDraft[]>(() =>
    initialEntries.length ? initialEntries.map(draftOf) : [newDraft(props.providers[0]?.slug ?? "")],
  );
  const [error, setError] = useState<ApiError | string | null>(null);
  const [busy, setBusy] = useState(false);
  // What the form holds, to tell an edit since the last save.
  const formText = JSON.stringify([
    model,
    name,
    slug,
    tokenizer,
    budget,
    guardMin,
    guardRatio,
    endpoints,
    strategy,
    drafts.map((d) => [d.provider, d.model, d.weight]),
    split,
    protocol,
    prefillStrategy,
    minPrefill,
    prefillDrafts.map((d) => [d.provider, d.model, d.weight]),
  ]);
  const [savedText, setSavedText] = useState(formText);
  const dirty = !readOnly && formText !== savedText;
  // The node's problems by the field they name, shown beside it.
  const problems = rowProblems(error, kind === "route" ? "routes" : "provider_groups");
  const entryKey = kind === "route" ? (split ? "disaggregation.decode" : "targets") : "members";
  const linesProblems = (key: string) => (i: number) =>
    Object.entries(problems)
      .filter(([field]) => field.startsWith(`${key}[${i}]`))
      .map(([field, message]) => `${field.slice(`${key}[${i}]`.length).replace(/^\./, "") || "line"}: ${message}`);
  useLeaveGuard(dirty && !busy);
  // "Saved" is about the form as saved: the next edit clears it.
  const saved = busy || error || dirty ? null : props.saved;

  // A split route's decode pool runs power_of_two when it names none.
  const fallback = kind === "route" && split ? DECODE_DEFAULT_STRATEGY : undefined;
  const effective = effectiveStrategy(strategy, fallback);
  // A split route's guard serves its prefill pool when that pool runs a
  // cache strategy (cache_aware by default), as the gateway reads it.
  const prefillEffective = prefillStrategy.trim() || PREFILL_DEFAULT_STRATEGY;
  const guardDefault =
    GUARD_DEFAULTS[kind === "route" && split && GUARD_DEFAULTS[prefillEffective] ? prefillEffective : effective];
  const shares = trafficShares(effective, drafts.map((d) => ({ weight: /^\d+$/.test(d.weight) ? Number(d.weight) : null })));

  const save = async (e: FormEvent) => {
    e.preventDefault();
    setError(null);
    const { entries, errors: entryErrors } = entriesOf(drafts);
    const keyEdits =
      kind === "route"
        ? [{ key: "model", kind: "text" as const, text: model }]
        : [
            { key: "name", kind: "text" as const, text: name },
            { key: "slug", kind: "text" as const, text: slug },
          ];
    const tokenizerEdits = [
      { key: "tokenizer", kind: "text" as const, text: tokenizer },
      { key: "tokenizer_budget_kib", kind: "int" as const, text: budget },
    ];
    const { row, errors } = applyEdits<Record<string, unknown>>(
      (original ?? {}) as Record<string, unknown>,
      [...keyEdits, ...tokenizerEdits],
    );
    const guard = applyEdits<Record<string, unknown>>((original?.cache_guard ?? {}) as Record<string, unknown>, [
      { key: "min_load", kind: "int", text: guardMin },
      { key: "load_ratio", kind: "float", text: guardRatio },
    ]);
    if (Object.keys(guard.row).length > 0) row.cache_guard = guard.row;
    else delete row.cache_guard;
    // A comma-separated list; empty opens every endpoint (the node checks
    // the names and says which one it does not know).
    const endpointNames = endpoints
      .split(",")
      .map((name) => name.trim())
      .filter((name) => name.length > 0);
    if (endpointNames.length > 0) row.endpoints = endpointNames;
    else delete row.endpoints;
    const problems = [
      ...Object.entries(errors).map(([f, m]) => `${f}: ${m}`),
      ...Object.entries(guard.errors).map(([f, m]) => `cache_guard.${f}: ${m}`),
      ...entryErrors,
    ];
    if (entries.length === 0) problems.push(`a ${noun} needs at least one ${kind === "route" ? "target" : "member"}`);
    const chosen = strategyToSave(held, strategy, touched);
    if (kind === "route" && split) {
      const prefill = entriesOf(prefillDrafts);
      problems.push(...prefill.errors.map((e) => `prefill ${e}`));
      if (prefill.entries.length === 0) problems.push("a split route needs at least one prefill target");
      const pools = applyEdits<Record<string, unknown>>((heldSplit ?? {}) as Record<string, unknown>, [
        { key: "protocol", kind: "text", text: protocol },
        { key: "prefill_strategy", kind: "text", text: prefillStrategy },
        { key: "min_prefill_tokens", kind: "int", text: minPrefill },
      ]);
      problems.push(...Object.entries(pools.errors).map(([f, m]) => `disaggregation.${f}: ${m}`));
      pools.row.prefill = prefill.entries;
      pools.row.decode = entries;
      if (chosen === undefined) delete pools.row.decode_strategy;
      else pools.row.decode_strategy = chosen;
      row.disaggregation = pools.row;
      delete row.targets;
      delete row.strategy;
    } else {
      delete row.disaggregation;
      if (chosen === undefined) delete row.strategy;
      else row.strategy = chosen;
      row[kind === "route" ? "targets" : "members"] = entries;
    }
    if (problems.length) return setError(problems.join("; "));

    const collection = kind === "route" ? "routes" : "provider-groups";
    setBusy(true);
    try {
      const answer = (creating
        ? await api.create(collection, row)
        : await api.replace(collection, ruleKey, row)) as Saved & { data: RouteRow & GroupRow };
      setBusy(false);
      setSavedText(formText);
      const key = (kind === "route" ? answer.data.model : answer.data.slug) ?? "";
      props.onSaved(answer, creating ? (kind === "route" ? href.editRoute(key) : href.editGroup(key)) : null);
    } catch (err) {
      setError(err as ApiError);
      setBusy(false);
    }
  };

  const remove = async () => {
    if (!window.confirm(`Delete the ${noun} ${ruleKey}? Clients calling it will get 404.`)) return;
    setBusy(true);
    try {
      await api.remove(kind === "route" ? "routes" : "provider-groups", ruleKey);
      navigate(href.routes(), false, true);
    } catch (err) {
      setError(err as ApiError);
      setBusy(false);
    }
  };

  const title = creating ? `New ${noun}` : kind === "route" ? ruleKey : `${ruleKey}/<model>`;
  return (
    <>
      <PageHead
        title={
          <>
            {title} {props.fileManaged && <FileManagedBadge />}
          </>
        }
        actions={
          <>
            {kind === "route" && !creating && (
              <Link className="button" to={href.model(ruleKey)}>
                Model sheet
              </Link>
            )}
            <Link className="button" to={href.routes()}>
              All rules
            </Link>
          </>
        }
      >
        {kind === "route"
          ? "A public model clients call, the targets it goes to and how they are chosen."
          : "Callers address the group as group-slug/model; members without a model forward the requested one."}
      </PageHead>
      <ReadOnlyNotice />
      {props.fileManaged && canEdit && (
        <div className="notice info" data-testid="file-managed-notice">
          <strong>This {noun} is defined in rolter.toml</strong>
          <p>It is read-only here: change it in the control node's rolter.toml and reload.</p>
        </div>
      )}
      <form className="panel" onSubmit={save} data-testid="rule-editor">
        <fieldset disabled={readOnly} style={{ border: "none", padding: 0, margin: 0 }}>
          <div className="form-grid">
            {kind === "route" ? (
              <>
                <label htmlFor="rule-model">Public model</label>
                <div>
                  <input
                    id="rule-model"
                    value={model}
                    disabled={!creating}
                    onChange={(e) => setModel(e.target.value)}
                    placeholder="e.g. chat or org/model"
                  />
                  <div className="help">What clients send as "model". It cannot be renamed: create a new route instead.</div>
                </div>
              </>
            ) : (
              <>
                <label htmlFor="rule-name">Name</label>
                <input id="rule-name" value={name} onChange={(e) => setName(e.target.value)} />
                <label htmlFor="rule-slug">Slug</label>
                <div>
                  <input
                    id="rule-slug"
                    value={slug}
                    disabled={!creating}
                    onChange={(e) => setSlug(e.target.value)}
                    placeholder="derived from the name when empty"
                  />
                  <div className="help">Callers send slug/model. It cannot be changed later.</div>
                </div>
              </>
            )}
            <label htmlFor="rule-strategy">{split ? "Decode strategy" : "Strategy"}</label>
            <StrategyPicker
              id="rule-strategy"
              held={held}
              value={strategy}
              onChange={(value) => {
                setStrategy(value);
                setTouched(true);
              }}
              disabled={readOnly}
              noun={noun}
              fallback={fallback}
              targetProviders={drafts.map((d) => d.provider)}
              providers={props.providers}
            />
            <label htmlFor="rule-tokenizer">Tokenizer</label>
            <div>
              <input
                id="rule-tokenizer"
                value={tokenizer}
                onChange={(e) => setTokenizer(e.target.value)}
                placeholder="e.g. /models/Qwen3-8B (none when empty)"
              />
              <div className="help">{TOKENIZER_HELP.tokenizer}</div>
              {problems.tokenizer && <div className="field-error">{problems.tokenizer}</div>}
            </div>
            <label htmlFor="rule-tokenizer-budget">Tokenizer budget (KiB)</label>
            <div>
              <input
                id="rule-tokenizer-budget"
                value={budget}
                inputMode="numeric"
                onChange={(e) => setBudget(e.target.value)}
                placeholder="64"
              />
              <div className="help">{TOKENIZER_HELP.tokenizer_budget_kib}</div>
            </div>
            <label htmlFor="rule-endpoints">Endpoints</label>
            <div>
              <input
                id="rule-endpoints"
                value={endpoints}
                onChange={(e) => setEndpoints(e.target.value)}
                placeholder="every endpoint when empty, e.g. chat/completions, responses"
              />
              <div className="help">{TOKENIZER_HELP.endpoints}</div>
              {Object.entries(problems)
                .filter(([field]) => field.startsWith("endpoints"))
                .map(([field, message]) => (
                  <div key={field} className="field-error">
                    {field}: {message}
                  </div>
                ))}
            </div>
            {guardDefault && (
              <>
                <label htmlFor="rule-guard-min">Guard: waiting requests</label>
                <div>
                  <input
                    id="rule-guard-min"
                    value={guardMin}
                    inputMode="numeric"
                    onChange={(e) => setGuardMin(e.target.value)}
                    placeholder={guardDefault.min_load}
                  />
                  <div className="help">{GUARD_HELP.min_load}</div>
                </div>
                <label htmlFor="rule-guard-ratio">Guard: times the least loaded</label>
                <div>
                  <input
                    id="rule-guard-ratio"
                    value={guardRatio}
                    inputMode="decimal"
                    onChange={(e) => setGuardRatio(e.target.value)}
                    placeholder={guardDefault.load_ratio}
                  />
                  <div className="help">{GUARD_HELP.load_ratio}</div>
                </div>
              </>
            )}
          </div>
          <h3 style={{ marginTop: 20 }}>{kind === "route" ? (split ? "Decode targets" : "Targets") : "Members"}</h3>
          {!usesWeights(effective) && (
            <p className="muted small" data-testid="weights-ignored">
              Weights are ignored by {effective}: a weight set here is stored and never consulted.
            </p>
          )}
          <EntriesTable
            drafts={drafts}
            setDrafts={setDrafts}
            providers={props.providers}
            readOnly={readOnly}
            shares={shares}
            problems={linesProblems(entryKey)}
            modelLabel={kind === "route" ? "Upstream model" : "Model (optional)"}
            modelPlaceholder={
              kind === "route" ? `same as the public model${model ? ` (${model})` : ""}` : "passthrough: the requested model"
            }
            noun={kind === "route" ? "target" : "member"}
            prefix=""
          />
          {kind === "route" && (
            <section data-testid="disaggregation">
              <h3 style={{ marginTop: 20 }}>Prefill/decode disaggregation</h3>
              <label className="checkbox">
                <input
                  type="checkbox"
                  checked={split}
                  onChange={(e) => setSplit(e.target.checked)}
                  aria-label="Split prefill and decode"
                />{" "}
                Prefill each chat or completions request on one engine and decode it on another; the targets above are
                then the decode engines.
              </label>
              {split && (
                <>
                  <div className="form-grid" style={{ marginTop: 12 }}>
                    <label htmlFor="rule-pd-protocol">Protocol</label>
                    <div>
                      <select id="rule-pd-protocol" value={protocol} onChange={(e) => setProtocol(e.target.value)}>
                        <option value="vllm">vllm (kv_transfer_params, prefill then decode)</option>
                        <option value="sglang">sglang (bootstrap room, both at once)</option>
                      </select>
                      <div className="help">{SPLIT_HELP.protocol}</div>
                    </div>
                    <label htmlFor="rule-pd-strategy">Prefill strategy</label>
                    <div>
                      <input
                        id="rule-pd-strategy"
                        value={prefillStrategy}
                        onChange={(e) => setPrefillStrategy(e.target.value)}
                        placeholder={PREFILL_DEFAULT_STRATEGY}
                      />
                      <div className="help">{SPLIT_HELP.prefill_strategy}</div>
                    </div>
                    <label htmlFor="rule-pd-min">Min prefill tokens</label>
                    <div>
                      <input
                        id="rule-pd-min"
                        value={minPrefill}
                        inputMode="numeric"
                        onChange={(e) => setMinPrefill(e.target.value)}
                        placeholder="0"
                      />
                      <div className="help">{SPLIT_HELP.min_prefill_tokens}</div>
                    </div>
                  </div>
                  {Object.entries(problems)
                    .filter(([field]) => field.startsWith("disaggregation") && !/\.(prefill|decode)\[/.test(field))
                    .map(([field, message]) => (
                      <div key={field} className="field-error">
                        {field}: {message}
                      </div>
                    ))}
                  <h4>Prefill targets</h4>
                  <EntriesTable
                    drafts={prefillDrafts}
                    setDrafts={setPrefillDrafts}
                    providers={props.providers}
                    readOnly={readOnly}
                    shares={null}
                    problems={linesProblems("disaggregation.prefill")}
                    modelLabel="Upstream model"
                    modelPlaceholder={`same as the public model${model ? ` (${model})` : ""}`}
                    noun="prefill target"
                    prefix="Prefill "
                  />
                </>
              )}
            </section>
          )}
        </fieldset>
        <div style={{ marginTop: 16 }}>
          <ErrorBox error={error} />
          <SavedNotice saved={saved} />
          {dirty && (
            <p className="muted small" data-testid="unsaved">
              Unsaved changes.
            </p>
          )}
        </div>
        {!readOnly && (
          <div className="form-actions">
            <button className="primary" type="submit" disabled={busy}>
              {busy ? "Saving…" : creating ? `Create ${noun}` : "Save changes"}
            </button>
            <Link className="button" to={href.routes()}>
              Cancel
            </Link>
            {!creating && (
              <button type="button" className="danger" onClick={remove} disabled={busy} style={{ marginLeft: "auto" }}>
                Delete {noun}
              </button>
            )}
          </div>
        )}
      </form>
    </>
  );
}

/// One editable list of targets or members. `prefix` tells two lists of
/// one form apart in labels and test ids ("" for the first).
function EntriesTable(props: {
  drafts: EntryDraft[];
  setDrafts: (change: (all: EntryDraft[]) => EntryDraft[]) => void;
  providers: ProviderRow[];
  readOnly: boolean;
  shares: number[] | null;
  problems: (line: number) => string[];
  modelLabel: string;
  modelPlaceholder: string;
  noun: string;
  prefix: string;
}) {
  const { drafts, setDrafts, shares, prefix } = props;
  const label = (what: string, i: number) => (prefix ? `${prefix}${what.toLowerCase()}` : what) + ` of line ${i + 1}`;
  const testid = (name: string) => (prefix ? `${prefix.trim().toLowerCase()}-${name}` : name);
  const update = (id: number, patch: Partial<EntryDraft>) =>
    setDrafts((all) => all.map((d) => (d.id === id ? { ...d, ...patch } : d)));
  return (
    <>
      <Table
        className="entries"
        columns={[
          { label: "Provider", width: "32%" },
          { label: props.modelLabel },
          { label: "Weight", width: 110 },
          shares && { label: "Share", num: true },
          { width: 90 },
        ]}
      >
        {drafts.map((draft, i) => (
          <Fragment key={draft.id}>
            <tr data-testid={testid("entry-row")}>
              <td>
                <ProviderSelect
                  value={draft.provider}
                  providers={props.providers}
                  onChange={(provider) => update(draft.id, { provider })}
                  label={label("Provider", i)}
                />
              </td>
              <td>
                <input
                  aria-label={label("Model", i)}
                  value={draft.model}
                  onChange={(e) => update(draft.id, { model: e.target.value })}
                  placeholder={props.modelPlaceholder}
                />
              </td>
              <td>
                <input
                  aria-label={label("Weight", i)}
                  inputMode="numeric"
                  value={draft.weight}
                  placeholder="1"
                  onChange={(e) => update(draft.id, { weight: e.target.value })}
                />
              </td>
              {shares && <td className="num">{formatPercent(shares[i], 1)}</td>}
              <td className="num">
                {!props.readOnly && (
                  <button type="button" className="link" onClick={() => setDrafts((all) => all.filter((d) => d.id !== draft.id))}>
                    Remove
                  </button>
                )}
              </td>
            </tr>
            {props.problems(i).length > 0 && (
              <tr data-testid={testid("entry-problem")}>
                <td colSpan={5} className="field-error">
                  Line {i + 1}: {props.problems(i).join("; ")}
                </td>
              </tr>
            )}
          </Fragment>
        ))}
      </Table>
      {!props.readOnly && (
        <button type="button" style={{ marginTop: 8 }} onClick={() => setDrafts((all) => [...all, newDraft(props.providers[0]?.slug ?? "")])}>
          Add {props.noun}
        </button>
      )}
    </>
  );
}

/// The providers to choose from; a reference the list does not know (a
/// provider named by name, or gone) stays shown as held.
function ProviderSelect(props: { value: string; providers: ProviderRow[]; onChange: (v: string) => void; label: string }) {
  const known = props.providers.some((p) => p.slug === props.value);
  return (
    <select aria-label={props.label} value={props.value} onChange={(e) => props.onChange(e.target.value)}>
      {!known && <option value={props.value}>{props.value || "choose a provider"}</option>}
      {props.providers.map((p) => (
        <option key={p.slug} value={p.slug ?? ""}>
          {p.name} ({p.slug})
        </option>
      ))}
    </select>
  );
}
