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

    /// The model `target`'s engine serves a request as: a target that sends
    /// a fixed model is keyed by it, a passthrough one by what the request
    /// named.
    fn model<'a>(&'a self, target: usize, adapter: Option<&'a str>) -> Option<&'a str> {
        self.models
            .get(target)
            .and_then(Option::as_deref)
            .or(adapter)
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
        match self.model(target, adapter) {
            Some(model) => index.resident_leading_fraction_for_model(token_ids, model),
            None => index.resident_leading_fraction(token_ids),
        }
    }

    fn note_routed(&self, target: usize, token_ids: &[u32], adapter: Option<&str>) {
        if let Some(index) = self.targets.get(target).and_then(Option::as_ref) {
            index.note_pending(token_ids, self.model(target, adapter));
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
    fn a_routed_requests_blocks_count_at_half_until_its_events_arrive() {
        let index = Arc::new(KvIndex::new("gpu-a", KvIndexOptions::default()));
        let writer = index
            .configure(KvIndexSettings {
                block_size: 2,
                data_parallel_size: 1,
            })
            .remove(0);
        writer.record_message();
        let stored = |tokens: &[u32], parent: Option<u64>, hash: u64| EventBatch {
            ts: 0.0,
            entries: vec![BatchEntry::Event(KvEvent::BlockStored(BlockStored::plain(
                &[hash],
                parent,
                tokens,
                2,
            )))],
            data_parallel_rank: None,
        };
        writer.apply(&stored(&[7, 8], None, 1));
        let view = KvTargetsView::new(vec![Some(Arc::clone(&index))], vec![None]);
        let request = [7, 8, 9, 10, 11, 12];
        assert_eq!(view.resident_fraction(0, &request, None), Some(1.0 / 3.0));
        // Routed there: the two blocks after the confirmed one are pending.
        view.note_routed(0, &request, None);
        assert_eq!(index.pending_blocks(), 3);
        assert_eq!(view.resident_fraction(0, &request, None), Some(2.0 / 3.0));
        // The engine confirms the second block: it counts whole.
        writer.apply(&stored(&[9, 10], Some(1), 2));
        assert_eq!(view.resident_fraction(0, &request, None), Some(2.5 / 3.0));
        // A cleared cache takes the pending blocks with it.
        writer.apply(&EventBatch {
            ts: 0.0,
            entries: vec![BatchEntry::Event(KvEvent::AllBlocksCleared)],
            data_parallel_rank: None,
        });
        assert_eq!(index.pending_blocks(), 0);
        assert_eq!(view.resident_fraction(0, &request, None), Some(0.0));
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
