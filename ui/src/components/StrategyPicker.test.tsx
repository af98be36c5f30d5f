import { renderToStaticMarkup } from "react-dom/server";
import { describe, expect, it } from "vitest";
import type { Api, ProviderRow, Session } from "../lib/api";
import { AppContext } from "../lib/hooks";
import { pickerValue } from "../lib/picker";
import { StrategyPicker } from "./StrategyPicker";

function render(held: string | undefined, options: { docsUrl?: string | null; providers?: ProviderRow[]; targets?: string[] } = {}) {
  const session: Session = {
    token_name: "ops",
    role: "admin",
    node_role: "control",
    read_only: false,
    docs_url: options.docsUrl ?? null,
  };
  return renderToStaticMarkup(
    <AppContext.Provider value={{ api: {} as Api, session, canEdit: true, isSuperadmin: false, signOut: () => {} }}>
      <StrategyPicker
        id="s"
        held={held}
        value={pickerValue(held)}
        onChange={() => {}}
        noun="route"
        targetProviders={options.targets ?? []}
        providers={options.providers ?? []}
      />
    </AppContext.Provider>,
  );
}

/// The option the rendered <select> shows.
function selected(html: string): string | null {
  return html.match(/<option value="([^"]*)" selected="">/)?.[1] ?? null;
}

describe("<StrategyPicker>", () => {
  it.each(["adaptive", "not_yet_known", "weighted", "lmcache_aware"])("renders the held %s as the selected option", (held) => {
    expect(selected(render(held))).toBe(held);
  });

  it("renders a row without a strategy as the default, not as a choice", () => {
    const html = render(undefined);
    expect(selected(html)).toBe("");
    expect(html).toContain("round_robin (default; not set on this row)");
  });

  it("never offers adaptive unless the row holds it", () => {
    expect(render("round_robin")).not.toContain('value="adaptive"');
    expect(render("adaptive")).toContain("governed by the adaptive-routing policy");
  });

  it("hints where the telemetry source is set, with a link only when there is a documentation host", () => {
    const providers = [{ slug: "gpu-a", name: "GPU A" }];
    const bare = render("precise_cache_aware", { providers, targets: ["gpu-a"] });
    expect(bare).toContain("needs a KV-event source");
    expect(bare).toContain("provider sheet");
    expect(bare).toContain("Target providers without one: GPU A.");
    expect(bare).not.toContain("href=\"https://");
    const linked = render("lmcache_aware", { docsUrl: "https://docs.example.com/rolter/", providers, targets: ["gpu-a"] });
    expect(linked).toContain("needs an LMCache source");
    expect(linked).toContain('href="https://docs.example.com/rolter/strategies.md#setting-up-the-telemetry-strategies"');
    expect(render("cache_aware")).not.toContain("telemetry-hint");
  });
});
