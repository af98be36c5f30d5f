//! A model directory: its tokenizer, its chat template, its special tokens.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use aho_corasick::{AhoCorasick, MatchKind};
use indexmap::IndexMap;
use minijinja::value::Value;
use serde_json::Value as Json;
use tokenizers::Tokenizer;
use xxhash_rust::xxh3::Xxh3;

use crate::messages::{self, ChatRequest, CUT_MARK};
use crate::prefix_cache::{PrefixCache, LEADING_CHECKPOINTS, TRAILING_CHECKPOINTS};
use crate::template::{ChatTemplate, TemplateSource};
use crate::{LoadError, TokenIds, TokenizeError};

/// Special-token variables transformers hands every template.
const SPECIAL_TOKEN_FIELDS: [&str; 7] = [
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
];

/// Template variables the gateway sets itself, never from
/// `chat_template_kwargs`.
const RESERVED_KWARGS: [&str; 4] = ["messages", "tools", "documents", "add_generation_prompt"];

/// Tokens of prefixes kept per model directory (4 bytes each: 32 MiB).
const PREFIX_CACHE_TOKENS: usize = 8 << 20;

/// When a cut lands with no whitespace in this many bytes before it, the
/// text is cut mid-word and the tokens of its last bytes are not trusted.
const CUT_SEARCH_BYTES: usize = 4096;
/// Tokens dropped after a mid-word cut.
const UNSTABLE_TAIL_TOKENS: usize = 8;

/// A model's tokenizer and chat template, loaded from its directory.
pub struct ModelTokenizer {
    dir: PathBuf,
    tokenizer: Tokenizer,
    template: Option<ChatTemplate>,
    /// `bos_token`, `eos_token`, ... as template variables.
    special_tokens: Vec<(&'static str, String)>,
    /// Added tokens that split text cleanly (no stripping around them, not
    /// normalized), where the prefix cache may cut.
    splitters: Option<AhoCorasick>,
    cache: PrefixCache,
}

impl std::fmt::Debug for ModelTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelTokenizer")
            .field("dir", &self.dir)
            .field("template", &self.template)
            .finish_non_exhaustive()
    }
}

impl ModelTokenizer {
    /// Loads `dir`: `tokenizer.json`, `tokenizer_config.json`, and
    /// `chat_template.jinja` when present (it wins over the config's
    /// `chat_template`, as in transformers).
    pub fn load(dir: &Path) -> Result<Self, LoadError> {
        if !dir.is_dir() {
            return Err(LoadError::NotADirectory(dir.to_path_buf()));
        }
        let tokenizer_file = dir.join("tokenizer.json");
        let text = read(&tokenizer_file)?;
        let tokenizer: Tokenizer =
            text.parse()
                .map_err(
                    |e: Box<dyn std::error::Error + Send + Sync>| LoadError::Tokenizer {
                        file: tokenizer_file.clone(),
                        reason: e.to_string(),
                    },
                )?;
        let config_file = dir.join("tokenizer_config.json");
        let config: Json =
            serde_json::from_str(&read(&config_file)?).map_err(|e| LoadError::Config {
                file: config_file.clone(),
                field: None,
                reason: e.to_string(),
            })?;
        let mut special_tokens = Vec::new();
        for field in SPECIAL_TOKEN_FIELDS {
            match config.get(field) {
                None | Some(Json::Null) => {}
                Some(Json::String(token)) => special_tokens.push((field, token.clone())),
                Some(Json::Object(token)) => match token.get("content") {
                    Some(Json::String(content)) => special_tokens.push((field, content.clone())),
                    _ => {
                        return Err(LoadError::Config {
                            file: config_file,
                            field: Some(field.to_string()),
                            reason: "an added token must have a string `content`".into(),
                        })
                    }
                },
                Some(_) => {
                    return Err(LoadError::Config {
                        file: config_file,
                        field: Some(field.to_string()),
                        reason: "must be a string, a token object or null".into(),
                    })
                }
            }
        }
        let template = load_template(dir, &config_file, &config)?;
        let splitters = clean_splitters(&tokenizer);
        Ok(ModelTokenizer {
            dir: dir.to_path_buf(),
            tokenizer,
            template,
            special_tokens,
            splitters,
            cache: PrefixCache::new(PREFIX_CACHE_TOKENS),
        })
    }

    /// The directory it was loaded from.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether chat requests can be rendered.
    pub fn has_chat_template(&self) -> bool {
        self.template.is_some()
    }

    /// Prefix-cache lookups that found a prefix, and those that did not.
    pub fn prefix_cache_counts(&self) -> (u64, u64) {
        self.cache.counts()
    }

    /// The text vLLM's chat endpoint would tokenize for `request`, whole.
    pub fn render_chat(&self, request: &ChatRequest<'_>) -> Result<String, TokenizeError> {
        Ok(self.render_bounded(request, usize::MAX)?.0)
    }

    /// The token ids vLLM computes for a chat request (template rendered
    /// with the generation prompt, tokenized without adding special tokens
    /// again), for at most the rendered text's first `budget` bytes.
    pub fn chat_token_ids(
        &self,
        request: &ChatRequest<'_>,
        budget: usize,
    ) -> Result<TokenIds, TokenizeError> {
        let (rendered, cut) = self.render_bounded(request, budget)?;
        let (text, clean) = stable_prefix(&rendered, budget, !cut);
        let mut ids = self.encode_with_cache(text)?;
        if !clean {
            ids = ids[..ids.len().saturating_sub(UNSTABLE_TAIL_TOKENS)].into();
        }
        Ok(TokenIds {
            ids,
            truncated: text.len() < rendered.len() || cut,
        })
    }

    /// The token ids vLLM computes for a completions `prompt` string
    /// (special tokens added, as its `/v1/completions` does), for at most
    /// the prompt's first `budget` bytes.
    pub fn prompt_token_ids(&self, prompt: &str, budget: usize) -> Result<TokenIds, TokenizeError> {
        let (text, clean_cut) = stable_prefix(prompt, budget, true);
        let encoding = self
            .tokenizer
            .encode_fast(text, true)
            .map_err(|e| TokenizeError::Tokenizer(e.to_string()))?;
        let mut ids = encoding.get_ids();
        // A cut prompt loses the special tokens the post-processor would
        // have added at its end (an EOS); routing reads only the front.
        if !clean_cut {
            ids = &ids[..ids.len().saturating_sub(UNSTABLE_TAIL_TOKENS)];
        }
        Ok(TokenIds {
            ids: ids.into(),
            truncated: text.len() < prompt.len(),
        })
    }

    /// Renders `request` with content past `budget` bytes left out; true
    /// when something was (the text then ends where the cut content did).
    fn render_bounded(
        &self,
        request: &ChatRequest<'_>,
        budget: usize,
    ) -> Result<(String, bool), TokenizeError> {
        let template = self.template.as_ref().ok_or(TokenizeError::NoTemplate)?;
        let prepared = messages::prepare(request.messages, template.content_as_parts, budget)?;
        let mut context: IndexMap<Value, Value> = IndexMap::new();
        for (name, token) in &self.special_tokens {
            context.insert(Value::from(*name), Value::from(token.as_str()));
        }
        context.insert(Value::from("messages"), prepared.messages);
        let tools = match request.tools {
            Some(raw) => messages::tools(raw)?,
            None => Value::from(()),
        };
        context.insert(Value::from("tools"), tools);
        context.insert(Value::from("documents"), Value::from(()));
        // vLLM passes on only the kwargs the template reads, and the
        // request's own `add_generation_prompt` over a kwarg of that name.
        if let Some(raw) = request.chat_template_kwargs {
            for (name, value) in messages::kwargs(raw)? {
                if template.reads(&name) && !RESERVED_KWARGS.contains(&name.as_str()) {
                    context.insert(Value::from(name), value);
                }
            }
        }
        context.insert(
            Value::from("add_generation_prompt"),
            Value::from(request.add_generation_prompt.unwrap_or(true)),
        );
        let mut text = template.render(
            Value::from(context),
            request.messages.len().min(budget) + 4096,
        )?;
        if prepared.cut {
            if let Some(at) = text.find(CUT_MARK) {
                text.truncate(at);
            }
        }
        Ok((text, prepared.cut))
    }

    /// `text` tokenized as vLLM tokenizes a rendered chat, reusing the ids
    /// of the longest prefix tokenized before (see `prefix_cache.rs`).
    fn encode_with_cache(&self, text: &str) -> Result<Arc<[u32]>, TokenizeError> {
        let Some(splitters) = &self.splitters else {
            return self.encode(text);
        };
        // Digests of the text before each clean added token, in order.
        let mut digest = Xxh3::new();
        let mut checkpoints: Vec<(usize, u64)> = Vec::new();
        let mut hashed = 0;
        for found in splitters.find_iter(text) {
            let at = found.start();
            if at == 0 {
                continue;
            }
            digest.update(&text.as_bytes()[hashed..at]);
            hashed = at;
            checkpoints.push((at, digest.digest()));
        }
        let hit = checkpoints
            .iter()
            .rev()
            .find_map(|&(at, key)| self.cache.get(key).map(|ids| (at, ids)));
        self.cache.record(hit.is_some());
        let (start, prefix) = match &hit {
            Some((at, (ids, len))) => (*at, &ids[..*len]),
            None => (0, &[][..]),
        };
        let encoding = self
            .tokenizer
            .encode(&text[start..], false)
            .map_err(|e| TokenizeError::Tokenizer(e.to_string()))?;
        let base = prefix.len();
        // One allocation, shared by the request and the entries below.
        let ids: Arc<[u32]> = prefix.iter().chain(encoding.get_ids()).copied().collect();
        // Remember the ids before this text's first and last checkpoints
        // past the prefix it reused, all sharing one copy of the ids.
        let offsets = encoding.get_offsets();
        let fresh: Vec<(usize, u64)> = checkpoints
            .into_iter()
            .filter(|&(at, _)| at > start)
            .collect();
        let trailing_from = fresh.len().saturating_sub(TRAILING_CHECKPOINTS);
        let chosen = fresh
            .iter()
            .enumerate()
            .filter(|(i, _)| *i < LEADING_CHECKPOINTS || *i >= trailing_from)
            .map(|(_, checkpoint)| *checkpoint);
        for (at, key) in chosen {
            // The token that starts exactly at the checkpoint.
            if let Ok(index) = offsets.binary_search_by_key(&(at - start), |&(s, _)| s) {
                self.cache.insert(key, Arc::clone(&ids), base + index);
            }
        }
        Ok(ids)
    }

    fn encode(&self, text: &str) -> Result<Arc<[u32]>, TokenizeError> {
        self.tokenizer
            .encode_fast(text, false)
            .map(|encoding| encoding.get_ids().into())
            .map_err(|e| TokenizeError::Tokenizer(e.to_string()))
    }
}

/// The longest prefix of `text` within `limit` bytes whose tokens are
/// those of the whole text: all of it when it fits and `ends_naturally`
/// (it is not itself a cut), else up to a whitespace that follows a
/// non-whitespace character (a pre-token boundary for byte-level and
/// Metaspace tokenizers). The flag is false when no such boundary lies
/// near the end: the text is then cut mid-word.
fn stable_prefix(text: &str, limit: usize, ends_naturally: bool) -> (&str, bool) {
    if ends_naturally && text.len() <= limit {
        return (text, true);
    }
    let mut end = limit.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let bytes = text.as_bytes();
    let floor = end.saturating_sub(CUT_SEARCH_BYTES).max(1);
    for at in (floor..end).rev() {
        if bytes[at].is_ascii_whitespace() && !bytes[at - 1].is_ascii_whitespace() {
            return (&text[..at], true);
        }
    }
    (&text[..end], false)
}

/// The chat template: `chat_template.jinja`, else the config's
/// `chat_template` (a string, or a list of named templates of which
/// "default" is the one chat uses). `None` for a model without one.
fn load_template(
    dir: &Path,
    config_file: &Path,
    config: &Json,
) -> Result<Option<ChatTemplate>, LoadError> {
    let file = dir.join("chat_template.jinja");
    if file.exists() {
        let source = read(&file)?;
        let origin = TemplateSource {
            file: file.display().to_string(),
            field: None,
        };
        return ChatTemplate::compile(&source, &origin)
            .map(Some)
            .map_err(LoadError::Template);
    }
    let source = match config.get("chat_template") {
        None | Some(Json::Null) => return Ok(None),
        Some(Json::String(source)) => source.clone(),
        Some(Json::Array(named)) => {
            let default = named
                .iter()
                .find(|t| t.get("name").and_then(Json::as_str) == Some("default"));
            match default
                .and_then(|t| t.get("template"))
                .and_then(Json::as_str)
            {
                Some(source) => source.to_string(),
                None => {
                    return Err(LoadError::Config {
                        file: config_file.to_path_buf(),
                        field: Some("chat_template".into()),
                        reason: "a list of templates must hold one named \"default\"".into(),
                    })
                }
            }
        }
        Some(_) => {
            return Err(LoadError::Config {
                file: config_file.to_path_buf(),
                field: Some("chat_template".into()),
                reason: "must be a string or a list of {name, template}".into(),
            })
        }
    };
    let origin = TemplateSource {
        file: config_file.display().to_string(),
        field: Some("chat_template".into()),
    };
    ChatTemplate::compile(&source, &origin)
        .map(Some)
        .map_err(LoadError::Template)
}

/// A matcher for the added tokens text splits at cleanly; `None` when
/// the tokenizer has none.
fn clean_splitters(tokenizer: &Tokenizer) -> Option<AhoCorasick> {
    let tokens: Vec<String> = tokenizer
        .get_added_tokens_decoder()
        .into_values()
        .filter(|t| {
            !t.lstrip && !t.rstrip && !t.single_word && !t.normalized && !t.content.is_empty()
        })
        .map(|t| t.content)
        .collect();
    if tokens.is_empty() {
        return None;
    }
    AhoCorasick::builder()
        .match_kind(MatchKind::LeftmostLongest)
        .build(tokens)
        .ok()
}

fn read(file: &Path) -> Result<String, LoadError> {
    std::fs::read_to_string(file).map_err(|e| LoadError::Read {
        file: file.to_path_buf(),
        reason: e.to_string(),
    })
}
