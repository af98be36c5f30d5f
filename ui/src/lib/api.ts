// The node's APIs, as the dashboard uses them: the control API under
// /api/v1/ (every node answers the read side; see src/admin/control.rs) and
// the admin endpoints under /admin/. Every call carries the admin token.

export type Role = "viewer" | "admin" | "superadmin";
export type NodeRole = "standalone" | "control" | "gateway";

export interface Session {
  token_name: string;
  role: Role;
  node_role: NodeRole;
  /// Everything is file-managed here (every node but a control node).
  read_only: boolean;
  docs_url: string | null;
}

export interface KvEventsSource {
  endpoint?: string;
  replay_endpoint?: string;
  topic?: string;
  block_size?: number;
  data_parallel_size?: number;
}

export interface LmcacheSource {
  endpoint?: string;
  format?: string;
  metric?: string;
  poll_interval_secs?: number;
  stale_after_secs?: number;
}

export interface ProviderRow {
  name?: string;
  slug?: string;
  base_url?: string;
  api_key_env?: string;
  health_path?: string;
  max_loras?: number;
  ca_file?: string;
  tls_verify?: boolean;
  kv_events?: KvEventsSource;
  lmcache?: LmcacheSource;
}

export interface TargetEntry {
  provider?: string;
  model?: string;
  weight?: number;
}

export interface RouteRow {
  model?: string;
  strategy?: string;
  targets?: TargetEntry[];
}

export interface GroupRow {
  name?: string;
  slug?: string;
  strategy?: string;
  members?: TargetEntry[];
}

export interface CatalogRow {
  model?: string;
  input_per_mtok?: number;
  output_per_mtok?: number;
}

export interface Listing<T> {
  data: T[];
  /// Keys of the rows rolter.toml defines: read-only.
  file_managed: string[];
}

export interface KvIndexReading {
  configured: boolean;
  usable: boolean;
  blocks_resident: number;
  last_message_age_ms: number | null;
}

export interface LmcacheReading {
  fresh: boolean;
  occupancy: number | null;
  cache_available: boolean;
  age_ms: number | null;
}

export interface LiveTarget {
  provider: string;
  model: string;
  weight: number;
  base_url: string;
  in_flight: number;
  requests: number;
  failures: number;
  picks: number;
  latency_ewma_ms: number | null;
  latency_samples: number;
  breaker: "closed" | "open" | "half_open";
  healthy: boolean;
  parked_until_ms: number | null;
  kv_index: KvIndexReading | null;
  lmcache: LmcacheReading | null;
}

export interface LiveRoute {
  model: string;
  strategy: string;
  reads_weights: boolean;
  targets: LiveTarget[];
  report: {
    decisions: { engaged: boolean; blend: number; fallback: number; exploration: number } | null;
    targets: unknown[];
  };
}

export interface LiveRoutes {
  version: number;
  routes: LiveRoute[];
}

export interface Policy {
  enabled?: boolean;
  latency_weight?: number;
  cost_weight?: number;
  load_weight?: number;
  exploration_ratio?: number;
  min_samples?: number;
}

/// `GET /api/v1/adaptive-routing-policy`: `data` on a control node, `policy`
/// (and `managed_by`) where rolter.toml or the control node owns it.
export interface PolicyAnswer {
  data?: Policy;
  policy?: Policy;
  managed_by?: string;
  updated_at?: string | null;
  updated_by?: string | null;
  affected_routes?: string[];
  affected_provider_groups?: string[];
  warnings?: { field: string | null; message: string }[];
  version?: number;
}

export interface TelemetryTarget {
  target: string;
  provider: string;
  upstream_model: string;
  score: number | null;
  latency: number | null;
  cost: number | null;
  load: number | null;
  latency_ms: number | null;
  price: number | null;
  in_flight: number | null;
  picks: number;
  last_pick_age_ms: number | null;
}

export interface TelemetryNode {
  node_id: string;
  reported_at?: string;
  decisions: { engaged: boolean; blend: number; fallback: number; exploration: number };
  policy: Required<Policy>;
  targets: TelemetryTarget[];
}

export interface Telemetry {
  routes: { model: string; nodes: TelemetryNode[] }[];
}

export interface ClusterNode {
  node_id: string;
  role: string;
  config_version: number | null;
  address?: string | null;
  software_version?: string | null;
  first_seen?: string;
  last_seen?: string;
}

export interface Cluster {
  nodes: ClusterNode[];
  config_version: number;
}

export interface AuditRecord {
  id: number;
  at: string;
  actor: string;
  action: string;
  subject: string;
  details: unknown;
  version: number | null;
}

/// A refusal of the node, with its message exactly as sent.
export class ApiError extends Error {
  readonly status: number;
  readonly code: string | null;
  /// Field-level problems (422): each with its field path.
  readonly problems: { field: string | null; message: string }[];

  constructor(
    status: number,
    message: string,
    code: string | null = null,
    problems: { field: string | null; message: string }[] = [],
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

/// The APIs with one admin token.
export class Api {
  private readonly token: string;
  private readonly fetcher: Fetch;

  constructor(token: string, fetcher: Fetch = (...args) => fetch(...args)) {
    this.token = token;
    this.fetcher = fetcher;
  }

  async request<T>(method: string, path: string, body?: unknown): Promise<T> {
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
      });
    } catch (e) {
      throw new ApiError(0, `The node did not answer (${(e as Error).message}).`);
    }
    if (!response.ok) throw await errorOf(response);
    if (response.status === 204) return undefined as T;
    return (await response.json()) as T;
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
