//! Sequence tracking for one data-parallel rank's stream.
//!
//! vLLM numbers every batch a publisher process sends, from 0, and starts
//! again at 0 when the engine restarts. Against the seq it expects next, a
//! message is:
//!
//! - the next one: apply it;
//! - later: events were lost; ask the replay socket from the first missing
//!   seq, and if that cannot cover the gap, clear the rank;
//! - earlier: the engine restarted (clear the rank), unless a replay
//!   already applied it: a replay returns everything buffered from the
//!   requested seq on, so the live copies of batches it covered arrive
//!   afterwards and are skipped as duplicates;
//! - the first one seen: the stream is joined here.
//!
//! The tracker only classifies; the subscriber (`subscriber.rs`) acts.

/// What a message's seq means for the rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The first message seen: the stream is joined here.
    First,
    /// The seq expected next.
    Next,
    /// Batches `missing_from..seq` were lost.
    Gap { missing_from: u64 },
    /// Already applied from a replay.
    Duplicate,
    /// Earlier than expected and not replayed: the engine restarted.
    Restarted,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SequenceTracker {
    next: Option<u64>,
    /// Seqs applied from a replay whose live copies may still arrive.
    replayed: Option<(u64, u64)>,
}

impl SequenceTracker {
    pub fn new() -> Self {
        Self::default()
    }

    /// The seq expected next; `None` before the first message.
    pub fn next_expected(&self) -> Option<u64> {
        self.next
    }

    pub fn classify(&self, seq: u64) -> Verdict {
        match self.next {
            None => Verdict::First,
            Some(next) if seq == next => Verdict::Next,
            Some(next) if seq > next => Verdict::Gap { missing_from: next },
            Some(_) => match self.replayed {
                Some((from, through)) if (from..=through).contains(&seq) => Verdict::Duplicate,
                _ => Verdict::Restarted,
            },
        }
    }

    /// `seq` was applied (live or replayed); the next one is expected.
    pub fn applied(&mut self, seq: u64) {
        self.next = Some(seq.wrapping_add(1));
        if self.replayed.is_some_and(|(_, through)| seq > through) {
            self.replayed = None;
        }
    }

    /// `from..=through` were applied from a replay; live copies of them
    /// that are still queued are duplicates.
    pub fn replayed(&mut self, from: u64, through: u64) {
        debug_assert!(from <= through);
        self.replayed = Some((from, through));
        self.applied(through);
    }

    /// Forgets the stream: the next message is a first one.
    pub fn reset(&mut self) {
        *self = Self::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_order_messages_are_next() {
        let mut tracker = SequenceTracker::new();
        assert_eq!(tracker.classify(5), Verdict::First);
        tracker.applied(5);
        assert_eq!(tracker.next_expected(), Some(6));
        assert_eq!(tracker.classify(6), Verdict::Next);
    }

    #[test]
    fn a_later_seq_is_a_gap_from_the_first_missing_one() {
        let mut tracker = SequenceTracker::new();
        tracker.applied(0);
        assert_eq!(tracker.classify(4), Verdict::Gap { missing_from: 1 });
    }

    #[test]
    fn an_earlier_seq_is_a_restart() {
        let mut tracker = SequenceTracker::new();
        tracker.applied(10);
        assert_eq!(tracker.classify(0), Verdict::Restarted);
        assert_eq!(tracker.classify(10), Verdict::Restarted, "a repeat too");
    }

    #[test]
    fn live_copies_of_replayed_batches_are_duplicates_until_the_stream_passes_them() {
        let mut tracker = SequenceTracker::new();
        tracker.applied(4);
        // Live 9 revealed a gap; replay brought 5..=11.
        tracker.replayed(5, 11);
        assert_eq!(tracker.next_expected(), Some(12));
        assert_eq!(tracker.classify(10), Verdict::Duplicate);
        assert_eq!(tracker.classify(11), Verdict::Duplicate);
        assert_eq!(tracker.classify(3), Verdict::Restarted, "before the replay");
        assert_eq!(tracker.classify(12), Verdict::Next);
        tracker.applied(12);
        assert_eq!(
            tracker.classify(11),
            Verdict::Restarted,
            "the window closed"
        );
    }

    #[test]
    fn reset_forgets_the_stream() {
        let mut tracker = SequenceTracker::new();
        tracker.applied(7);
        tracker.reset();
        assert_eq!(tracker.classify(0), Verdict::First);
    }
}
