//! What `/admin/routes` answers: the running snapshot's routes and groups,
//! each balancer's report, and every target's live state (load, health,
//! breaker, parking, engine readings, KV-index and LMCache freshness, this
//! route's own traffic). The admin listener answers it; a gateway pushes the
//! same document to its control node (`fleet/telemetry.rs`), whose
//! dashboard sums it over gateways.

use std::sync::atomic::Ordering;

use rolter_balancer::BalancerReport;
use serde::Serialize;
use utoipa::ToSchema;

use crate::snapshot::Snapshot;
use crate::state::GatewayState;
use crate::tracker::TargetLoad;

/// The `/admin/routes` answer of `state` running `snapshot`.
pub fn answer<'a>(state: &GatewayState, snapshot: &'a Snapshot) -> RoutesAnswer<'a> {
    let now = crate::clock::now_ms();
    let sources = EngineSources::read(state, snapshot, now);
    let routes: Vec<RouteView<'_>> = snapshot
        .routes()
        .iter()
        .map(|route| RouteView {
            model: &route.model,
            strategy: route.strategy.as_str(),
            reads_weights: route.strategy.reads_weights(),
            health_panic: route.metrics.health_panic.load(Ordering::Relaxed),
            tokenizer: route.tokenizer.as_ref().map(TokenizerView::of),
            token_sources: token_sources(&route.metrics),
            queued: route.queue.len(),
            report: ReportView::from(route.balancer.report()),
            targets: target_views(route, &sources, now),
            prefill: route.prefill.as_ref().map(|pool| PrefillView {
                protocol: pool.protocol.as_str(),
                strategy: pool.route.strategy.as_str(),
                min_prefill_tokens: pool.min_prefill_tokens,
                split: pool.counts.split.get(),
                decode_only: pool.counts.decode_only.get(),
                prefill_failed: pool.counts.prefill_failed.get(),
                targets: target_views(&pool.route, &sources, now),
                report: ReportView::from(pool.route.balancer.report()),
            }),
        })
        .collect();
    let mut groups: Vec<GroupView<'_>> = snapshot
        .groups()
        .map(|group| GroupView {
            slug: &group.slug,
            strategy: group.strategy.as_str(),
            tokenizer: group.tokenizer.as_ref().map(TokenizerView::of),
            token_sources: token_sources(&group.metrics),
            report: ReportView::from(group.balancer.report()),
            members: group
                .members
                .iter()
                .zip(&group.member_stats)
                .filter_map(|(m, stats)| {
                    let provider = snapshot.provider(&m.provider)?;
                    let model = m.model.as_deref().unwrap_or(crate::tracker::ANY_MODEL);
                    Some(TargetView::new(
                        provider,
                        model,
                        m.weight,
                        (stats, None),
                        &sources,
                        now,
                    ))
                })
                .collect(),
        })
        .collect();
    groups.sort_by(|a, b| a.slug.cmp(b.slug));
    RoutesAnswer {
        version: snapshot.version,
        node_id: snapshot.node_id(),
        last_reload: state.last_reload(),
        routes,
        groups,
        addressed_routes: snapshot.addressed_routes(),
    }
}

/// The live state of `route`'s targets, with this route's traffic.
fn target_views<'a>(
    route: &'a crate::snapshot::Route,
    sources: &EngineSources,
    now: u64,
) -> Vec<TargetView<'a>> {
    route
        .targets
        .iter()
        .map(|t| {
            TargetView::new(
                &t.provider,
                &t.id.model,
                t.weight,
                (&t.stats, Some(t.metrics.traffic())),
                sources,
                now,
            )
        })
        .collect()
}

/// `GET /admin/routes`: the running snapshot's routes and groups, their
/// balancers' reports and every target's live state.
#[derive(Serialize, ToSchema)]
pub struct RoutesAnswer<'a> {
    version: u64,
    /// This node's `[control_plane] node_id` ("standalone" without one).
    node_id: String,
    /// What the last configuration change did; `None` before the first
    /// after start.
    last_reload: Option<crate::state::LastReload>,
    routes: Vec<RouteView<'a>>,
    groups: Vec<GroupView<'a>>,
    /// Routes kept for `<group>/<model>` and `<provider>/<model>` addresses.
    addressed_routes: usize,
}

/// A provider group's balancer and members, as `/admin/routes` lists them.
/// A passthrough member's model is `*`: its counters are its engine's,
/// whatever model requests name through it.
#[derive(Serialize, ToSchema)]
struct GroupView<'a> {
    slug: &'a str,
    strategy: &'static str,
    /// Its `tokenizer`, when it has one.
    tokenizer: Option<TokenizerView>,
    /// Where its requests' routing token ids came from.
    token_sources: Vec<TokenSourceView>,
    members: Vec<TargetView<'a>>,
    report: ReportView,
}

#[derive(Serialize, ToSchema)]
struct RouteView<'a> {
    model: &'a str,
    strategy: &'static str,
    reads_weights: bool,
    /// Active health checks mark every target down and requests are routed
    /// across them anyway (`proxy/select.rs`).
    health_panic: bool,
    /// Its `tokenizer`, when it has one.
    tokenizer: Option<TokenizerView>,
    /// Where its requests' routing token ids came from.
    token_sources: Vec<TokenSourceView>,
    /// Requests waiting in flow control for one of its targets.
    queued: u64,
    /// Its targets: with `prefill`, the decode engines.
    targets: Vec<TargetView<'a>>,
    report: ReportView,
    /// With `disaggregation`: the prefill pool and how requests went.
    prefill: Option<PrefillView<'a>>,
}

/// A disaggregated route's prefill pool.
#[derive(Serialize, ToSchema)]
struct PrefillView<'a> {
    /// `vllm` or `sglang`.
    protocol: &'static str,
    strategy: &'static str,
    min_prefill_tokens: u64,
    /// Requests prefilled here and decoded on the route's targets.
    split: u64,
    /// Requests served whole by a decode engine (short prompts, endpoints
    /// that are not split).
    decode_only: u64,
    /// Requests no prefill engine could take.
    prefill_failed: u64,
    targets: Vec<TargetView<'a>>,
    report: ReportView,
}

/// A route's model directory and its prefix cache.
#[derive(Serialize, ToSchema)]
struct TokenizerView {
    /// The directory, as configured.
    dir: String,
    /// Bytes of rendered text tokenized per request.
    budget_bytes: usize,
    has_chat_template: bool,
    /// Tokenized conversations whose beginning was found in the prefix
    /// cache, and those tokenized whole (shared by every route naming the
    /// same directory).
    prefix_cache_hits: u64,
    prefix_cache_misses: u64,
    /// `hits / (hits + misses)`; `null` before the first lookup.
    prefix_cache_hit_rate: Option<f64>,
}

impl TokenizerView {
    fn of(tokens: &crate::tokenization::RouteTokens) -> Self {
        let (hits, misses) = tokens.model.prefix_cache_counts();
        TokenizerView {
            dir: tokens.dir.display().to_string(),
            budget_bytes: tokens.budget_bytes,
            has_chat_template: tokens.model.has_chat_template(),
            prefix_cache_hits: hits,
            prefix_cache_misses: misses,
            prefix_cache_hit_rate: (hits + misses > 0)
                .then(|| hits as f64 / (hits + misses) as f64),
        }
    }
}

/// Requests routed with token ids from one source (and why without).
#[derive(Serialize, ToSchema)]
struct TokenSourceView {
    /// `gateway`, `caller` or `none`.
    source: &'static str,
    /// Why not from the gateway's tokenizer (`no_tokenizer`,
    /// `template_error`, ...), or that only its budget was tokenized
    /// (`over_budget`); empty otherwise.
    reason: &'static str,
    requests: u64,
}

fn token_sources(metrics: &crate::metrics::RouteMetrics) -> Vec<TokenSourceView> {
    crate::tokenization::TokenSource::ALL
        .iter()
        .zip(metrics.token_sources.iter())
        .filter(|(_, counter)| counter.get() > 0)
        .map(|(source, counter)| {
            let (source, reason) = source.labels();
            TokenSourceView {
                source,
                reason,
                requests: counter.get(),
            }
        })
        .collect()
}

/// A balancer's report as JSON: components and signals as objects.
#[derive(Serialize, ToSchema)]
struct ReportView {
    decisions: Option<DecisionsView>,
    /// cache_aware's picks since its balancer was built: warm prompts kept
    /// on the target holding their prefix (`affinity`), moved by the load
    /// guard (`spread`), cold prompts sent by load (`cold`).
    cache_decisions: Option<CacheDecisionsView>,
    targets: Vec<TargetReportView>,
}

#[derive(Serialize, ToSchema)]
struct CacheDecisionsView {
    affinity: u64,
    spread: u64,
    cold: u64,
}

#[derive(Serialize, ToSchema)]
struct DecisionsView {
    engaged: bool,
    blend: u64,
    fallback: u64,
    exploration: u64,
}

/// One target of a balancer's report; fields a strategy does not track
/// are `null`.
#[derive(Serialize, ToSchema)]
struct TargetReportView {
    /// The blended score the strategy last ranked this target by.
    score: Option<f64>,
    /// Named components of that score ("latency", "cost", "load").
    components: std::collections::BTreeMap<&'static str, f64>,
    /// The raw signals behind them ("latency_ms", "price", "in_flight").
    signals: std::collections::BTreeMap<&'static str, f64>,
    picks: u64,
    /// The clock reading (ms since start) of the last pick.
    last_pick_ms: Option<u64>,
    /// Size of learned per-target state (prefix-tree characters, adapters).
    learned_size: Option<u64>,
    /// Evictions from that state since the balancer was built.
    evictions: Option<u64>,
}

impl From<BalancerReport> for ReportView {
    fn from(report: BalancerReport) -> Self {
        ReportView {
            decisions: report.decisions.map(|d| DecisionsView {
                engaged: d.engaged,
                blend: d.blend,
                fallback: d.fallback,
                exploration: d.exploration,
            }),
            cache_decisions: report.cache_decisions.map(|d| CacheDecisionsView {
                affinity: d.affinity,
                spread: d.spread,
                cold: d.cold,
            }),
            targets: report
                .targets
                .into_iter()
                .map(|t| TargetReportView {
                    score: t.score,
                    components: t.components.into_iter().collect(),
                    signals: t.signals.into_iter().collect(),
                    picks: t.picks,
                    last_pick_ms: t.last_pick_ms,
                    learned_size: t.learned_size,
                    evictions: t.evictions,
                })
                .collect(),
        }
    }
}

#[derive(Serialize, ToSchema)]
struct TargetView<'a> {
    provider: &'a str,
    model: &'a str,
    weight: u32,
    base_url: &'a str,
    #[serde(flatten)]
    load: TargetLoad,
    /// The provider's active health (true until probes say otherwise).
    healthy: bool,
    /// The status (404, 405) the health probe's path answered: the probe is
    /// misconfigured, and the engine is not judged by it.
    probe_misconfigured: Option<u16>,
    /// Milliseconds until the target is unparked; `None` when not parked.
    parked_until_ms: Option<u64>,
    /// The provider's KV-event index, when it has `kv_events`.
    kv_index: Option<KvIndexView>,
    /// The provider's LMCache signal, when it has `lmcache`.
    lmcache: Option<LmcacheView>,
    /// The load strategies read: the engine's reported running + waiting
    /// plus what this node sent since, never below `in_flight`
    /// (`tracker/engine.rs`); `in_flight` alone without a fresh reading.
    combined_load: u64,
    /// The engine's last reading for this target, and its age; `None`
    /// when its metrics are not read or never answered.
    engine_reading: Option<crate::tracker::ReadingSummary>,
    /// How the provider's `engine_metrics` polls go; `None` when off.
    engine_metrics: Option<crate::tracker::PollSummary>,
    /// The provider's `max_concurrency`, when it has one.
    max_concurrency: Option<u64>,
    /// Why it takes no new request now; `None` when it takes them.
    saturated: Option<crate::tracker::SaturatedBy>,
    /// This route's own traffic to the target (the counters above are the
    /// target's over every route that lists it); `None` for a group's
    /// members, whose routes are built per address.
    route_traffic: Option<crate::metrics::RouteTraffic>,
}

impl<'a> TargetView<'a> {
    fn new(
        provider: &'a crate::snapshot::Provider,
        model: &'a str,
        weight: u32,
        (stats, traffic): (
            &crate::tracker::TargetStats,
            Option<crate::metrics::RouteTraffic>,
        ),
        sources: &EngineSources,
        now: u64,
    ) -> Self {
        TargetView {
            provider: &provider.slug,
            model,
            weight,
            base_url: &provider.base_url,
            load: stats.load(),
            healthy: provider.health.is_healthy(),
            probe_misconfigured: provider.health.probe_misconfigured(),
            parked_until_ms: stats
                .parking
                .parked_until(now)
                .map(|until| until.saturating_sub(now)),
            kv_index: sources.kv.get(provider.slug.as_str()).cloned(),
            lmcache: sources.lmcache.get(provider.slug.as_str()).cloned(),
            combined_load: stats.combined_load(now),
            engine_reading: stats.reading(now),
            engine_metrics: stats.engine().poll_summary(now),
            max_concurrency: provider.max_concurrency,
            saturated: stats.saturation(now, &sources.saturation, provider.max_concurrency),
            route_traffic: traffic,
        }
    }
}

/// How fresh a provider's KV-event index is.
#[derive(Serialize, Clone, ToSchema)]
struct KvIndexView {
    /// A subscriber feeds it on this node.
    configured: bool,
    /// At least one rank answers: `precise_cache_aware` scores this provider.
    usable: bool,
    blocks_resident: u64,
    /// Since the newest message over all ranks; `None` before the first.
    last_message_age_ms: Option<u64>,
}

/// How fresh a provider's LMCache signal is.
#[derive(Serialize, Clone, ToSchema)]
struct LmcacheView {
    /// Read recently enough to count: `lmcache_aware` scores this provider.
    fresh: bool,
    occupancy: Option<f64>,
    cache_available: bool,
    age_ms: Option<u64>,
}

/// The KV-index and LMCache readings of the providers that have those
/// sources, by slug, read once per `/admin/routes` answer.
struct EngineSources {
    kv: std::collections::HashMap<String, KvIndexView>,
    lmcache: std::collections::HashMap<String, LmcacheView>,
    saturation: crate::tracker::SaturationPolicy,
}

impl EngineSources {
    fn read(state: &GatewayState, snapshot: &crate::snapshot::Snapshot, now: u64) -> Self {
        let providers = &snapshot.config.providers;
        let kv = providers
            .iter()
            .filter(|p| p.kv_events.is_some())
            .map(|p| {
                let view = match state.learned.kv.get(&p.slug) {
                    Some(index) => {
                        let summary = index.summary();
                        KvIndexView {
                            configured: summary.configured,
                            usable: summary.usable,
                            blocks_resident: summary.blocks_resident,
                            last_message_age_ms: summary
                                .ranks
                                .iter()
                                .filter_map(|r| r.last_message_age_ms)
                                .min(),
                        }
                    }
                    None => KvIndexView {
                        configured: false,
                        usable: false,
                        blocks_resident: 0,
                        last_message_age_ms: None,
                    },
                };
                (p.slug.clone(), view)
            })
            .collect();
        let mut readings: std::collections::HashMap<_, _> =
            state.learned.occupancy.summaries(now).into_iter().collect();
        let lmcache = providers
            .iter()
            .filter(|p| p.lmcache.is_some())
            .map(|p| {
                let view = match readings.remove(&p.slug) {
                    Some(s) => LmcacheView {
                        fresh: s.fresh,
                        occupancy: s.occupancy,
                        cache_available: s.cache_available,
                        age_ms: s.age_ms,
                    },
                    None => LmcacheView {
                        fresh: false,
                        occupancy: None,
                        cache_available: false,
                        age_ms: None,
                    },
                };
                (p.slug.clone(), view)
            })
            .collect();
        EngineSources {
            kv,
            lmcache,
            saturation: snapshot.limits.saturation,
        }
    }
}
