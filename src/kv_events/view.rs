//! A route's targets' KV indexes as the balancer reads them.

use std::sync::Arc;

use rolter_balancer::KvBlockView;

use super::index::KvIndex;

/// The [`KvBlockView`] of one route: target `i`'s provider's index, or
/// `None` for a target whose provider has no `kv_events` (always neutral),
/// and the model the target sends (`None` for a passthrough group member,
/// which sends the request's own, [`RouteContext::adapter`]): the index
/// keys a LoRA adapter's blocks under the adapter.
///
/// [`RouteContext::adapter`]: rolter_balancer::RouteContext::adapter
/// Built with the route's snapshot from [`super::KvIndexRegistry::index`];
/// the indexes outlive the snapshot, so the view stays valid across the
/// service's reconfigurations.
#[derive(Debug, Clone, Default)]
pub struct KvTargetsView {
    targets: Vec<Option<Arc<KvIndex>>>,
    models: Vec<Option<String>>,
}

impl KvTargetsView {
    /// One entry per route target, in the route's order: its index and the
    /// model it sends.
    pub fn new(targets: Vec<Option<Arc<KvIndex>>>, models: Vec<Option<String>>) -> Self {
        KvTargetsView { targets, models }
    }
}

impl KvBlockView for KvTargetsView {
    fn resident_fraction(
        &self,
        target: usize,
        token_ids: &[u32],
        adapter: Option<&str>,
    ) -> Option<f64> {
        let index = self.targets.get(target)?.as_ref()?;
        // A target that sends a fixed model is keyed by it; a passthrough
        // one by what the request named.
        let model = self
            .models
            .get(target)
            .and_then(Option::as_deref)
            .or(adapter);
        match model {
            Some(model) => index.resident_leading_fraction_for_model(token_ids, model),
            None => index.resident_leading_fraction(token_ids),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv_events::decode::{BatchEntry, BlockStored, EventBatch, KvEvent};
    use crate::kv_events::index::{KvIndexOptions, KvIndexSettings};

    #[test]
    fn each_target_reads_its_own_index_and_unknown_targets_are_neutral() {
        let index = Arc::new(KvIndex::new("gpu-a", KvIndexOptions::default()));
        let writer = index
            .configure(KvIndexSettings {
                block_size: 2,
                data_parallel_size: 1,
            })
            .remove(0);
        writer.record_message();
        writer.apply(&EventBatch {
            ts: 0.0,
            entries: vec![BatchEntry::Event(KvEvent::BlockStored(BlockStored::plain(
                &[1],
                None,
                &[7, 8],
                2,
            )))],
            data_parallel_rank: None,
        });
        let view = KvTargetsView::new(vec![None, Some(index)], vec![None, Some("base".into())]);
        assert_eq!(view.resident_fraction(0, &[7, 8, 9, 10], None), None);
        assert_eq!(view.resident_fraction(1, &[7, 8, 9, 10], None), Some(0.5));
        assert_eq!(
            view.resident_fraction(2, &[7, 8], None),
            None,
            "out of range"
        );
    }

    #[test]
    fn an_adapters_blocks_answer_requests_for_that_adapter_only() {
        let index = Arc::new(KvIndex::new("gpu-a", KvIndexOptions::default()));
        let writer = index
            .configure(KvIndexSettings {
                block_size: 2,
                data_parallel_size: 1,
            })
            .remove(0);
        writer.record_message();
        let mut stored = BlockStored::plain(&[1], None, &[7, 8], 2);
        stored.lora_name = Some("sql-lora".into());
        writer.apply(&EventBatch {
            ts: 0.0,
            entries: vec![BatchEntry::Event(KvEvent::BlockStored(stored))],
            data_parallel_rank: None,
        });
        // A target configured to send the adapter, and a passthrough one.
        let view = KvTargetsView::new(
            vec![Some(Arc::clone(&index)), Some(Arc::clone(&index))],
            vec![Some("sql-lora".into()), None],
        );
        assert_eq!(view.resident_fraction(0, &[7, 8], None), Some(1.0));
        assert_eq!(
            view.resident_fraction(1, &[7, 8], Some("sql-lora")),
            Some(1.0)
        );
        assert_eq!(
            view.resident_fraction(1, &[7, 8], Some("base-model")),
            Some(0.0),
            "the base model's chain holds nothing"
        );
        assert_eq!(view.resident_fraction(1, &[7, 8], None), Some(0.0));
    }
}
