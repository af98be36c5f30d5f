//! A model's chat template, compiled once, rendered as transformers renders it.
//!
//! transformers compiles chat templates with Jinja2 in a sandbox with
//! `trim_blocks` and `lstrip_blocks` on, the loop-control extension, its
//! own `tojson` (Python's `json.dumps`, [`crate::pyjson`]) and two globals,
//! `raise_exception(message)` and `strftime_now(format)`; it passes the
//! tokenizer's special tokens (`bos_token`, `eos_token`, ...) as variables.
//! minijinja with its Python-compatibility methods (`.items()`,
//! `.startswith()`, `.strip()`, ...) renders the same templates; what
//! Jinja2 prints differently (`True`, `None`, a list's or dict's repr) is
//! written the Python way by [`python_formatter`].

use std::sync::Arc;

use minijinja::value::{Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind, Output, State};

/// The name the template is registered under: no extension, so no
/// auto-escaping (transformers escapes nothing either).
const NAME: &str = "chat_template";

/// Where a template's source came from, for messages.
#[derive(Debug, Clone)]
pub struct TemplateSource {
    /// The file holding it: `tokenizer_config.json` or `chat_template.jinja`.
    pub file: String,
    /// The field within the file (`chat_template`), or `None` for a template file.
    pub field: Option<String>,
}

/// Why a template does not compile: its file and field, the line within
/// the template, and minijinja's reason.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{file}{field}: the chat template does not compile at template line {line}: {reason}", field = .field.as_deref().map(|f| format!(", field `{f}`")).unwrap_or_default())]
pub struct CompileError {
    pub file: String,
    pub field: Option<String>,
    pub line: usize,
    pub reason: String,
}

/// A compiled chat template.
#[derive(Clone)]
pub struct ChatTemplate {
    env: Arc<Environment<'static>>,
    /// The variables the template reads that nothing in it defines: the
    /// only `chat_template_kwargs` vLLM passes on.
    undeclared: Arc<std::collections::HashSet<String>>,
    /// The template iterates over a message's `content` (vLLM's "openai"
    /// content format): content stays a list of parts. Otherwise text parts
    /// are joined into one string first ("string" format).
    pub(crate) content_as_parts: bool,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("content_as_parts", &self.content_as_parts)
            .finish_non_exhaustive()
    }
}

impl ChatTemplate {
    /// Compiles `source`; the error names `origin` and the template line.
    pub fn compile(source: &str, origin: &TemplateSource) -> Result<Self, CompileError> {
        let mut env = Environment::new();
        let mut syntax = minijinja::syntax::SyntaxConfig::builder();
        syntax.trim_blocks(true).lstrip_blocks(true);
        env.set_syntax(syntax.build().map_err(|e| CompileError {
            file: origin.file.clone(),
            field: origin.field.clone(),
            line: 0,
            reason: e.to_string(),
        })?);
        env.set_unknown_method_callback(python_methods);
        env.add_filter("trim", python_trim);
        env.set_formatter(python_formatter);
        env.add_filter("tojson", crate::pyjson::tojson);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_template_owned(NAME, source.to_string())
            .map_err(|e| CompileError {
                file: origin.file.clone(),
                field: origin.field.clone(),
                line: e.line().unwrap_or(0),
                reason: e.detail().unwrap_or(&e.to_string()).to_string(),
            })?;
        let undeclared = env
            .get_template(NAME)
            .map(|t| t.undeclared_variables(false))
            .unwrap_or_default();
        Ok(ChatTemplate {
            undeclared: Arc::new(undeclared),
            env: Arc::new(env),
            content_as_parts: iterates_content(source),
        })
    }

    /// Whether the template reads the variable `name` without defining it.
    pub fn reads(&self, name: &str) -> bool {
        self.undeclared.contains(name)
    }

    /// Renders with `context` (messages, tools, special tokens, kwargs)
    /// into a buffer of `size_hint` bytes to begin with: minijinja's own
    /// `render` starts small and doubles, and a chat's text is about as long
    /// as its messages' JSON (at 32 KiB the copies cost ~4% of a warm turn).
    pub fn render(&self, context: Value, size_hint: usize) -> Result<String, RenderError> {
        let template = self
            .env
            .get_template(NAME)
            .map_err(|e| RenderError(e.to_string()))?;
        let mut out = Vec::with_capacity(size_hint);
        template
            .render_captured_to(context, &mut out)
            .map(drop)
            .map_err(|e| {
                let reason = match e.kind() {
                    ErrorKind::InvalidOperation
                        if e.detail().is_some_and(|d| d.starts_with(RAISED)) =>
                    {
                        e.detail().unwrap_or_default()[RAISED.len()..].to_string()
                    }
                    _ => e.to_string(),
                };
                RenderError(reason)
            })?;
        String::from_utf8(out).map_err(|e| RenderError(e.to_string()))
    }
}

/// A template that failed on a request: its own `raise_exception`, or an
/// operation Jinja refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the chat template failed: {0}")]
pub struct RenderError(pub String);

const RAISED: &str = "raise_exception: ";

fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(
        ErrorKind::InvalidOperation,
        format!("{RAISED}{message}"),
    ))
}

/// `strftime_now("%d %b %Y")`: the gateway's local date, as the engine's.
fn strftime_now(format: String) -> Result<Value, Error> {
    use std::fmt::Write;
    let mut out = String::new();
    write!(out, "{}", chrono::Local::now().format(&format)).map_err(|_| {
        Error::new(
            ErrorKind::InvalidOperation,
            format!("strftime_now: bad format {format:?}"),
        )
    })?;
    Ok(Value::from(out))
}

/// Python's whitespace (`str.isspace`): Rust's, plus the four ASCII
/// separators U+001C..U+001F.
fn python_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Jinja2's `trim`: Python's `str.strip(chars)`.
fn python_trim(text: String, chars: Option<String>) -> String {
    match chars {
        Some(chars) => text.trim_matches(|c| chars.contains(c)).to_string(),
        None => text.trim_matches(python_space).to_string(),
    }
}

/// Python's methods on values (minijinja-contrib's), with `strip`,
/// `lstrip` and `rstrip` on Python's whitespace.
fn python_methods(
    state: &mut State<'_, '_>,
    value: &Value,
    method: &str,
    args: &[Value],
) -> Result<Value, Error> {
    if let (Some(text), [] | [_]) = (value.as_str(), args) {
        let chars = args.first().and_then(Value::as_str);
        let strip = |c: char| chars.map_or_else(|| python_space(c), |set| set.contains(c));
        match method {
            "strip"
                if args
                    .first()
                    .is_none_or(|a| a.is_none() || a.as_str().is_some()) =>
            {
                return Ok(Value::from(text.trim_matches(strip)))
            }
            "lstrip"
                if args
                    .first()
                    .is_none_or(|a| a.is_none() || a.as_str().is_some()) =>
            {
                return Ok(Value::from(text.trim_start_matches(strip)))
            }
            "rstrip"
                if args
                    .first()
                    .is_none_or(|a| a.is_none() || a.as_str().is_some()) =>
            {
                return Ok(Value::from(text.trim_end_matches(strip)))
            }
            _ => {}
        }
    }
    minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
}

/// Whether the template loops over a message's content, as vLLM's
/// content-format detection asks: `{% for part in message['content'] %}`,
/// `{% for c in msg.content %}`, `{%- for item in content %}`.
fn iterates_content(source: &str) -> bool {
    let mut rest = source;
    while let Some(at) = rest.find("for ") {
        let clause = &rest[at + 4..];
        let end = clause.find("%}").unwrap_or(clause.len());
        let clause = &clause[..end];
        if let Some((_, iterable)) = clause.split_once(" in ") {
            let iterable = iterable.trim().trim_end_matches(['-', '+']).trim_end();
            if iterable == "content"
                || iterable.ends_with(".content")
                || iterable.ends_with("['content']")
                || iterable.ends_with("[\"content\"]")
            {
                return true;
            }
        }
        rest = &rest[at + 4..];
    }
    false
}

/// Prints a value as Jinja2 prints it: `True`, `False`, `None`, and
/// Python's repr for lists and dicts; the rest as minijinja does.
fn python_formatter(
    out: &mut Output<'_>,
    state: &mut State<'_, '_>,
    value: &Value,
) -> Result<(), Error> {
    match value.kind() {
        ValueKind::Bool | ValueKind::None | ValueKind::Seq | ValueKind::Map => {
            let mut text = String::new();
            python_repr(&mut text, value, 0)?;
            out.write_str(&text).map_err(Error::from)
        }
        _ => minijinja::escape_formatter(out, state, value),
    }
}

fn python_repr(out: &mut String, value: &Value, depth: usize) -> Result<(), Error> {
    if depth > 64 {
        out.push_str("...");
        return Ok(());
    }
    match value.kind() {
        ValueKind::None => out.push_str("None"),
        ValueKind::Undefined => {}
        ValueKind::Bool => out.push_str(if value.is_true() { "True" } else { "False" }),
        ValueKind::String => python_str_repr(out, value.as_str().unwrap_or("")),
        ValueKind::Number => {
            let shown = value.to_string();
            match f64::try_from(value.clone()) {
                Ok(f) if shown.contains(['.', 'e', 'E']) => {
                    out.push_str(&crate::pyjson::python_float(f))
                }
                _ => out.push_str(&shown),
            }
        }
        ValueKind::Seq | ValueKind::Iterable => {
            out.push('[');
            for (i, item) in value.try_iter()?.enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                python_repr(out, &item, depth + 1)?;
            }
            out.push(']');
        }
        ValueKind::Map => {
            out.push('{');
            for (i, key) in value.try_iter()?.enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                python_repr(out, &key, depth + 1)?;
                out.push_str(": ");
                python_repr(out, &value.get_item(&key)?, depth + 1)?;
            }
            out.push('}');
        }
        _ => out.push_str(&value.to_string()),
    }
    Ok(())
}

/// `repr(str)`: single quotes unless the text has a single quote and no
/// double quote.
fn python_str_repr(out: &mut String, text: &str) {
    let quote = if text.contains('\'') && !text.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

#[cfg(test)]
mod tests {
    use super::*;
    use minijinja::context;

    fn origin() -> TemplateSource {
        TemplateSource {
            file: "tokenizer_config.json".into(),
            field: Some("chat_template".into()),
        }
    }

    fn render(source: &str, ctx: Value) -> Result<String, RenderError> {
        ChatTemplate::compile(source, &origin())
            .unwrap()
            .render(ctx, 0)
    }

    #[test]
    fn blocks_are_trimmed_as_transformers_compiles_them() {
        let source = "{% for m in messages %}\n  {% if m.role == 'user' %}\n[{{ m.content }}]\n  {% endif %}\n{% endfor %}";
        let messages: Value = serde_json::from_str(
            r#"[{"role":"user","content":"a"},{"role":"system","content":"b"}]"#,
        )
        .unwrap();
        assert_eq!(render(source, context! { messages }).unwrap(), "[a]\n");
    }

    #[test]
    fn python_values_print_as_jinja2_prints_them() {
        let value: Value = serde_json::from_str(r#"{"a":[1,2.0,true,null,"it's"]}"#).unwrap();
        assert_eq!(
            render(
                "{{ v }}|{{ flag }}|{{ none }}",
                context! { v => value, flag => false }
            )
            .unwrap(),
            r#"{'a': [1, 2.0, True, None, "it's"]}|False|None"#
        );
    }

    #[test]
    fn raise_exception_and_python_methods() {
        let error =
            render("{{ raise_exception('roles must alternate') }}", context! {}).unwrap_err();
        assert_eq!(error.0, "roles must alternate");
        assert_eq!(
            render("{{ ' x '.strip() }}{% for k, v in d.items() %}{{ k }}={{ v }}{% endfor %}{% for i in [1,2,3] %}{% if i == 2 %}{% break %}{% endif %}{{ i }}{% endfor %}", context! { d => Value::from(std::collections::BTreeMap::from([("k", 1)])) }).unwrap(),
            "xk=11"
        );
    }

    #[test]
    fn a_broken_template_names_its_file_field_and_line() {
        let error = ChatTemplate::compile("ok\n{% for %}", &origin()).unwrap_err();
        assert_eq!(error.line, 2);
        let message = error.to_string();
        assert!(
            message.contains("tokenizer_config.json")
                && message.contains("`chat_template`")
                && message.contains("line 2"),
            "{message}"
        );
    }

    #[test]
    fn content_format_follows_the_template() {
        assert!(iterates_content(
            "{% for part in message['content'] %}{{ part.text }}{% endfor %}"
        ));
        assert!(iterates_content("{%- for c in m.content -%}"));
        assert!(!iterates_content(
            "{% for message in messages %}{{ message['content'] }}{% endfor %}"
        ));
    }
}
