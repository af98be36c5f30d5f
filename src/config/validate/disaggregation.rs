//! `disaggregation` of a route: the prefill and decode pools, their
//! strategies and the handshake between them.

use rolter_balancer::StrategyKind;

use super::super::file;
use super::super::{Disaggregation, PdProtocol, RouteTarget};
use super::providers::ProviderEntry;
use super::Validator;

/// A validated `disaggregation` split in two: the decode pool, which
/// becomes the route's own strategy and targets, and the rest.
pub(super) struct Pools {
    pub(super) decode_strategy: Option<StrategyKind>,
    /// Where the decode targets are written, and as written.
    pub(super) decode: (String, Option<Vec<file::TargetEntry>>),
    pub(super) disaggregation: Option<Disaggregation>,
}

impl Validator<'_> {
    /// Route `i`'s `disaggregation`.
    pub(super) fn disaggregation(
        &mut self,
        i: usize,
        table: file::DisaggregationTable,
        route_model: Option<&str>,
        providers: &[ProviderEntry],
    ) -> Pools {
        let at = |field: &str| format!("routes[{i}].disaggregation.{field}");
        let errors_before = self.errors.len();
        let protocol = self
            .required(&at("protocol"), table.protocol)
            .and_then(|name| {
                let protocol = PdProtocol::from_name(&name);
                if protocol.is_none() {
                    self.error(
                        at("protocol"),
                        format!("unknown protocol {name:?} (known: vllm, sglang)"),
                    );
                }
                protocol
            });
        let prefill_strategy = self.strategy(
            &at("prefill_strategy"),
            Some(
                table
                    .prefill_strategy
                    .as_deref()
                    .unwrap_or(file::DEFAULT_PREFILL_STRATEGY),
            ),
        );
        let decode_strategy = self.strategy(
            &at("decode_strategy"),
            Some(
                table
                    .decode_strategy
                    .as_deref()
                    .unwrap_or(file::DEFAULT_DECODE_STRATEGY),
            ),
        );
        let min_prefill_tokens = table.min_prefill_tokens.unwrap_or(0);
        if min_prefill_tokens > file::MAX_MIN_PREFILL_TOKENS {
            self.error(
                at("min_prefill_tokens"),
                format!(
                    "must be between 0 and {} (got {min_prefill_tokens})",
                    file::MAX_MIN_PREFILL_TOKENS
                ),
            );
        }
        let prefill = self.target_list(
            &at("prefill"),
            table.prefill,
            route_model,
            prefill_strategy,
            providers,
        );
        if protocol == Some(PdProtocol::Sglang) {
            self.bootstrap_ports(&at("prefill"), &prefill, providers);
        }
        let disaggregation = match (protocol, prefill_strategy) {
            (Some(protocol), Some(prefill_strategy)) if self.errors.len() == errors_before => {
                Some(Disaggregation {
                    protocol,
                    prefill,
                    prefill_strategy,
                    min_prefill_tokens,
                })
            }
            _ => None,
        };
        Pools {
            decode_strategy,
            decode: (at("decode"), table.decode),
            disaggregation,
        }
    }

    /// SGLang's decode engines meet a prefill engine at its bootstrap
    /// server: every prefill provider must name its port.
    fn bootstrap_ports(
        &mut self,
        field: &str,
        prefill: &[RouteTarget],
        providers: &[ProviderEntry],
    ) {
        for (j, target) in prefill.iter().enumerate() {
            let port = providers
                .iter()
                .find(|p| p.slug == target.provider)
                .and_then(|p| p.valid.as_ref())
                .map(|p| p.bootstrap_port);
            if port == Some(None) {
                self.error(
                    format!("{field}[{j}].provider"),
                    format!(
                        "provider {:?} has no bootstrap_port: an SGLang decode engine reaches its prefill engine through that bootstrap server",
                        target.provider
                    ),
                );
            }
        }
    }
}
