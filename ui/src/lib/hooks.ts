// Loading data: once, or polled while the screen is open.

import { createContext, useCallback, useContext, useEffect, useState } from "react";
import type { Api, CatalogRow, GroupRow, Listing, ProviderRow, RouteRow, Session } from "./api";
import { ApiError } from "./api";

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
  reload: () => void;
}

/// Loads `load()` when the screen opens and whenever `load` changes (pass
/// a `useCallback`, whose dependencies the linter checks); with
/// `intervalMs`, again every `intervalMs` while `live` (the last good data
/// stays on screen when a poll fails).
export function useLoad<T>(
  load: () => Promise<T>,
  options: { intervalMs?: number; live?: boolean } = {},
): Loaded<T> {
  const { signOut } = useApp();
  const [state, setState] = useState<{ data: T | null; error: ApiError | null; loading: boolean; updatedAt: number | null }>({
    data: null,
    error: null,
    loading: true,
    updatedAt: null,
  });
  const [tick, setTick] = useState(0);

  useEffect(() => {
    let cancelled = false;
    load()
      .then((data) => {
        if (!cancelled) setState({ data, error: null, loading: false, updatedAt: Date.now() });
      })
      .catch((e: unknown) => {
        if (cancelled) return;
        const error = e instanceof ApiError ? e : new ApiError(0, String(e));
        if (error.status === 401) signOut(error.message);
        setState((s) => ({ ...s, error, loading: false }));
      });
    return () => {
      cancelled = true;
    };
  }, [load, tick, signOut]);

  const live = options.live ?? true;
  useEffect(() => {
    if (!options.intervalMs || !live) return;
    const timer = window.setInterval(() => setTick((t) => t + 1), options.intervalMs);
    return () => window.clearInterval(timer);
  }, [options.intervalMs, live]);

  const reload = useCallback(() => setTick((t) => t + 1), []);
  return { ...state, reload };
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
