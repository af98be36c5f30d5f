import { renderToStaticMarkup } from "react-dom/server";
import { describe, expect, it } from "vitest";
import { ApiError } from "../lib/api";
import type { Loaded } from "../lib/hooks";
import { Help, LoadState, Table } from "./common";

function loaded<T>(state: Partial<Loaded<T>>): Loaded<T> {
  return { data: null, error: null, loading: false, updatedAt: null, pendingSince: null, reload: () => {}, ...state };
}

const show = (rows: string[]) => <p>{rows.join(",")}</p>;

describe("LoadState", () => {
  it("waits, then shows the data", () => {
    expect(renderToStaticMarkup(<LoadState loaded={loaded<string[]>({ loading: true })} what="the rows">{show}</LoadState>)).toContain(
      "Loading the rows",
    );
    const html = renderToStaticMarkup(<LoadState loaded={loaded({ data: ["a", "b"] })} what="the rows">{show}</LoadState>);
    expect(html).toBe("<p>a,b</p>");
  });

  it("keeps the last data under a failed poll", () => {
    const html = renderToStaticMarkup(
      <LoadState loaded={loaded({ data: ["a"], error: new ApiError(503, "control node down") })} what="the rows">
        {show}
      </LoadState>,
    );
    expect(html).toContain("Could not read the rows");
    expect(html).toContain("control node down");
    expect(html).toContain("<p>a</p>");
    expect(html).not.toContain("Loading");
  });
});

describe("Table", () => {
  it("leaves out the columns that are off and right-aligns numbers", () => {
    const html = renderToStaticMarkup(
      <Table columns={[{ label: "Target" }, false, { label: "Picks", num: true, width: 90 }]}>
        <tr>
          <td>a</td>
          <td>3</td>
        </tr>
      </Table>,
    );
    expect(html).toContain('<th>Target</th><th class="num" style="width:90px">Picks</th>');
    expect(html.match(/<th[ >]/g)).toHaveLength(2);
    expect(html).toContain("<tbody><tr><td>a</td><td>3</td></tr></tbody>");
  });
});

describe("Help", () => {
  it("sets backticked spans of a Rust field doc as code", () => {
    expect(renderToStaticMarkup(<Help text="Must equal the engine's `--block-size`. Default: 16." />)).toBe(
      '<div class="help">Must equal the engine&#x27;s <code>--block-size</code>. Default: 16.</div>',
    );
  });
});
