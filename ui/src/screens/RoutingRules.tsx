import { useApp, useConfig } from "../lib/hooks";
import { formatPercent, formatPrice } from "../lib/format";
import { groupView, routeView, type RuleView } from "../lib/routing";
import { describeStrategy, weightsIgnoredNote } from "../lib/strategies";
import { href } from "../lib/router";
import {
  Empty,
  FileManagedBadge,
  Link,
  LoadState,
  PageHead,
  ReadOnlyNotice,
  StrategyBadge,
} from "../components/common";

const SHARE_COLOURS = ["#1f5fd1", "#37a169", "#d69e2e", "#805ad5", "#dd6b20", "#319795", "#e53e3e", "#718096"];

export function RoutingRules() {
  const { canEdit } = useApp();
  const config = useConfig();
  return (
    <>
      <PageHead
        title="Routing rules"
        actions={
          canEdit && (
            <>
              <Link className="button primary" to={href.newRoute()}>
                New route
              </Link>
              <Link className="button" to={href.newGroup()}>
                New provider group
              </Link>
            </>
          )
        }
      >
        Each route sends a public model to its targets with a strategy; each provider group balances
        <code> group-slug/model</code> addresses over its members.
      </PageHead>
      <ReadOnlyNotice />
      <LoadState loaded={config} what="the routing rules">
        {(data) => (
          <>
            <h2>Routes</h2>
            {data.routes.data.length === 0 && <Empty>No routes yet.</Empty>}
            <div className="cards">
              {data.routes.data.map((route) => {
                const rule = routeView(route, data.providers.data, data.catalog.data);
                return (
                  <RuleCard
                    key={rule.key}
                    rule={rule}
                    fileManaged={data.routes.file_managed.includes(rule.key)}
                    editTo={href.editRoute(rule.key)}
                    sheetTo={href.model(rule.key)}
                  />
                );
              })}
            </div>
            <h2>Provider groups</h2>
            {data.groups.data.length === 0 && <Empty>No provider groups.</Empty>}
            <div className="cards">
              {data.groups.data.map((group) => {
                const rule = groupView(group, data.providers.data, data.catalog.data);
                return (
                  <RuleCard
                    key={rule.key}
                    rule={rule}
                    title={`${rule.key}/<model>`}
                    fileManaged={data.groups.file_managed.includes(rule.key)}
                    editTo={href.editGroup(rule.key)}
                  />
                );
              })}
            </div>
          </>
        )}
      </LoadState>
    </>
  );
}

function RuleCard(props: { rule: RuleView; title?: string; fileManaged: boolean; editTo: string; sheetTo?: string }) {
  const { canEdit } = useApp();
  const { rule } = props;
  const editable = canEdit && !props.fileManaged;
  return (
    <article className="card" data-testid={`rule-card-${rule.key}`}>
      <div className="card-title">
        <h3>{props.sheetTo ? <Link to={props.sheetTo}>{props.title ?? rule.key}</Link> : props.title ?? rule.key}</h3>
        <StrategyBadge strategy={rule.strategy} />
      </div>
      <div className="muted small">{describeStrategy(rule.strategy)}</div>
      {rule.sharesStated && (
        <div className="share-bar" aria-hidden="true">
          {rule.targets.map((t, i) => (
            <span key={i} style={{ width: `${(t.share ?? 0) * 100}%`, background: SHARE_COLOURS[i % SHARE_COLOURS.length] }} />
          ))}
        </div>
      )}
      <ul className="targets">
        {rule.targets.map((t, i) => (
          <li key={i}>
            <span>
              {rule.sharesStated && (
                <span
                  style={{
                    display: "inline-block",
                    width: 8,
                    height: 8,
                    borderRadius: 2,
                    marginRight: 6,
                    background: SHARE_COLOURS[i % SHARE_COLOURS.length],
                  }}
                />
              )}
              <strong>{t.providerName}</strong> <span className="muted">→</span>{" "}
              <span className="mono">{t.upstreamModel ?? "requested model"}</span>
              {t.price && (
                <span className="faint small">
                  {" "}
                  · {formatPrice(t.price.input_per_mtok)} / {formatPrice(t.price.output_per_mtok)} per Mtok
                </span>
              )}
            </span>
            {rule.sharesStated ? (
              <span className="nowrap" data-testid="traffic-share">
                {formatPercent(t.share)} <span className="faint small">w {t.weight}</span>
              </span>
            ) : null}
          </li>
        ))}
      </ul>
      {!rule.sharesStated && (
        <div className="muted small" data-testid="weights-ignored">
          {weightsIgnoredNote(rule.strategy)}
        </div>
      )}
      <div className="card-foot">
        <span>{props.fileManaged && <FileManagedBadge />}</span>
        <Link className="button" to={props.editTo}>
          {editable ? "Edit" : "View"}
        </Link>
      </div>
    </article>
  );
}
