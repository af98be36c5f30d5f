// Client-side routes under /ui/. The admin listener answers index.html for
// every path below /ui/ that is not a file, so any of these can be
// reloaded or bookmarked.

import { useEffect, useState } from "react";
import { encodeKey } from "./api";

export const BASE = "/ui/";

export type View =
  | { screen: "fleet" }
  | { screen: "models" }
  | { screen: "model"; model: string }
  | { screen: "routes" }
  | { screen: "route-edit"; model: string | null }
  | { screen: "group-edit"; slug: string | null }
  | { screen: "providers" }
  | { screen: "provider"; slug: string | null }
  | { screen: "adaptive" }
  | { screen: "cluster" }
  | { screen: "not-found"; path: string };

function decode(rest: string): string {
  return rest
    .split("/")
    .map((segment) => {
      try {
        return decodeURIComponent(segment);
      } catch {
        return segment;
      }
    })
    .join("/");
}

/// The view of a location path (`/ui/...`).
export function parse(pathname: string): View {
  const rest = pathname.startsWith(BASE) ? pathname.slice(BASE.length) : pathname === "/ui" ? "" : pathname;
  const path = rest.replace(/\/+$/, "");
  const after = (prefix: string) => (path.startsWith(prefix) ? decode(path.slice(prefix.length)) : null);
  if (path === "" || path === "fleet") return { screen: "fleet" };
  if (path === "models") return { screen: "models" };
  if (path === "routes") return { screen: "routes" };
  if (path === "routes/new") return { screen: "route-edit", model: null };
  if (path === "groups/new") return { screen: "group-edit", slug: null };
  if (path === "providers") return { screen: "providers" };
  if (path === "providers/new") return { screen: "provider", slug: null };
  if (path === "adaptive") return { screen: "adaptive" };
  if (path === "cluster") return { screen: "cluster" };
  const model = after("models/");
  if (model) return { screen: "model", model };
  const routeKey = after("routes/edit/");
  if (routeKey) return { screen: "route-edit", model: routeKey };
  const groupKey = after("groups/edit/");
  if (groupKey) return { screen: "group-edit", slug: groupKey };
  const provider = after("providers/");
  if (provider) return { screen: "provider", slug: provider };
  return { screen: "not-found", path: pathname };
}

export const href = {
  fleet: () => `${BASE}fleet`,
  models: () => `${BASE}models`,
  model: (model: string) => `${BASE}models/${encodeKey(model)}`,
  routes: () => `${BASE}routes`,
  newRoute: () => `${BASE}routes/new`,
  editRoute: (model: string) => `${BASE}routes/edit/${encodeKey(model)}`,
  newGroup: () => `${BASE}groups/new`,
  editGroup: (slug: string) => `${BASE}groups/edit/${encodeKey(slug)}`,
  providers: () => `${BASE}providers`,
  newProvider: () => `${BASE}providers/new`,
  provider: (slug: string) => `${BASE}providers/${encodeKey(slug)}`,
  adaptive: () => `${BASE}adaptive`,
  cluster: () => `${BASE}cluster`,
};

const listeners = new Set<() => void>();

/// What to ask before leaving the screen (an editor with unsaved changes),
/// or `null` when leaving loses nothing. One at a time: one screen is open.
let leaveQuestion: string | null = null;

export function setLeaveQuestion(question: string | null): void {
  leaveQuestion = question;
}

/// Whether the screen may be left: nothing unsaved, or the operator said so.
export function mayLeave(): boolean {
  return leaveQuestion === null || window.confirm(leaveQuestion);
}

/// Moves to `to`; asks first when the screen has unsaved changes, unless
/// `force` (the screen itself moves on after saving or deleting).
export function navigate(to: string, replace = false, force = false): void {
  if (!force && to !== window.location.pathname && !mayLeave()) return;
  if (force) leaveQuestion = null;
  if (replace) window.history.replaceState(null, "", to);
  else window.history.pushState(null, "", to);
  window.scrollTo(0, 0);
  listeners.forEach((l) => l());
}

/// The current location path, following navigation and back/forward (the
/// browser's back button asks too, and stays when told to).
export function useLocationPath(): string {
  const [path, setPath] = useState(window.location.pathname);
  useEffect(() => {
    const onPop = () => {
      if (window.location.pathname !== path && !mayLeave()) {
        window.history.pushState(null, "", path);
        return;
      }
      setPath(window.location.pathname);
    };
    const update = () => setPath(window.location.pathname);
    listeners.add(update);
    window.addEventListener("popstate", onPop);
    return () => {
      listeners.delete(update);
      window.removeEventListener("popstate", onPop);
    };
  }, [path]);
  return path;
}
