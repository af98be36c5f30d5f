//! A set of target indices (which targets an attempt already tried).

use smallvec::SmallVec;

/// Bit set over target indices; no allocation up to 128 targets.
#[derive(Clone, Debug, Default)]
pub struct TargetSet {
    words: SmallVec<[u64; 2]>,
}

impl TargetSet {
    pub fn insert(&mut self, index: usize) {
        let word = index / 64;
        if self.words.len() <= word {
            self.words.resize(word + 1, 0);
        }
        self.words[word] |= 1 << (index % 64);
    }

    pub fn remove(&mut self, index: usize) {
        if let Some(word) = self.words.get_mut(index / 64) {
            *word &= !(1 << (index % 64));
        }
    }

    pub fn contains(&self, index: usize) -> bool {
        self.words
            .get(index / 64)
            .is_some_and(|word| word & (1 << (index % 64)) != 0)
    }

    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_indices_past_one_word() {
        let mut set = TargetSet::default();
        for i in [0, 63, 64, 65, 129] {
            assert!(!set.contains(i));
            set.insert(i);
            assert!(set.contains(i));
        }
        assert_eq!(set.len(), 5);
        set.remove(64);
        assert!(!set.contains(64) && set.contains(65));
        assert!(!set.contains(1000));
    }
}
