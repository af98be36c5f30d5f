//! Model directories loaded once and shared by every snapshot that names
//! them.
//!
//! A reload rebuilds every route, but a tokenizer of a real model takes
//! tens of milliseconds and megabytes to load: the registry hands back the
//! same [`ModelTokenizer`] (prefix cache and all) while its files are
//! unchanged, and loads it again when one changed (size or modification
//! time). [`TokenizerRegistry::prune`] drops the directories no snapshot
//! holds any more, so the registry holds what the live configurations name.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use crate::{LoadError, ModelTokenizer};

const FILES: [&str; 3] = [
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
];

type Fingerprint = [Option<(u64, SystemTime)>; 3];

#[derive(Debug, Default)]
pub struct TokenizerRegistry {
    /// Held while one directory loads: reloads are rare and serial, and the
    /// request path never takes it.
    loaded: Mutex<HashMap<PathBuf, (Fingerprint, Arc<ModelTokenizer>)>>,
}

impl TokenizerRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    /// The tokenizer of `dir`, loaded now or shared from an earlier load of
    /// the same, unchanged files.
    pub fn load(&self, dir: &Path) -> Result<Arc<ModelTokenizer>, LoadError> {
        let key = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
        let fingerprint = fingerprint(&key);
        let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((seen, tokenizer)) = loaded.get(&key) {
            if *seen == fingerprint {
                return Ok(Arc::clone(tokenizer));
            }
        }
        let tokenizer = Arc::new(ModelTokenizer::load(dir)?);
        loaded.insert(key, (fingerprint, Arc::clone(&tokenizer)));
        Ok(tokenizer)
    }

    /// Drops the directories nothing else holds any more (no live
    /// snapshot names them); call it once a new snapshot is in place.
    pub fn prune(&self) {
        let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        loaded.retain(|_, (_, tokenizer)| Arc::strong_count(tokenizer) > 1);
    }

    /// Directories held.
    pub fn len(&self) -> usize {
        self.loaded.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn fingerprint(dir: &Path) -> Fingerprint {
    FILES.map(|name| {
        let meta = std::fs::metadata(dir.join(name)).ok()?;
        Some((meta.len(), meta.modified().ok()?))
    })
}
