//! `tojson` as Hugging Face templates see it: Python's `json.dumps` with
//! `ensure_ascii=False`.
//!
//! transformers registers its own `tojson` filter (`json.dumps(x,
//! ensure_ascii=False, indent=indent, separators=separators,
//! sort_keys=sort_keys)`), so a tool schema renders as `{"a": 1, "b": [1,
//! 2]}`: a space after `:` and `,`, non-ASCII text as is, nothing HTML-escaped.
//! minijinja's own filter writes compact, HTML-safe JSON, which would change
//! every token of a tool definition; this module writes Python's bytes.

use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Error, ErrorKind, Value};

/// The `tojson` filter: `x | tojson`, `x | tojson(indent=2)`,
/// `tojson(x, separators=(",", ":"), sort_keys=true)`.
pub fn tojson(value: &Value, indent: Option<Value>, kwargs: Kwargs) -> Result<Value, Error> {
    let indent = match indent {
        Some(indent) => Some(indent),
        None => kwargs.get::<Option<Value>>("indent")?,
    };
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => match v.kind() {
            ValueKind::String => Some(v.as_str().unwrap_or("").to_string()),
            _ => Some(" ".repeat(usize::try_from(v)?)),
        },
    };
    let separators: Option<Value> = kwargs.get("separators")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    // Accepted and ignored: the template filter always writes non-ASCII as is.
    let _: Option<bool> = kwargs.get("ensure_ascii")?;
    kwargs.assert_all_used()?;
    let (item, key) = match separators {
        Some(pair) if !pair.is_none() => {
            let item = pair.get_item(&Value::from(0))?;
            let key = pair.get_item(&Value::from(1))?;
            (
                item.as_str().unwrap_or(",").to_string(),
                key.as_str().unwrap_or(": ").to_string(),
            )
        }
        // Python's defaults: ", " inline, "," when indenting.
        _ if indent.is_some() => (",".to_string(), ": ".to_string()),
        _ => (", ".to_string(), ": ".to_string()),
    };
    let style = Style {
        indent,
        item,
        key,
        sort_keys: sort_keys.unwrap_or(false),
    };
    let mut out = String::new();
    write_value(&mut out, value, &style, 0)?;
    Ok(Value::from(out))
}

struct Style {
    indent: Option<String>,
    item: String,
    key: String,
    sort_keys: bool,
}

impl Style {
    fn newline(&self, out: &mut String, depth: usize) {
        if let Some(indent) = &self.indent {
            out.push('\n');
            for _ in 0..depth {
                out.push_str(indent);
            }
        }
    }
}

fn write_value(out: &mut String, value: &Value, style: &Style, depth: usize) -> Result<(), Error> {
    if depth > 256 {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            "tojson: nested too deep",
        ));
    }
    match value.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
        ValueKind::Number => write_number(out, value),
        ValueKind::String => write_string(out, value.as_str().unwrap_or("")),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = value.try_iter()?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(&style.item);
                }
                style.newline(out, depth + 1);
                write_value(out, item, style, depth + 1)?;
            }
            style.newline(out, depth);
            out.push(']');
        }
        ValueKind::Map => {
            let mut keys: Vec<Value> = value.try_iter()?.collect();
            if style.sort_keys {
                keys.sort();
            }
            if keys.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            out.push('{');
            for (i, key) in keys.iter().enumerate() {
                if i > 0 {
                    out.push_str(&style.item);
                }
                style.newline(out, depth + 1);
                match key.as_str() {
                    Some(text) => write_string(out, text),
                    // Python writes number and boolean keys as strings.
                    None => write_string(out, &key.to_string()),
                }
                out.push_str(&style.key);
                write_value(out, &value.get_item(key)?, style, depth + 1)?;
            }
            style.newline(out, depth);
            out.push('}');
        }
        _ => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("tojson: a {} is not JSON serializable", value.kind()),
            ))
        }
    }
    Ok(())
}

fn write_number(out: &mut String, value: &Value) {
    match f64::try_from(value.clone()) {
        Ok(float) if is_float(value) => out.push_str(&python_float(float)),
        _ => out.push_str(&value.to_string()),
    }
}

fn is_float(value: &Value) -> bool {
    // minijinja keeps 1.0 a float: its display always has a '.', 'e' or is
    // not finite.
    let shown = value.to_string();
    shown.contains(['.', 'e', 'E']) || shown.contains("inf") || shown.contains("NaN")
}

/// `repr(float)`: the shortest round-tripping digits, in exponent form
/// below 1e-4 and from 1e16 on, with a two-digit signed exponent.
pub(crate) fn python_float(float: f64) -> String {
    if float.is_nan() {
        return "NaN".to_string();
    }
    if float.is_infinite() {
        return if float > 0.0 { "Infinity" } else { "-Infinity" }.to_string();
    }
    if float == 0.0 {
        return if float.is_sign_negative() {
            "-0.0"
        } else {
            "0.0"
        }
        .to_string();
    }
    let scientific = format!("{float:e}"); // "1.5e-7", "1e16"
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if !(-4..16).contains(&exponent) {
        let sign = if exponent < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exponent.abs());
    }
    let plain = format!("{float}");
    if plain.contains('.') {
        plain
    } else {
        format!("{plain}.0")
    }
}

/// A JSON string literal as `json.dumps(..., ensure_ascii=False)` writes it.
fn write_string(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dumps(json: &str, template_args: &str) -> String {
        let mut env = minijinja::Environment::new();
        env.add_filter("tojson", tojson);
        let value: Value = serde_json::from_str(json).unwrap();
        env.render_str(
            &format!("{{{{ x | tojson{template_args} }}}}"),
            minijinja::context! { x => value },
        )
        .unwrap()
    }

    #[test]
    fn writes_what_python_json_dumps_writes() {
        // Expected strings are json.dumps(..., ensure_ascii=False) in CPython 3.11.
        assert_eq!(
            dumps(r#"{"b": [1, 2.5, true, null], "a": "é<&>\"\n"}"#, ""),
            r#"{"b": [1, 2.5, true, null], "a": "é<&>\"\n"}"#
        );
        assert_eq!(dumps("[]", ""), "[]");
        assert_eq!(dumps("{}", ""), "{}");
        assert_eq!(
            dumps(r#"{"a": [1, {"b": 2}]}"#, "(indent=2)"),
            "{\n  \"a\": [\n    1,\n    {\n      \"b\": 2\n    }\n  ]\n}"
        );
        assert_eq!(
            dumps(r#"{"b": 1, "a": 2}"#, "(sort_keys=true)"),
            r#"{"a": 2, "b": 1}"#
        );
        assert_eq!(
            dumps(r#"{"a": [1, 2]}"#, r#"(separators=(",", ":"))"#),
            r#"{"a":[1,2]}"#
        );
        assert_eq!(dumps("\"\\u0001\"", ""), "\"\\u0001\"");
    }

    #[test]
    fn floats_read_like_python_repr() {
        assert_eq!(python_float(1.0), "1.0");
        assert_eq!(python_float(0.1), "0.1");
        assert_eq!(python_float(1e-5), "1e-05");
        assert_eq!(python_float(0.0001), "0.0001");
        assert_eq!(python_float(1e16), "1e+16");
        assert_eq!(python_float(123456789012345.0), "123456789012345.0");
        assert_eq!(python_float(-2.5e-7), "-2.5e-07");
        assert_eq!(dumps("[1.0, 3, -0.5]", ""), "[1.0, 3, -0.5]");
    }
}
