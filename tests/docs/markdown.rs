//! Reading the Markdown of the docs: reference tables, fenced blocks,
//! headings and links.

use std::collections::BTreeSet;
use std::path::PathBuf;

use crate::root;

/// The text of every `code span` in `line`.
pub fn code_spans(line: &str) -> Vec<String> {
    line.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// A row of a reference table, with the heading it stands under.
#[derive(Debug, Clone)]
pub struct Row {
    pub heading: String,
    pub cells: Vec<String>,
}

/// The body rows of every Markdown table whose header's first cell is
/// `first_column`, in order.
pub fn table_rows(markdown: &str, first_column: &str) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut heading = String::new();
    let mut in_table = false;
    let mut in_fence = false;
    for line in markdown.lines() {
        if line.starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        if line.starts_with('#') {
            heading = line.to_string();
            in_table = false;
            continue;
        }
        if !line.starts_with('|') {
            in_table = false;
            continue;
        }
        let cells: Vec<String> = line
            .trim()
            .trim_matches('|')
            .split('|')
            .map(|c| c.trim().to_string())
            .collect();
        if cells.first().map(String::as_str) == Some(first_column) {
            in_table = true;
            continue;
        }
        if !in_table
            || cells
                .iter()
                .all(|c| c.chars().all(|ch| ch == '-' || ch == ':'))
        {
            continue;
        }
        rows.push(Row {
            heading: heading.clone(),
            cells,
        });
    }
    rows
}

/// The first fenced block of `lang` after the heading `heading`.
pub fn fenced_block(markdown: &str, heading: &str, lang: &str) -> String {
    let start = markdown
        .find(heading)
        .unwrap_or_else(|| panic!("no heading {heading:?}"));
    let rest = &markdown[start..];
    let open = format!("```{lang}\n");
    let begin = rest
        .find(&open)
        .unwrap_or_else(|| panic!("no ```{lang} block after {heading:?}"))
        + open.len();
    let end = rest[begin..].find("```").expect("unterminated block") + begin;
    rest[begin..end].to_string()
}

/// GitHub's anchor of a heading.
fn anchor(heading: &str) -> String {
    heading
        .trim_start_matches('#')
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

pub fn anchors(markdown: &str) -> BTreeSet<String> {
    let mut in_fence = false;
    markdown
        .lines()
        .filter(|l| {
            if l.starts_with("```") {
                in_fence = !in_fence;
            }
            !in_fence && l.starts_with('#')
        })
        .map(anchor)
        .collect()
}

#[test]
fn documentation_links_resolve() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    files.push(root().join("README.md"));
    files.push(root().join("docker/README.md"));
    let mut broken = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for piece in text.split("](").skip(1) {
            let Some(target) = piece.split(')').next() else {
                continue;
            };
            if target.contains("://") || target.starts_with("mailto:") || target.contains(' ') {
                continue;
            }
            let (path, fragment) = target.split_once('#').unwrap_or((target, ""));
            let resolved = if path.is_empty() {
                file.clone()
            } else {
                file.parent().unwrap().join(path)
            };
            if !resolved.exists() {
                broken.push(format!("{}: {target}", file.display()));
                continue;
            }
            if !fragment.is_empty() && resolved.extension().is_some_and(|e| e == "md") {
                let target_text = std::fs::read_to_string(&resolved).unwrap();
                if !anchors(&target_text).contains(fragment) {
                    broken.push(format!("{}: {target} (no such heading)", file.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{broken:#?}");
}
