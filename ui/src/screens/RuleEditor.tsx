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
  const held = original?.strategy;
  const [strategy, setStrategy] = useState(pickerValue(held));
  const [touched, setTouched] = useState(false);
  const initialEntries = (kind === "route" ? route?.targets : group?.members) ?? [];
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
  ]);
  const [savedText, setSavedText] = useState(formText);
  const dirty = !readOnly && formText !== savedText;
  // The node's problems by the field they name, shown beside it.
  const problems = rowProblems(error, kind === "route" ? "routes" : "provider_groups");
  const entryKey = kind === "route" ? "targets" : "members";
  const lineProblems = (i: number) =>
    Object.entries(problems)
      .filter(([field]) => field.startsWith(`${entryKey}[${i}]`))
      .map(([field, message]) => `${field.slice(`${entryKey}[${i}]`.length).replace(/^\./, "") || "line"}: ${message}`);
  useLeaveGuard(dirty && !busy);
  // "Saved" is about the form as saved: the next edit clears it.
  const saved = busy || error || dirty ? null : props.saved;

  const effective = effectiveStrategy(strategy);
  const guardDefault = GUARD_DEFAULTS[effective];
  const shares = trafficShares(effective, drafts.map((d) => ({ weight: /^\d+$/.test(d.weight) ? Number(d.weight) : null })));

  const update = (id: number, patch: Partial<EntryDraft>) =>
    setDrafts((all) => all.map((d) => (d.id === id ? { ...d, ...patch } : d)));

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
    if (problems.length) return setError(problems.join("; "));
    const chosen = strategyToSave(held, strategy, touched);
    if (chosen === undefined) delete row.strategy;
    else row.strategy = chosen;
    row[kind === "route" ? "targets" : "members"] = entries;

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
            <label htmlFor="rule-strategy">Strategy</label>
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
          <h3 style={{ marginTop: 20 }}>{kind === "route" ? "Targets" : "Members"}</h3>
          {!usesWeights(effective) && (
            <p className="muted small" data-testid="weights-ignored">
              Weights are ignored by {effective}: a weight set here is stored and never consulted.
            </p>
          )}
          <Table className="entries"
            columns={[
              { label: "Provider", width: "32%" },
              { label: kind === "route" ? "Upstream model" : "Model (optional)" },
              { label: "Weight", width: 110 },
              shares && { label: "Share", num: true },
              { width: 90 },
            ]}
          >
            {drafts.map((draft, i) => (
              <Fragment key={draft.id}>
                <tr data-testid="entry-row">
                  <td>
                    <ProviderSelect
                      value={draft.provider}
                      providers={props.providers}
                      onChange={(provider) => update(draft.id, { provider })}
                      label={`Provider of line ${i + 1}`}
                    />
                  </td>
                  <td>
                    <input
                      aria-label={`Model of line ${i + 1}`}
                      value={draft.model}
                      onChange={(e) => update(draft.id, { model: e.target.value })}
                      placeholder={kind === "route" ? `same as the public model${model ? ` (${model})` : ""}` : "passthrough: the requested model"}
                    />
                  </td>
                  <td>
                    <input
                      aria-label={`Weight of line ${i + 1}`}
                      inputMode="numeric"
                      value={draft.weight}
                      placeholder="1"
                      onChange={(e) => update(draft.id, { weight: e.target.value })}
                    />
                  </td>
                  {shares && <td className="num">{formatPercent(shares[i], 1)}</td>}
                  <td className="num">
                    {!readOnly && (
                      <button type="button" className="link" onClick={() => setDrafts((all) => all.filter((d) => d.id !== draft.id))}>
                        Remove
                      </button>
                    )}
                  </td>
                </tr>
                {lineProblems(i).length > 0 && (
                  <tr data-testid="entry-problem">
                    <td colSpan={5} className="field-error">
                      Line {i + 1}: {lineProblems(i).join("; ")}
                    </td>
                  </tr>
                )}
              </Fragment>
            ))}
          </Table>
          {!readOnly && (
            <button type="button" style={{ marginTop: 8 }} onClick={() => setDrafts((all) => [...all, newDraft(props.providers[0]?.slug ?? "")])}>
              Add {kind === "route" ? "target" : "member"}
            </button>
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
