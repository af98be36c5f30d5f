import { useCallback } from "react";
import type { AuditRecord, Cluster } from "../lib/api";
import { useApp, useGet, useLoad, useNow } from "../lib/hooks";
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
  const now = useNow();
  const current = cluster.data?.config_version;
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
                  { label: "First seen" },
                  { label: "Last seen" },
                ]}
              >
                {answer.nodes.map((node) => {
                  const lastSeen = node.last_seen ? Date.parse(node.last_seen) : null;
                  const silent = lastSeen !== null && now - lastSeen > SILENT_AFTER_MS;
                  const behind = current != null && node.config_version != null && node.config_version < current;
                  return (
                    <tr key={node.node_id} data-testid="cluster-node">
                      <td className="mono">{node.node_id}</td>
                      <td>
                        <Badge tone={node.role === "control" ? "accent" : undefined}>{node.role}</Badge>
                      </td>
                      <td className="num">
                        {node.config_version ?? "—"}{" "}
                        {node.config_version != null &&
                          (behind ? <Badge tone="warn">behind</Badge> : <Badge tone="ok">current</Badge>)}
                      </td>
                      <td className="mono small">{node.address ?? "—"}</td>
                      <td className="small">{node.software_version ?? "—"}</td>
                      <td className="small">{formatTime(node.first_seen)}</td>
                      <td className="small nowrap">
                        {node.last_seen ? formatAgo(node.last_seen, now) : "now"}{" "}
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
                    <details>
                      <summary>before / after</summary>
                      <pre className="json">{JSON.stringify(record.details, null, 2)}</pre>
                    </details>
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
