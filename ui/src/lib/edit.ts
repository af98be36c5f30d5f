// Editing rows without rewriting what the operator did not touch.
//
// A form holds each field as text. Saving starts from the row as the node
// sent it and changes only the fields whose text differs from what the row
// held: an untouched field keeps its value, and a field the row left unset
// stays unset (so a default stays a default, not a value written out).

import { ApiError, type TargetEntry } from "./api";

export type FieldKind = "text" | "int" | "float" | "bool";

/// The form text of a stored value ("" for unset).
export function fieldText(value: unknown): string {
  if (value === undefined || value === null) return "";
  return String(value);
}

export type Parsed = { ok: true; value: unknown } | { ok: false; error: string };

/// The value of a field's text; "" is unset.
export function parseField(kind: FieldKind, text: string): Parsed {
  const trimmed = text.trim();
  if (trimmed === "") return { ok: true, value: undefined };
  switch (kind) {
    case "text":
      return { ok: true, value: text };
    case "bool":
      if (trimmed === "true" || trimmed === "false") return { ok: true, value: trimmed === "true" };
      return { ok: false, error: "must be true or false" };
    case "int":
      if (/^\d+$/.test(trimmed) && Number.isSafeInteger(Number(trimmed))) {
        return { ok: true, value: Number(trimmed) };
      }
      return { ok: false, error: "must be a whole number" };
    case "float": {
      const value = Number(trimmed);
      if (trimmed !== "" && Number.isFinite(value)) return { ok: true, value };
      return { ok: false, error: "must be a number" };
    }
  }
}

export interface FieldEdit {
  key: string;
  kind: FieldKind;
  text: string;
}

/// `original` with every edited field applied; `errors` names the fields
/// whose text does not parse. A field whose text equals the original's is
/// left exactly as it was.
export function applyEdits<T extends object>(
  original: T,
  edits: readonly FieldEdit[],
): { row: T; errors: Record<string, string> } {
  const row: Record<string, unknown> = structuredClone(original) as Record<string, unknown>;
  const errors: Record<string, string> = {};
  for (const edit of edits) {
    if (edit.text === fieldText(row[edit.key])) continue;
    const parsed = parseField(edit.kind, edit.text);
    if (!parsed.ok) {
      errors[edit.key] = parsed.error;
      continue;
    }
    if (parsed.value === undefined) delete row[edit.key];
    else row[edit.key] = parsed.value;
  }
  return { row: row as T, errors };
}

/// A target or member line of an editor, with the entry it came from.
/// `id` names the line for as long as the editor is open (its React key):
/// removing a line above must not hand its neighbour's inputs to another.
export interface EntryDraft {
  id: number;
  original: TargetEntry | null;
  provider: string;
  model: string;
  weight: string;
}

let lastDraftId = 0;

export function draftOf(entry: TargetEntry): EntryDraft {
  return {
    id: ++lastDraftId,
    original: entry,
    provider: fieldText(entry.provider),
    model: fieldText(entry.model),
    weight: fieldText(entry.weight),
  };
}

export function newDraft(provider = ""): EntryDraft {
  return { id: ++lastDraftId, original: null, provider, model: "", weight: "" };
}

export function entriesOf(drafts: readonly EntryDraft[]): {
  entries: TargetEntry[];
  errors: string[];
} {
  const errors: string[] = [];
  const entries = drafts.map((draft, i) => {
    const { row, errors: fieldErrors } = applyEdits(draft.original ?? {}, [
      { key: "provider", kind: "text", text: draft.provider },
      { key: "model", kind: "text", text: draft.model },
      { key: "weight", kind: "int", text: draft.weight },
    ]);
    for (const [field, message] of Object.entries(fieldErrors)) {
      errors.push(`line ${i + 1}, ${field}: ${message}`);
    }
    if (!row.provider) errors.push(`line ${i + 1}, provider: choose a provider`);
    return row;
  });
  return { entries, errors };
}

/// A node's field-level problems with one row, by the path inside the row
/// (`base_url`, `targets[1].provider`, `kv_events.endpoint`): the node names
/// the row by its key (`providers["gpu-a"].base_url`), the form by its own
/// fields, to show each message beside the field it is about.
export function rowProblems(error: unknown, table: "providers" | "routes" | "provider_groups"): Record<string, string> {
  const found: Record<string, string> = {};
  if (!(error instanceof ApiError)) return found;
  const prefix = new RegExp(`^${table}\\[[^\\]]*\\]\\.(.+)$`);
  for (const problem of error.problems) {
    const field = problem.field?.match(prefix)?.[1];
    if (field) found[field] = found[field] ? `${found[field]}; ${problem.message}` : problem.message;
  }
  return found;
}
