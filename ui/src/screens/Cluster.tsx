import { useCallback } from "react";
import type { AuditRecord, Cluster, LastReload, LiveRoutes } from "../lib/api";
import { useApp, useGateways, useGet, useLoad, useNow } from "../lib/hooks";
import { fieldChanges, shownValue } from "../lib/diff";
import { formatAgo, formatTime } from "../lib/format";
import { Badge, Empty, ErrorBox, LoadState, PageHead, Panel, Table } from "../components/common";

const CLUSTER_POLL_MS = 5000;
/// A node not seen for this long is shown as silent (gateways poll every 5 s
/// by default).
const SILENT_AFTER_MS = 60_000;

export function ClusterScreen() {
  const { api, session } = useApp();
  const cluster = useGet<Cluster>("/api/v1/cluster/nodes", { intervalMs: CLUSTER_POLL_MS });
  const audit = useLoad(
    useCallback(
      () =>
        session.node_role === "control"
          ? api.get<{ data: AuditRecord[] }>("/api/v1/audit-log?limit=25")
          : Promise.resolve({ data: [] as AuditRecord[] }),
      [api, session.node_role],
    ),
  );
  const own = useGet<LiveRoutes>("/admin/routes", { intervalMs: CLUSTER_POLL_MS });
  const gateways = useGateways({ intervalMs: CLUSTER_POLL_MS });
  const now = useNow();
  const current = cluster.data?.config_version;
  // Each node's last reload: this node's own, the gateways' as they pushed it.
  const reloadOf = (nodeId: string): LastReload | null | undefined => {
    if (own.data && own.data.node_id === nodeId) return own.data.last_reload ?? null;
    return gateways.data?.gateways.find((g) => g.node_id === nodeId)?.state.last_reload;
  };
  return (
    <>
      <PageHead title="Cluster">
        The nodes of the fleet, their roles and the configuration version each runs. Gateways report themselves on every
        poll of the control node.
      </PageHead>
      <LoadState loaded={cluster} what="the cluster">
        {(answer) => (
          <Panel
            title="Nodes"
            aside={`configuration version ${current} published · refreshed every ${CLUSTER_POLL_MS / 1000} s`}
            testId="cluster-nodes"
          >
            {answer.nodes.length === 0 ? (
              <Empty>No node has reported yet. Gateways appear here once they poll this control node.</Empty>
            ) : (
              <Table
                columns={[
                  { label: "Node" },
                  { label: "Role" },
                  { label: "Config version", num: true },
                  { label: "Address" },
                  { label: "Software" },
                  { label: "Last reload" },
                  { label: "First seen" },
                  { label: "Last seen" },
                ]}
              >
                {answer.nodes.map((node) => {
                  const lastSeen = node.last_seen ? Date.parse(node.last_seen) : null;
                  const silent = lastSeen !== null && now - lastSeen > SILENT_AFTER_MS;
                  // A gateway's poll names the version it had; its push, the one it runs.
                  const pushed = gateways.data?.gateways.find((g) => g.node_id === node.node_id)?.state.version;
                  const version = Math.max(node.config_version ?? 0, pushed ?? 0) || null;
                  const behind = current != null && version != null && version < current;
                  return (
                    <tr key={node.node_id} data-testid="cluster-node">
                      <td className="mono">{node.node_id}</td>
                      <td>
                        <Badge tone={node.role === "control" ? "accent" : undefined}>{node.role}</Badge>
                      </td>
                      <td className="num">
                        {version ?? "—"}{" "}
                        {version != null &&
                          (behind ? <Badge tone="warn">behind</Badge> : <Badge tone="ok">current</Badge>)}
                      </td>
                      <td className="mono small">{node.address ?? "—"}</td>
                      <td className="small">{node.software_version ?? "—"}</td>
                      <td className="small" data-testid="node-reload">
                        <ReloadCell reload={reloadOf(node.node_id)} />
                      </td>
                      <td className="small">{node.first_seen ? formatTime(node.first_seen) : "—"}</td>
                      <td className="small">
                        {node.last_seen ? (
                          <>
                            {formatAgo(node.last_seen, now)}
                            <div className="faint">{formatTime(node.last_seen)}</div>
                          </>
                        ) : (
                          "now (this node)"
                        )}{" "}
                        {silent && <Badge tone="bad">silent</Badge>}
                      </td>
                    </tr>
                  );
                })}
              </Table>
            )}
          </Panel>
        )}
      </LoadState>
      {session.node_role === "control" && (
        <Panel title="Recent changes" aside="the audit log: every write, newest first" testId="audit-log">
          {audit.error && <ErrorBox error={audit.error} title="Could not read the audit log" />}
          {audit.data && audit.data.data.length === 0 && <Empty>No change has been made through the control API yet.</Empty>}
          {audit.data && audit.data.data.length > 0 && (
            <Table
              columns={[
                { label: "When" },
                { label: "Who" },
                { label: "Action" },
                { label: "Subject" },
                { label: "Version", num: true },
                { label: "Change" },
              ]}
            >
              {audit.data.data.map((record) => (
                <tr key={record.id}>
                  <td className="small nowrap">{formatTime(record.at)}</td>
                  <td>{record.actor}</td>
                  <td className="mono small">{record.action}</td>
                  <td className="mono small">{record.subject}</td>
                  <td className="num">{record.version ?? "—"}</td>
                  <td>
                    <AuditDiff details={record.details} />
                  </td>
                </tr>
              ))}
            </Table>
          )}
        </Panel>
      )}
    </>
  );
}

function ReloadCell(props: { reload: LastReload | null | undefined }) {
  const { reload } = props;
  if (reload === undefined) return <span className="faint">not reported</span>;
  if (reload === null) return <span className="faint">none since start</span>;
  if (reload.applied) {
    return (
      <>
        <Badge tone="ok">applied</Badge> version {reload.version}
        <div className="faint">{formatTime(reload.at_unix_ms)}</div>
      </>
    );
  }
  return (
    <>
      <Badge tone="bad">refused</Badge> {formatTime(reload.at_unix_ms)}
      <ul className="tight">
        {reload.errors.map((e, i) => (
          <li key={i} className="error-message">
            {e}
          </li>
        ))}
      </ul>
    </>
  );
}

/// An audit record's change as a field-by-field diff.
function AuditDiff(props: { details: unknown }) {
  const details = (props.details ?? {}) as { before?: unknown; after?: unknown };
  const changes = fieldChanges(details.before, details.after);
  if (changes.length === 0) return <span className="faint">no field changed</span>;
  return (
    <table className="diff" data-testid="audit-diff">
      <tbody>
        {changes.map((c) => (
          <tr key={c.field}>
            <td className="mono small">{c.field}</td>
            <td className="mono small removed">{shownValue(c.before)}</td>
            <td className="mono small added">{shownValue(c.after)}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}
