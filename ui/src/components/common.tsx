import type { MouseEvent, ReactNode } from "react";
import { ApiError, type Problem } from "../lib/api";
import { useApp, type Liveness, type Loaded } from "../lib/hooks";
import { formatDuration } from "../lib/format";
import { navigate } from "../lib/router";

/// An in-app link: client-side navigation, a real href for new tabs.
export function Link(props: { to: string; children: ReactNode; className?: string; title?: string }) {
  const onClick = (e: MouseEvent<HTMLAnchorElement>) => {
    if (e.metaKey || e.ctrlKey || e.shiftKey || e.button !== 0) return;
    e.preventDefault();
    navigate(props.to);
  };
  return (
    <a href={props.to} onClick={onClick} className={props.className} title={props.title}>
      {props.children}
    </a>
  );
}

export function PageHead(props: { title: ReactNode; children?: ReactNode; actions?: ReactNode }) {
  return (
    <div className="page-head">
      <div>
        <h1>{props.title}</h1>
        {props.children && <p>{props.children}</p>}
      </div>
      {props.actions && <div className="actions">{props.actions}</div>}
    </div>
  );
}

export function Panel(props: { title?: ReactNode; aside?: ReactNode; children: ReactNode; testId?: string }) {
  return (
    <section className="panel" data-testid={props.testId}>
      {(props.title || props.aside) && (
        <div className="panel-head">
          {props.title ? <h2>{props.title}</h2> : <span />}
          {props.aside && <span className="muted">{props.aside}</span>}
        </div>
      )}
      {props.children}
    </section>
  );
}

export function Badge(props: { tone?: "ok" | "warn" | "bad" | "accent"; children: ReactNode; title?: string }) {
  return (
    <span className={`badge ${props.tone ?? ""}`} title={props.title}>
      {props.children}
    </span>
  );
}

export function StrategyBadge(props: { strategy: string | null | undefined }) {
  return <span className="badge strategy">{props.strategy ?? "round_robin"}</span>;
}

/// A node's refusal, its message verbatim, with field-level problems.
export function ErrorBox(props: { error: ApiError | Error | string | null; title?: string }) {
  const { error } = props;
  if (!error) return null;
  const message = typeof error === "string" ? error : error.message;
  const problems = error instanceof ApiError ? error.problems : [];
  const status = error instanceof ApiError && error.status ? ` (HTTP ${error.status})` : "";
  // A string is the dashboard's own check: nothing was sent.
  const title = props.title ?? (typeof error === "string" ? "Not sent: checked in the browser" : "The node refused this");
  return (
    <div className="notice error" role="alert" data-testid="error" data-source={typeof error === "string" ? "browser" : "node"}>
      <strong>
        {title}
        {status}
      </strong>
      <p className="error-message">{message}</p>
      {problems.length > 1 && (
        <ul>
          {problems.map((p, i) => (
            <li key={i}>
              {p.field && <code>{p.field}</code>} {p.message}
            </li>
          ))}
        </ul>
      )}
    </div>
  );
}

export function Loading(props: { what: string }) {
  return <p className="muted">Loading {props.what}…</p>;
}

/// Where the configuration of this node is changed, when not here.
export function ReadOnlyNotice() {
  const { session, canEdit } = useApp();
  if (session.read_only) {
    return (
      <div className="notice info" data-testid="read-only-notice">
        <strong>Read-only: this node's configuration is file-managed.</strong>
        <p>
          {session.node_role === "gateway"
            ? "This gateway runs the configuration its control node publishes; change it on the control node."
            : "This standalone node runs rolter.toml. Change the file, then reload (POST /admin/reload or SIGHUP); the dashboard shows what the node runs."}
        </p>
      </div>
    );
  }
  if (!canEdit) {
    return (
      <div className="notice info" data-testid="viewer-notice">
        <strong>Viewing only.</strong>
        <p>Your token ({session.token_name}) has the viewer role; changes need an admin token.</p>
      </div>
    );
  }
  return null;
}

/// A link to the documentation host, or nothing at all when the deployment
/// has none (air-gapped): the sentence around it must read fine without.
export function DocsLink(props: { page: string; children: ReactNode }) {
  const { session } = useApp();
  if (!session.docs_url) return null;
  const url = `${session.docs_url.replace(/\/+$/, "")}/${props.page}`;
  return (
    <a href={url} target="_blank" rel="noreferrer" data-testid="docs-link">
      {props.children}
    </a>
  );
}

export function FileManagedBadge() {
  return (
    <Badge title="Defined in rolter.toml: read-only here">rolter.toml</Badge>
  );
}

export function Empty(props: { children: ReactNode }) {
  return <p className="muted">{props.children}</p>;
}

/// A field's help text: a Rust field doc (FIELD_HELP) or a sentence of the
/// screen's own, its `backticked` spans set as code.
export function Help(props: { text: string }) {
  const parts = props.text.split("`");
  return (
    <div className="help">
      {parts.map((part, i) => (i % 2 === 1 ? <code key={i}>{part}</code> : part))}
    </div>
  );
}

/// A column head: its label, right-aligned for numbers, at a set width.
export interface Column {
  label?: ReactNode;
  num?: boolean;
  width?: number | string;
}

/// Rows under their column heads, scrolling sideways on a narrow screen.
/// A falsy column is left out (a column shown only sometimes).
export function Table(props: { columns: (Column | false | null | undefined)[]; className?: string; children: ReactNode }) {
  const columns = props.columns.filter((c): c is Column => Boolean(c));
  return (
    <div className="table-wrap">
      <table className={props.className}>
        <thead>
          <tr>
            {columns.map((c, i) => (
              <th key={i} className={c.num ? "num" : undefined} style={c.width === undefined ? undefined : { width: c.width }}>
                {c.label}
              </th>
            ))}
          </tr>
        </thead>
        <tbody>{props.children}</tbody>
      </table>
    </div>
  );
}

/// What a screen shows of one load: the node's refusal, the wait for the
/// first answer, then `children` of the data, which stays on screen when a
/// later poll fails (the refusal shows above it).
export function LoadState<T>(props: { loaded: Loaded<T>; what: string; children: (data: T) => ReactNode }) {
  const { loaded } = props;
  return (
    <>
      {loaded.error && <ErrorBox error={loaded.error} title={`Could not read ${props.what}`} />}
      {loaded.loading && loaded.data === null && <Loading what={props.what} />}
      {loaded.data !== null && props.children(loaded.data)}
    </>
  );
}

const LIVENESS_LABEL: Record<Liveness, string> = {
  live: "Live",
  stale: "Stale",
  failed: "Not answering",
  paused: "Paused",
};

/// Whether polled numbers are current: a green dot while the node answers,
/// grey when the answer is late, red when the poll failed or timed out, with
/// the age of what is on screen.
export function LiveIndicator(props: {
  loaded: Loaded<unknown>;
  state: Liveness;
  now: number;
  testId?: string;
  children?: ReactNode;
}) {
  const { loaded, state } = props;
  return (
    <span className="muted small" data-testid={props.testId} data-state={state} title={loaded.error?.message}>
      <span className={`live-dot ${state}`} />
      {LIVENESS_LABEL[state]}
      {loaded.updatedAt !== null && ` · updated ${formatDuration(props.now - loaded.updatedAt)} ago`}
      {props.children}
    </span>
  );
}

/// What a write answered: created or saved, the configuration version it
/// made, and the node's warnings about the result.
export interface SavedAnswer {
  version?: number;
  warnings?: Problem[];
  created?: boolean;
  deleted?: boolean;
}

export function SavedNotice(props: { saved: SavedAnswer | null }) {
  const { saved } = props;
  if (!saved) return null;
  const warnings = saved.warnings ?? [];
  return (
    <div className={`notice ${warnings.length ? "warn" : "ok"}`} data-testid="saved" role="status">
      <strong>
        {saved.created ? "Created" : saved.deleted ? "Deleted" : "Saved"}
        {saved.version != null ? ` — configuration version ${saved.version}` : ""}.
      </strong>
      {warnings.length > 0 && (
        <>
          <p>The node accepted it with {warnings.length === 1 ? "a warning" : `${warnings.length} warnings`}:</p>
          <ul data-testid="saved-warnings">
            {warnings.map((w, i) => (
              <li key={i}>
                {w.field && <code>{w.field}</code>} {w.message}
              </li>
            ))}
          </ul>
        </>
      )}
    </div>
  );
}
