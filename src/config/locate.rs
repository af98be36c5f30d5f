//! Maps field paths (`routes[1].targets[0].provider`) to line numbers, and
//! byte offsets back to field paths, using the spans `toml_edit` keeps when
//! it parses a document.
//!
//! serde gives validation the values but not where they were written, so the
//! file is parsed a second time, with `toml_edit`, only to answer "which
//! line?". A path that does not exist in the file (a missing field, a
//! default) is located at the nearest parent that does: a missing
//! `routes[0].targets` points at the `[[routes]]` header.

use std::ops::Range;

use toml_edit::{Array, ArrayOfTables, Document, InlineTable, Item, Table, Value};

/// One step of a field path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment<'p> {
    Key(&'p str),
    Index(usize),
}

/// Answers line questions about one document. Built once per parse.
pub struct Locator<'t> {
    text: &'t str,
    /// `None` when the text is not valid TOML; then nothing is located.
    document: Option<Document<&'t str>>,
}

/// A position in the document tree.
#[derive(Clone, Copy)]
enum Node<'d> {
    Table(&'d Table),
    InlineTable(&'d InlineTable),
    Array(&'d Array),
    ArrayOfTables(&'d ArrayOfTables),
    Scalar(&'d Value),
    Empty,
}

impl<'d> Node<'d> {
    fn of_item(item: &'d Item) -> Self {
        match item {
            Item::None => Node::Empty,
            Item::Value(value) => Node::of_value(value),
            Item::Table(table) => Node::Table(table),
            Item::ArrayOfTables(array) => Node::ArrayOfTables(array),
        }
    }

    fn of_value(value: &'d Value) -> Self {
        match value {
            Value::Array(array) => Node::Array(array),
            Value::InlineTable(table) => Node::InlineTable(table),
            scalar => Node::Scalar(scalar),
        }
    }

    /// Where this node is written. For a standard table that is its header
    /// only; the root table's span is empty and is not reported.
    fn span(self) -> Option<Range<usize>> {
        let span = match self {
            Node::Table(table) => table.span(),
            Node::InlineTable(table) => table.span(),
            Node::Array(array) => array.span(),
            Node::ArrayOfTables(array) => array.span(),
            Node::Scalar(value) => value.span(),
            Node::Empty => None,
        };
        span.filter(|span| !span.is_empty())
    }

    /// The child under `key` and where its key is written.
    fn child(self, key: &str) -> Option<(Option<Range<usize>>, Node<'d>)> {
        let (key, item) = match self {
            Node::Table(table) => table.get_key_value(key)?,
            Node::InlineTable(table) => table.get_key_value(key)?,
            _ => return None,
        };
        Some((key.span(), Node::of_item(item)))
    }

    fn element(self, index: usize) -> Option<Node<'d>> {
        match self {
            Node::Array(array) => array.get(index).map(Node::of_value),
            Node::ArrayOfTables(array) => array.get(index).map(Node::Table),
            _ => None,
        }
    }

    /// Every child with its path segment and key span, in file order.
    fn children(self) -> Vec<(Segment<'d>, Option<Range<usize>>, Node<'d>)> {
        match self {
            Node::Table(table) => table
                .iter()
                .map(|(name, item)| {
                    let span = table.key(name).and_then(|key| key.span());
                    (Segment::Key(name), span, Node::of_item(item))
                })
                .collect(),
            Node::InlineTable(table) => table
                .iter()
                .map(|(name, value)| {
                    let span = table.key(name).and_then(|key| key.span());
                    (Segment::Key(name), span, Node::of_value(value))
                })
                .collect(),
            Node::Array(array) => array
                .iter()
                .enumerate()
                .map(|(i, value)| (Segment::Index(i), None, Node::of_value(value)))
                .collect(),
            Node::ArrayOfTables(array) => array
                .iter()
                .enumerate()
                .map(|(i, table)| (Segment::Index(i), None, Node::Table(table)))
                .collect(),
            Node::Scalar(_) | Node::Empty => Vec::new(),
        }
    }
}

impl<'t> Locator<'t> {
    pub fn new(text: &'t str) -> Self {
        Locator {
            text,
            document: Document::parse(text).ok(),
        }
    }

    /// A locator for a document that has no text (a fleet document): it
    /// locates nothing.
    pub fn empty() -> Locator<'static> {
        Locator {
            text: "",
            document: None,
        }
    }

    /// The top-level keys written in the file (`server`, `providers`, ...),
    /// in file order; none when the text is not valid TOML.
    pub fn top_level_keys(&self) -> Vec<&str> {
        self.document.as_ref().map_or_else(Vec::new, |document| {
            document.as_table().iter().map(|(key, _)| key).collect()
        })
    }

    /// The 1-based line where `path` is written, else where its nearest
    /// written parent is; `None` when not even the first segment is written.
    pub fn line_of(&self, path: &str) -> Option<usize> {
        let document = self.document.as_ref()?;
        let mut node = Node::Table(document.as_table());
        let mut best: Option<Range<usize>> = None;
        for segment in parse_path(path) {
            let (key_span, next) = match segment {
                Segment::Key(key) => match node.child(key) {
                    Some(found) => found,
                    None => break,
                },
                Segment::Index(index) => match node.element(index) {
                    Some(next) => (None, next),
                    None => break,
                },
            };
            // The key is where a reader looks for a field; a table's header
            // or a value's own span is next best.
            if let Some(span) = key_span.or_else(|| next.span()) {
                best = Some(span);
            }
            node = next;
        }
        best.map(|span| line_at(self.text, span.start))
    }

    /// The deepest field path whose key or value covers byte `offset`, e.g.
    /// for the span of a serde error.
    pub fn path_at(&self, offset: usize) -> Option<String> {
        let document = self.document.as_ref()?;
        let mut segments = Vec::new();
        if search(Node::Table(document.as_table()), offset, &mut segments) {
            Some(format_path(&segments))
        } else {
            None
        }
    }
}

/// Depth-first search for the deepest node at `offset`. A standard table's
/// span covers only its header, so every body is searched, not only those
/// whose span matches.
fn search<'d>(node: Node<'d>, offset: usize, path: &mut Vec<Segment<'d>>) -> bool {
    for (segment, key_span, child) in node.children() {
        let covers = |span: &Option<Range<usize>>| {
            span.as_ref()
                .is_some_and(|span| span.start <= offset && offset < span.end.max(span.start + 1))
        };
        path.push(segment);
        if search(child, offset, path) {
            return true;
        }
        // An array of tables spans from its first header to its last, which
        // may enclose unrelated tables; only its entries' headers count.
        let own_span = match child {
            Node::ArrayOfTables(_) => None,
            _ => child.span(),
        };
        if covers(&key_span) || covers(&own_span) {
            return true;
        }
        path.pop();
    }
    false
}

fn parse_path(path: &str) -> Vec<Segment<'_>> {
    let mut segments = Vec::new();
    for part in path.split('.') {
        let (name, mut indices) = match part.find('[') {
            Some(open) => (&part[..open], &part[open..]),
            None => (part, ""),
        };
        if !name.is_empty() {
            segments.push(Segment::Key(name));
        }
        while let Some(rest) = indices.strip_prefix('[') {
            let Some((number, after)) = rest.split_once(']') else {
                return segments;
            };
            let Ok(index) = number.parse() else {
                return segments;
            };
            segments.push(Segment::Index(index));
            indices = after;
        }
    }
    segments
}

fn format_path(segments: &[Segment<'_>]) -> String {
    let mut path = String::new();
    for segment in segments {
        match segment {
            Segment::Key(key) => {
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(key);
            }
            Segment::Index(index) => {
                path.push('[');
                path.push_str(&index.to_string());
                path.push(']');
            }
        }
    }
    path
}

/// 1-based line of byte `offset` (clamped to the text).
pub fn line_at(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    1 + text.as_bytes()[..end]
        .iter()
        .filter(|b| **b == b'\n')
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# comment
[server]
listen = ["0.0.0.0:8080"]

[[providers]]
name = "gpu-a"
base_url = "http://a:8000"

[[providers]]
name = "gpu-b"

[[routes]]
model = "m"
targets = [
  { provider = "gpu-a" },
  { provider = "gpu-b", weight = 2 },
]
"#;

    #[test]
    fn line_of_finds_keys_in_tables_and_arrays_of_tables() {
        let locator = Locator::new(TEXT);
        assert_eq!(locator.line_of("server"), Some(2));
        assert_eq!(locator.line_of("server.listen"), Some(3));
        assert_eq!(locator.line_of("server.listen[0]"), Some(3));
        assert_eq!(locator.line_of("providers[0]"), Some(5));
        assert_eq!(locator.line_of("providers[1].name"), Some(10));
        assert_eq!(locator.line_of("routes[0].model"), Some(13));
    }

    #[test]
    fn line_of_finds_keys_in_inline_tables_on_their_own_lines() {
        let locator = Locator::new(TEXT);
        assert_eq!(locator.line_of("routes[0].targets"), Some(14));
        assert_eq!(locator.line_of("routes[0].targets[1]"), Some(16));
        assert_eq!(locator.line_of("routes[0].targets[1].weight"), Some(16));
    }

    #[test]
    fn line_of_falls_back_to_the_nearest_written_parent() {
        let locator = Locator::new(TEXT);
        assert_eq!(locator.line_of("providers[1].base_url"), Some(9));
        assert_eq!(locator.line_of("routes[0].targets[0].model"), Some(15));
        assert_eq!(locator.line_of("routes[0].targets[7]"), Some(14));
        assert_eq!(locator.line_of("timeouts.connect_ms"), None);
        assert_eq!(locator.line_of(""), None);
    }

    #[test]
    fn path_at_names_the_deepest_field_at_an_offset() {
        let locator = Locator::new(TEXT);
        let at = |needle: &str| locator.path_at(TEXT.find(needle).unwrap());
        assert_eq!(at("weight").as_deref(), Some("routes[0].targets[1].weight"));
        assert_eq!(at("2 }").as_deref(), Some("routes[0].targets[1].weight"));
        assert_eq!(at("\"http").as_deref(), Some("providers[0].base_url"));
        assert_eq!(at("0.0.0.0").as_deref(), Some("server.listen[0]"));
        assert_eq!(at("[[routes]]").as_deref(), Some("routes[0]"));
        assert_eq!(locator.path_at(0), None);
    }

    #[test]
    fn dotted_keys_and_invalid_text_are_handled() {
        let text = "server.role = \"x\"\n\nretry.max_retries = 3\n";
        let locator = Locator::new(text);
        assert_eq!(locator.line_of("retry.max_retries"), Some(3));
        assert_eq!(locator.line_of("server.role"), Some(1));
        assert_eq!(Locator::new("[broken").line_of("server"), None);
        assert_eq!(Locator::new("[broken").path_at(3), None);
    }

    #[test]
    fn top_level_keys_are_the_written_sections_in_file_order() {
        assert_eq!(
            Locator::new(TEXT).top_level_keys(),
            ["server", "providers", "routes"]
        );
        let dotted = Locator::new("retry.max_retries = 3\n[[api_keys]]\nname = \"k\"\n");
        assert_eq!(dotted.top_level_keys(), ["retry", "api_keys"]);
        assert!(Locator::new("[broken").top_level_keys().is_empty());
        let empty = Locator::empty();
        assert!(empty.top_level_keys().is_empty());
        assert_eq!(empty.line_of("server.role"), None);
        assert_eq!(empty.path_at(0), None);
    }

    #[test]
    fn line_at_counts_newlines_and_clamps() {
        assert_eq!(line_at("a\nb\nc", 0), 1);
        assert_eq!(line_at("a\nb\nc", 2), 2);
        assert_eq!(line_at("a\nb\nc", 99), 3);
        assert_eq!(line_at("", 5), 1);
    }
}
