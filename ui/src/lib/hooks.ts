// Loading data: once, or polled while the screen is open.

import { createContext, useCallback, useContext, useEffect, useState } from "react";
import type { Api, CatalogRow, Gateways, GroupRow, Listing, LiveRoutes, ProviderRow, RouteRow, Session } from "./api";
import { ApiError } from "./api";
import { setLeaveQuestion } from "./router";
import { sumGateways, type FleetState } from "./fleet";

export interface AppContextValue {
  api: Api;
  session: Session;
  /// Admin or superadmin on a node whose configuration is not file-managed.
  canEdit: boolean;
  isSuperadmin: boolean;
  /// The token stopped working: back to sign-in with this message.
  signOut: (message?: string) => void;
}

export const AppContext = createContext<AppContextValue | null>(null);

export function useApp(): AppContextValue {
  const value = useContext(AppContext);
  if (!value) throw new Error("useApp outside the signed-in app");
  return value;
}

export interface Loaded<T> {
  data: T | null;
  error: ApiError | null;
  loading: boolean;
  /// When the data last arrived (ms since the epoch).
  updatedAt: number | null;
  /// When the call now under way started; `null` between calls.
  pendingSince: number | null;
  reload: () => void;
}

/// Loads `load()` when the screen opens and whenever `load` changes (pass
/// a `useCallback`, whose dependencies the linter checks); with
/// `intervalMs`, again `intervalMs` after each answer while `live` (one
/// call at a time: a node that stops answering shows as such once the
/// call times out, instead of each poll being dropped by the next). The
/// last good data stays on screen when a poll fails.
export function useLoad<T>(
  load: () => Promise<T>,
  options: { intervalMs?: number; live?: boolean } = {},
): Loaded<T> {
  const { signOut } = useApp();
  const [state, setState] = useState<Omit<Loaded<T>, "reload">>({
    data: null,
    error: null,
    loading: true,
    updatedAt: null,
    pendingSince: null,
  });
  const [tick, setTick] = useState(0);
  const live = options.live ?? true;
  const { intervalMs } = options;

  useEffect(() => {
    let cancelled = false;
    let timer: number | undefined;
    const run = () => {
      setState((s) => ({ ...s, pendingSince: Date.now() }));
      load()
        .then((data) => {
          if (!cancelled) setState({ data, error: null, loading: false, updatedAt: Date.now(), pendingSince: null });
        })
        .catch((e: unknown) => {
          if (cancelled) return;
          const error = e instanceof ApiError ? e : new ApiError(0, String(e));
          if (error.status === 401) signOut(error.message);
          setState((s) => ({ ...s, error, loading: false, pendingSince: null }));
        })
        .finally(() => {
          if (!cancelled && intervalMs && live) timer = window.setTimeout(run, intervalMs);
        });
    };
    run();
    return () => {
      cancelled = true;
      window.clearTimeout(timer);
    };
  }, [load, tick, signOut, intervalMs, live]);

  const reload = useCallback(() => setTick((t) => t + 1), []);
  return { ...state, reload };
}

/// How fresh polled data is: `live` (the last poll answered, recently),
/// `stale` (the call under way is late, or no answer came for longer than
/// a poll and a second: the numbers are old), `failed` (the last poll
/// failed or timed out), or `paused`.
export type Liveness = "live" | "stale" | "failed" | "paused";

/// A call taking longer than this is late: its node may have stopped.
export const LATE_MS = 1000;

export function liveness(
  loaded: { error: ApiError | null; updatedAt: number | null; pendingSince?: number | null },
  intervalMs: number,
  live: boolean,
  now: number,
): Liveness {
  if (!live) return "paused";
  if (loaded.error) return "failed";
  if (loaded.pendingSince != null && loaded.updatedAt !== null && now - loaded.pendingSince > LATE_MS) return "stale";
  if (loaded.updatedAt !== null && now - loaded.updatedAt > intervalMs + LATE_MS) return "stale";
  return "live";
}

/// `useLoad` of one admin endpoint.
export function useGet<T>(path: string, options: { intervalMs?: number; live?: boolean } = {}): Loaded<T> {
  const { api } = useApp();
  return useLoad(
    useCallback(() => api.get<T>(path), [api, path]),
    options,
  );
}

export interface ConfigData {
  providers: Listing<ProviderRow>;
  routes: Listing<RouteRow>;
  groups: Listing<GroupRow>;
  catalog: Listing<CatalogRow>;
}

/// The configuration's four collections, read together.
export function useConfig(): Loaded<ConfigData> {
  const { api } = useApp();
  const load = useCallback(async () => {
    const [providers, routes, groups, catalog] = await Promise.all([
      api.list<ProviderRow>("providers"),
      api.list<RouteRow>("routes"),
      api.list<GroupRow>("provider-groups"),
      api.list<CatalogRow>("catalog"),
    ]);
    return { providers, routes, groups, catalog };
  }, [api]);
  return useLoad(load);
}

/// Re-renders every `ms` (for "x s ago" labels).
export function useNow(ms = 1000): number {
  const [now, setNow] = useState(() => Date.now());
  useEffect(() => {
    const timer = window.setInterval(() => setNow(Date.now()), ms);
    return () => window.clearInterval(timer);
  }, [ms]);
  return now;
}

/// While `dirty`, leaving the screen asks first: in-app links and the back
/// button through the router, closing or reloading the tab through the
/// browser's own prompt.
export function useLeaveGuard(dirty: boolean, question = "Leave without saving? Your changes are not saved."): void {
  useEffect(() => {
    if (!dirty) return;
    setLeaveQuestion(question);
    const onUnload = (e: BeforeUnloadEvent) => {
      e.preventDefault();
      e.returnValue = question;
    };
    window.addEventListener("beforeunload", onUnload);
    return () => {
      setLeaveQuestion(null);
      window.removeEventListener("beforeunload", onUnload);
    };
  }, [dirty, question]);
}

/// The gateways' pushed states on a control node (`null` elsewhere: a
/// node's own state is `/admin/routes`).
export function useGateways(options: { intervalMs: number; live?: boolean }): Loaded<Gateways | null> {
  const { api, session } = useApp();
  const isControl = session.node_role === "control";
  return useLoad(
    useCallback(() => (isControl ? api.get<Gateways>("/api/v1/fleet/gateways") : Promise.resolve(null)), [api, isControl]),
    { intervalMs: options.intervalMs, live: (options.live ?? true) && isControl },
  );
}

/// What a screen shows of the fleet's live state: on a control node (which
/// serves no traffic) every fresh gateway's pushed state summed, with each
/// gateway's own (`gateways`); elsewhere the node's own `/admin/routes`.
export interface LiveState {
  loaded: Loaded<unknown>;
  state: FleetState | null;
  gateways: Gateways["gateways"] | null;
}

export function useLiveState(intervalMs: number): LiveState {
  const { api, session } = useApp();
  const isControl = session.node_role === "control";
  const loaded = useLoad(
    useCallback(
      (): Promise<Gateways | LiveRoutes> =>
        isControl ? api.get<Gateways>("/api/v1/fleet/gateways") : api.get<LiveRoutes>("/admin/routes"),
      [api, isControl],
    ),
    { intervalMs },
  );
  const data = loaded.data;
  if (data && "gateways" in data) return { loaded, state: sumGateways(data.gateways), gateways: data.gateways };
  return { loaded, state: (data as LiveRoutes | null) ?? null, gateways: null };
}
