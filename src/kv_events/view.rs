//! A route's targets' KV indexes as the balancer reads them.

use std::sync::Arc;

use rolter_balancer::KvBlockView;

use super::index::KvIndex;

/// The [`KvBlockView`] of one route: target `i`'s provider's index, or
/// `None` for a target whose provider has no `kv_events` (always neutral).
/// Built with the route's snapshot from [`super::KvIndexRegistry::index`];
/// the indexes outlive the snapshot, so the view stays valid across the
/// service's reconfigurations.
#[derive(Debug, Clone, Default)]
pub struct KvTargetsView {
    targets: Vec<Option<Arc<KvIndex>>>,
}

impl KvTargetsView {
    /// One entry per route target, in the route's order.
    pub fn new(targets: Vec<Option<Arc<KvIndex>>>) -> Self {
        KvTargetsView { targets }
    }
}

impl KvBlockView for KvTargetsView {
    fn resident_fraction(&self, target: usize, token_ids: &[u32]) -> Option<f64> {
        self.targets
            .get(target)?
            .as_ref()?
            .resident_leading_fraction(token_ids)
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
        let view = KvTargetsView::new(vec![None, Some(index)]);
        assert_eq!(view.resident_fraction(0, &[7, 8, 9, 10]), None);
        assert_eq!(view.resident_fraction(1, &[7, 8, 9, 10]), Some(0.5));
        assert_eq!(view.resident_fraction(2, &[7, 8]), None, "out of range");
    }
}
