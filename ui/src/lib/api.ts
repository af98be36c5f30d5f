// The node's APIs, as the dashboard uses them: the control API under
// /api/v1/ (every node answers the read side; see src/admin/control.rs) and
// the admin endpoints under /admin/. Every call carries the admin token.

import type { components } from "./api.gen";

/// The admin listener's schemas, generated from the Rust types
/// (src/lib/api.gen.ts, from ui/openapi.json).
export type Schemas = components["schemas"];

export type Role = Schemas["AdminRole"];
export type NodeRole = Schemas["Role"];
export type Session = Schemas["SessionView"];

/// The rows of the control API's collections: the rolter.toml tables.
export type ProviderRow = Schemas["ProviderTable"];
export type KvEventsSource = Schemas["KvEventsTable"];
export type LmcacheSource = Schemas["LmcacheTable"];
export type EngineMetricsSource = Schemas["EngineMetricsTable"];
export type TargetEntry = Schemas["TargetEntry"];
export type RouteRow = Schemas["RouteTable"];
export type GroupRow = Schemas["ProviderGroupTable"];
export type CatalogRow = Schemas["CatalogTable"];
export type Policy = Schemas["AdaptiveRoutingTable"];

/// A collection's rows, with the keys of those rolter.toml defines
/// (read-only); one generic where the document spells one per row type.
export type Listing<T> = Omit<Schemas["Listing_RouteTable"], "data"> & { data: T[] };

/// `/admin/routes`: what this node runs, with live target state.
export type LiveRoutes = Schemas["RoutesAnswer"];
export type LiveRoute = Schemas["RouteView"];
export type LiveTarget = Schemas["TargetView"];
export type KvIndexReading = Schemas["KvIndexView"];
export type LastReload = Schemas["LastReload"];
/// `GET /api/v1/fleet/gateways`: each gateway's pushed `/admin/routes`.
export type Gateways = Schemas["GatewaysAnswer"];
export type LmcacheReading = Schemas["LmcacheView"];

/// `/admin/kv-index`.
export type EngineTelemetry = Schemas["EngineTelemetryAnswer"];
export type KvIndexSummary = Schemas["KvIndexSummary"];
export type OccupancySummary = Schemas["OccupancySummary"];

/// `GET /api/v1/adaptive-routing-policy`: `data` on a control node, `policy`
/// (and `managed_by`) where rolter.toml or the control node owns it.
export type PolicyAnswer = Schemas["PolicyAnswer"];
export type Problem = Schemas["Problem"];

/// `GET /api/v1/adaptive-routing-telemetry`.
export type Telemetry = Schemas["TelemetryAnswer"];
export type TelemetryNode = Schemas["NodeRanking"];
export type TelemetryTarget = Schemas["TargetSample"];

export type Cluster = Schemas["ClusterAnswer"];
export type ClusterNode = Schemas["ClusterNode"];
export type AuditRecord = Schemas["AuditRecord"];

/// A refusal of the node, with its message exactly as sent.
export class ApiError extends Error {
  readonly status: number;
  readonly code: string | null;
  /// Field-level problems (422): each with its field path.
  readonly problems: Problem[];

  constructor(
    status: number,
    message: string,
    code: string | null = null,
    problems: Problem[] = [],
  ) {
    super(message);
    this.status = status;
    this.code = code;
    this.problems = problems;
  }
}

/// The error of a failed answer: the node's own message when it sent one.
export async function errorOf(response: Response): Promise<ApiError> {
  const text = await response.text().catch(() => "");
  try {
    const body = JSON.parse(text);
    const error = body?.error;
    if (error && typeof error.message === "string") {
      const code = typeof error.code === "string" ? error.code : null;
      const problems = Array.isArray(error.errors) ? error.errors : [];
      return new ApiError(response.status, error.message, code, problems);
    }
  } catch {
    // Not JSON: fall through to the status line.
  }
  const detail = text.trim().slice(0, 300);
  return new ApiError(
    response.status,
    `HTTP ${response.status} ${response.statusText}${detail ? `: ${detail}` : ""}`,
  );
}

export type Fetch = typeof fetch;

/// How long a call may take before the dashboard calls the node silent.
export const REQUEST_TIMEOUT_MS = 4000;

/// The APIs with one admin token.
export class Api {
  private readonly token: string;
  private readonly fetcher: Fetch;

  constructor(token: string, fetcher: Fetch = (...args) => fetch(...args)) {
    this.token = token;
    this.fetcher = fetcher;
  }

  /// One call; it fails with code `timeout` when the node has not
  /// answered in full within `timeoutMs` (a frozen node must not look live).
  async request<T>(method: string, path: string, body?: unknown, timeoutMs = REQUEST_TIMEOUT_MS): Promise<T> {
    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort(), timeoutMs);
    try {
      let response: Response;
      try {
        response = await this.fetcher(path, {
          method,
          headers: {
            authorization: `Bearer ${this.token}`,
            ...(body === undefined ? {} : { "content-type": "application/json" }),
          },
          body: body === undefined ? undefined : JSON.stringify(body),
          cache: "no-store",
          signal: abort.signal,
        });
        if (!response.ok) throw await errorOf(response);
        if (response.status === 204) return undefined as T;
        return (await response.json()) as T;
      } catch (e) {
        if (e instanceof ApiError) throw e;
        if (abort.signal.aborted) {
          throw new ApiError(0, `The node did not answer within ${timeoutMs / 1000} s.`, "timeout");
        }
        throw new ApiError(0, `The node did not answer (${(e as Error).message}).`);
      }
    } finally {
      clearTimeout(timer);
    }
  }

  get<T>(path: string): Promise<T> {
    return this.request<T>("GET", path);
  }

  session(): Promise<Session> {
    return this.get<Session>("/api/v1/session");
  }

  list<T>(collection: Collection): Promise<Listing<T>> {
    return this.get<Listing<T>>(`/api/v1/${collection}`);
  }

  create<T>(collection: Collection, row: T): Promise<{ data: T }> {
    return this.request("POST", `/api/v1/${collection}`, row);
  }

  replace<T>(collection: Collection, key: string, row: T): Promise<{ data: T }> {
    return this.request("PUT", `/api/v1/${collection}/${encodeKey(key)}`, row);
  }

  remove(collection: Collection, key: string): Promise<unknown> {
    return this.request("DELETE", `/api/v1/${collection}/${encodeKey(key)}`);
  }
}

export type Collection = "providers" | "routes" | "provider-groups" | "catalog";

/// A row key in a path: '/' stays (route models are often org/model), the
/// rest is escaped.
export function encodeKey(key: string): string {
  return key.split("/").map(encodeURIComponent).join("/");
}
