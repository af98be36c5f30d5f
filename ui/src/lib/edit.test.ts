import { describe, expect, it } from "vitest";
import { ApiError } from "./api";
import { applyEdits, draftOf, entriesOf, newDraft, parseField, rowProblems } from "./edit";

describe("applyEdits", () => {
  it("leaves untouched fields exactly as held, unset ones unset", () => {
    const original = { name: "GPU A", base_url: "http://x", max_loras: 8, extra: { a: 1 } };
    const { row, errors } = applyEdits(original, [
      { key: "name", kind: "text", text: "GPU A" },
      { key: "max_loras", kind: "int", text: "8" },
      { key: "health_path", kind: "text", text: "" },
    ]);
    expect(errors).toEqual({});
    expect(row).toEqual(original);
    expect(row).not.toBe(original);
    expect("health_path" in row).toBe(false);
  });

  it("sets changed fields, clears emptied ones, and names bad numbers", () => {
    const { row, errors } = applyEdits({ name: "a", max_loras: 8, api_key_env: "K" }, [
      { key: "name", kind: "text", text: "b" },
      { key: "api_key_env", kind: "text", text: "" },
      { key: "max_loras", kind: "int", text: "eight" },
    ]);
    expect(row).toEqual({ name: "b", max_loras: 8 });
    expect(errors).toEqual({ max_loras: "must be a whole number" });
  });

  it("parses each kind", () => {
    expect(parseField("float", "-0.5")).toEqual({ ok: true, value: -0.5 });
    expect(parseField("int", "-1")).toMatchObject({ ok: false });
    expect(parseField("bool", "false")).toEqual({ ok: true, value: false });
  });
});

describe("entriesOf", () => {
  it("keeps each target as held unless its line changed", () => {
    const drafts = [draftOf({ provider: "gpu-a", model: "m" }), draftOf({ provider: "gpu-b", weight: 3 })];
    drafts[1].weight = "5";
    const { entries, errors } = entriesOf(drafts);
    expect(errors).toEqual([]);
    expect(entries).toEqual([{ provider: "gpu-a", model: "m" }, { provider: "gpu-b", weight: 5 }]);
  });

  it("refuses a line without a provider", () => {
    expect(entriesOf([newDraft()]).errors).toEqual(["line 1, provider: choose a provider"]);
  });

  it("names every line apart, so a removal keeps each line's inputs", () => {
    const same = { provider: "gpu-a" };
    const ids = [draftOf(same), draftOf(same), newDraft("gpu-a"), newDraft("gpu-a")].map((d) => d.id);
    expect(new Set(ids).size).toBe(ids.length);
  });
});

describe("rowProblems", () => {
  it("keys the node's problems by the field inside the row", () => {
    const error = new ApiError(422, "the configuration would not validate", "invalid_configuration", [
      { field: 'routes["org/chat"].targets[1].provider', message: "unknown provider `gone`" },
      { field: 'routes["org/chat"].tokenizer', message: "no tokenizer.json" },
      { field: 'providers["gpu-a"].base_url', message: "not a URL" },
      { field: null, message: "elsewhere" },
    ]);
    expect(rowProblems(error, "routes")).toEqual({
      "targets[1].provider": "unknown provider `gone`",
      tokenizer: "no tokenizer.json",
    });
    expect(rowProblems(error, "providers")).toEqual({ base_url: "not a URL" });
    expect(rowProblems("a browser check", "routes")).toEqual({});
  });
});
