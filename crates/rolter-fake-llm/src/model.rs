//! The simulated model: deterministic output, so tests can predict it.
//!
//! Token `i` is `tok{i}`, joined by single spaces (`"tok0 tok1 tok2"`); the
//! space belongs to the following token, as in BPE vocabularies, so streamed
//! deltas concatenate to the non-streamed text. An embedding is eight floats
//! of unit length taken from the SHA-256 of the input, so equal inputs embed
//! equally and different ones (almost surely) do not.

use sha2::{Digest, Sha256};

/// The text of output token `index`.
pub(crate) fn token(index: u32) -> String {
    if index == 0 {
        "tok0".to_owned()
    } else {
        format!(" tok{index}")
    }
}

/// The whole output of `tokens` tokens.
pub(crate) fn generated_text(tokens: u32) -> String {
    (0..tokens).map(token).collect()
}

/// Dimensions of every embedding.
pub(crate) const EMBEDDING_DIMENSIONS: usize = 8;

/// The embedding of one input (its canonical JSON text is hashed).
pub(crate) fn embedding(input: &serde_json::Value) -> [f32; EMBEDDING_DIMENSIONS] {
    let digest = Sha256::digest(input.to_string().as_bytes());
    let mut vector = [0f32; EMBEDDING_DIMENSIONS];
    for (slot, bytes) in vector.iter_mut().zip(digest.chunks_exact(4)) {
        let word = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        *slot = (f64::from(word) / f64::from(u32::MAX) * 2.0 - 1.0) as f32;
    }
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > f32::EPSILON {
        vector.iter_mut().for_each(|x| *x /= norm);
    }
    vector
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streamed_tokens_concatenate_to_the_text() {
        assert_eq!(generated_text(3), "tok0 tok1 tok2");
        assert_eq!(generated_text(0), "");
    }

    #[test]
    fn embeddings_are_deterministic_unit_vectors() {
        let a = embedding(&serde_json::json!("hello"));
        assert_eq!(a, embedding(&serde_json::json!("hello")));
        assert_ne!(a, embedding(&serde_json::json!("world")));
        let norm: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4);
    }
}
