//! The strategies this crate provides, and the build step that turns a
//! configured strategy name plus a route's targets into a balancer.
//!
//! A strategy is a [`StrategyKind`] (the configuration variant) plus
//! [`build`]: everything a strategy needs arrives through the
//! [`BuildContext`], so nothing has to be injected into a built balancer
//! later. Each strategy lives in its own file under `strategy/`, and each is
//! also constructible directly (tests, benches, callers that know what they
//! want).

mod consistent_hash;
mod power_of_two;
mod random;
mod round_robin;
mod weighted;

#[cfg(test)]
mod properties;

use std::fmt;
use std::str::FromStr;

use crate::LoadBalancer;

pub use consistent_hash::ConsistentHash;
pub use power_of_two::PowerOfTwo;
pub use random::Random;
pub use round_robin::RoundRobin;
pub use weighted::WeightedRoundRobin;

/// A configured load-balancing strategy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StrategyKind {
    /// Sequential rotation.
    RoundRobin,
    /// Uniform random.
    Random,
    /// The less loaded of two random targets.
    PowerOfTwo,
    /// Smooth weighted round-robin over the targets' weights.
    Weighted,
    /// Hash ring keyed by session, else by conversation digest.
    ConsistentHash,
}

impl StrategyKind {
    /// Every strategy, in documentation order.
    pub const ALL: &'static [StrategyKind] = &[
        StrategyKind::RoundRobin,
        StrategyKind::Random,
        StrategyKind::PowerOfTwo,
        StrategyKind::Weighted,
        StrategyKind::ConsistentHash,
    ];

    /// The name used in configuration, metrics and [`LoadBalancer::name`].
    pub fn as_str(self) -> &'static str {
        match self {
            StrategyKind::RoundRobin => "round_robin",
            StrategyKind::Random => "random",
            StrategyKind::PowerOfTwo => "power_of_two",
            StrategyKind::Weighted => "weighted",
            StrategyKind::ConsistentHash => "consistent_hash",
        }
    }

    /// The strategy configured as `name`; the inverse of [`StrategyKind::as_str`].
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|kind| kind.as_str() == name)
    }

    /// Whether the strategy consults the targets' weights. Per the spec only
    /// weighted, pipeline and adaptive do; of those only weighted exists here
    /// today. Everything else is built from the target count alone, so a
    /// weight on one of its targets is stored and never read — the dashboard
    /// says so, and must learn of any strategy added to this list.
    pub fn reads_weights(self) -> bool {
        matches!(self, StrategyKind::Weighted)
    }
}

impl fmt::Display for StrategyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for StrategyKind {
    type Err = UnknownStrategy;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Self::from_name(name).ok_or_else(|| UnknownStrategy {
            name: name.to_owned(),
        })
    }
}

/// A strategy name that names no [`StrategyKind`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownStrategy {
    /// The name as it was given.
    pub name: String,
}

impl fmt::Display for UnknownStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown load-balancing strategy {:?} (known: ",
            self.name
        )?;
        for (i, kind) in StrategyKind::ALL.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(kind.as_str())?;
        }
        f.write_str(")")
    }
}

impl std::error::Error for UnknownStrategy {}

/// One target as a strategy sees it at build time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TargetSpec<'a> {
    /// Stable identity, `provider-slug/upstream-model`. Learned state that
    /// must survive reordering (hash-ring positions) is keyed by it, never by
    /// the index.
    pub id: &'a str,
    /// Relative share of traffic; read only by strategies for which
    /// [`StrategyKind::reads_weights`] holds. `0` takes no share.
    pub weight: u32,
}

/// Everything a strategy may need at build time.
#[derive(Clone, Copy, Debug)]
pub struct BuildContext<'a> {
    /// The route's targets, in the order pick indices refer to.
    pub targets: &'a [TargetSpec<'a>],
    /// Seed for the random strategies. Give each balancer its own (a fixed
    /// seed in tests makes picks reproducible).
    pub seed: u64,
}

/// Builds the balancer for `kind` over `ctx.targets`. Build it once per route
/// per configuration snapshot and share it: a balancer's state is what makes
/// it balance.
pub fn build(kind: StrategyKind, ctx: &BuildContext) -> Box<dyn LoadBalancer> {
    let n = ctx.targets.len();
    match kind {
        StrategyKind::RoundRobin => Box::new(RoundRobin::new(n)),
        StrategyKind::Random => Box::new(Random::from_seed(n, ctx.seed)),
        StrategyKind::PowerOfTwo => Box::new(PowerOfTwo::from_seed(n, ctx.seed)),
        StrategyKind::Weighted => {
            let weights: Vec<u32> = ctx.targets.iter().map(|t| t.weight).collect();
            Box::new(WeightedRoundRobin::new(&weights))
        }
        StrategyKind::ConsistentHash => {
            let ids: Vec<&str> = ctx.targets.iter().map(|t| t.id).collect();
            Box::new(ConsistentHash::new(&ids))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RouteContext;

    #[test]
    fn strategy_names_round_trip() {
        for &kind in StrategyKind::ALL {
            assert_eq!(StrategyKind::from_name(kind.as_str()), Some(kind));
            assert_eq!(kind.as_str().parse::<StrategyKind>(), Ok(kind));
            assert_eq!(kind.to_string(), kind.as_str());
        }
    }

    #[test]
    fn strategy_names_are_the_configuration_names() {
        let names: Vec<&str> = StrategyKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "round_robin",
                "random",
                "power_of_two",
                "weighted",
                "consistent_hash"
            ]
        );
    }

    #[test]
    fn unknown_strategy_error_names_it_and_lists_the_known_ones() {
        assert_eq!(StrategyKind::from_name("least_busy"), None);
        assert_eq!(StrategyKind::from_name("Round_Robin"), None);
        let err = "least_busy".parse::<StrategyKind>().unwrap_err();
        assert_eq!(err.name, "least_busy");
        assert_eq!(
            err.to_string(),
            "unknown load-balancing strategy \"least_busy\" (known: round_robin, random, \
             power_of_two, weighted, consistent_hash)"
        );
    }

    #[test]
    fn only_weighted_reads_weights() {
        for &kind in StrategyKind::ALL {
            assert_eq!(
                kind.reads_weights(),
                kind == StrategyKind::Weighted,
                "{kind}"
            );
        }
    }

    #[test]
    fn built_balancer_reports_its_strategy_name() {
        let targets = [
            TargetSpec {
                id: "a/m",
                weight: 1,
            },
            TargetSpec {
                id: "b/m",
                weight: 1,
            },
        ];
        let ctx = BuildContext {
            targets: &targets,
            seed: 1,
        };
        for &kind in StrategyKind::ALL {
            assert_eq!(build(kind, &ctx).name(), kind.as_str());
        }
    }

    #[test]
    fn built_weighted_balancer_honours_target_weights() {
        let targets = [
            TargetSpec {
                id: "a/m",
                weight: 3,
            },
            TargetSpec {
                id: "b/m",
                weight: 1,
            },
        ];
        let lb = build(
            StrategyKind::Weighted,
            &BuildContext {
                targets: &targets,
                seed: 0,
            },
        );
        let picks: Vec<usize> = (0..8)
            .map(|_| lb.pick(&RouteContext::default(), &[0, 0]).unwrap())
            .collect();
        assert_eq!(picks, [0, 0, 1, 0, 0, 0, 1, 0]);
    }

    #[test]
    fn built_balancer_over_no_targets_picks_nothing() {
        let ctx = BuildContext {
            targets: &[],
            seed: 0,
        };
        for &kind in StrategyKind::ALL {
            assert_eq!(build(kind, &ctx).pick(&RouteContext::default(), &[]), None);
        }
    }
}
