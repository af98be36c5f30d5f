// An audit record's change, field by field: the before and after rows
// flattened to dotted paths (`targets[1].weight`), and only the paths whose
// value differs.

export interface FieldChange {
  field: string;
  before: unknown;
  after: unknown;
}

function flatten(value: unknown, path: string, into: Map<string, unknown>) {
  if (Array.isArray(value)) {
    if (value.length === 0) into.set(path, []);
    value.forEach((item, i) => flatten(item, `${path}[${i}]`, into));
  } else if (value !== null && typeof value === "object") {
    const entries = Object.entries(value as Record<string, unknown>);
    if (entries.length === 0 && path) into.set(path, {});
    for (const [key, item] of entries) flatten(item, path ? `${path}.${key}` : key, into);
  } else if (path) {
    into.set(path, value);
  }
}

/// The fields `after` changed from `before` (either may be absent: a
/// create has no before, a delete no after), in the order they appear.
export function fieldChanges(before: unknown, after: unknown): FieldChange[] {
  const was = new Map<string, unknown>();
  const now = new Map<string, unknown>();
  flatten(before ?? {}, "", was);
  flatten(after ?? {}, "", now);
  const fields = [...new Set([...was.keys(), ...now.keys()])];
  return fields
    .filter((f) => JSON.stringify(was.get(f)) !== JSON.stringify(now.get(f)))
    .map((field) => ({ field, before: was.get(field), after: now.get(field) }));
}

/// A value as the diff shows it; absent is "—".
export function shownValue(value: unknown): string {
  if (value === undefined) return "—";
  return typeof value === "string" ? value : JSON.stringify(value);
}
