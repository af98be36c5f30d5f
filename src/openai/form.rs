//! Reading a `multipart/form-data` body (RFC 7578), as the audio endpoints
//! receive it: only the small text fields routing needs (`model`,
//! `stream`), found in place so the audio is neither copied nor decoded.
//!
//! The body was read whole; the parts are walked by their delimiters
//! (`--boundary` at the start of a line) with `memmem`, and the walk stops
//! as soon as both fields are seen. Clients (the `openai` SDKs, curl's
//! `-F`) put the text fields before the file, so the audio is usually not
//! even scanned.

use std::ops::Range;

use memchr::memmem;

/// Longest part header block read: a `Content-Disposition` and a
/// `Content-Type` fit many times over.
const MAX_PART_HEADERS: usize = 8 * 1024;

/// The boundary of a `Content-Type: multipart/form-data; boundary=…` value,
/// or `None` when the media type is another or the boundary is missing or
/// malformed (RFC 2046: 1 to 70 characters).
pub fn form_boundary(content_type: &[u8]) -> Option<&[u8]> {
    let text = std::str::from_utf8(content_type).ok()?;
    let mut params = text.split(';');
    let media_type = params.next()?.trim();
    if !media_type.eq_ignore_ascii_case("multipart/form-data") {
        return None;
    }
    let value = params.find_map(|param| {
        let (name, value) = param.split_once('=')?;
        name.trim()
            .eq_ignore_ascii_case("boundary")
            .then(|| value.trim())
    })?;
    let value = value
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or(value);
    (1..=70).contains(&value.len()).then_some(value.as_bytes())
}

/// The fields of a form body routing reads.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct FormFields {
    /// Byte range of the `model` part's value.
    pub model: Option<Range<usize>>,
    /// The `stream` part's value is `true`.
    pub stream: bool,
}

/// Why a form body cannot be read.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum FormError {
    #[error("the multipart body does not start with its boundary")]
    NoFirstBoundary,
    #[error("a multipart part has no end of its headers")]
    UnterminatedHeaders,
    #[error("a multipart part is not closed by the boundary")]
    UnterminatedPart,
}

/// Finds `model` and `stream` in `body`, a form delimited by `boundary`.
pub fn read_form(body: &[u8], boundary: &[u8]) -> Result<FormFields, FormError> {
    // "--" boundary opens the first part (at the very start, or after a
    // preamble ending in CRLF); CRLF "--" boundary opens every later one.
    let mut delimiter = Vec::with_capacity(boundary.len() + 4);
    delimiter.extend_from_slice(b"\r\n--");
    delimiter.extend_from_slice(boundary);
    let next_delimiter = memmem::Finder::new(&delimiter);
    let mut at = if body.starts_with(&delimiter[2..]) {
        delimiter.len() - 2
    } else {
        next_delimiter
            .find(body)
            .ok_or(FormError::NoFirstBoundary)?
            + delimiter.len()
    };
    let end_of_headers = memmem::Finder::new(b"\r\n\r\n");
    let mut fields = FormFields::default();
    let mut seen_stream = false;
    loop {
        // After a delimiter: "--" closes the form, else the rest of the
        // line (transport padding) and CRLF.
        let rest = &body[at..];
        if rest.starts_with(b"--") {
            return Ok(fields);
        }
        let line_end = memchr::memchr(b'\n', rest).ok_or(FormError::UnterminatedHeaders)?;
        let headers_start = at + line_end + 1;
        let window = &body[headers_start..body.len().min(headers_start + MAX_PART_HEADERS)];
        // A part without headers starts with the blank line at once.
        let (headers, value_start) = if window.starts_with(b"\r\n") {
            (&window[..0], headers_start + 2)
        } else {
            let end = end_of_headers
                .find(window)
                .ok_or(FormError::UnterminatedHeaders)?;
            (&window[..end], headers_start + end + 4)
        };
        let value_end = value_start
            + next_delimiter
                .find(&body[value_start..])
                .ok_or(FormError::UnterminatedPart)?;
        match field_name(headers) {
            Some(b"model") if fields.model.is_none() => fields.model = Some(value_start..value_end),
            Some(b"stream") if !seen_stream => {
                seen_stream = true;
                fields.stream = body[value_start..value_end]
                    .trim_ascii()
                    .eq_ignore_ascii_case(b"true");
            }
            _ => {}
        }
        if fields.model.is_some() && seen_stream {
            return Ok(fields);
        }
        at = value_end + delimiter.len();
    }
}

/// The `name` parameter of a part's `Content-Disposition: form-data`.
fn field_name(headers: &[u8]) -> Option<&[u8]> {
    headers.split(|&b| b == b'\n').find_map(|line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let (name, value) = split_once(line, b':')?;
        if !name
            .trim_ascii()
            .eq_ignore_ascii_case(b"content-disposition")
        {
            return None;
        }
        let mut params = value.split(|&b| b == b';');
        if !params
            .next()?
            .trim_ascii()
            .eq_ignore_ascii_case(b"form-data")
        {
            return None;
        }
        params.find_map(|param| {
            let (key, value) = split_once(param, b'=')?;
            if !key.trim_ascii().eq_ignore_ascii_case(b"name") {
                return None;
            }
            let value = value.trim_ascii();
            Some(
                value
                    .strip_prefix(b"\"")
                    .and_then(|v| v.strip_suffix(b"\""))
                    .unwrap_or(value),
            )
        })
    })
}

fn split_once(bytes: &[u8], separator: u8) -> Option<(&[u8], &[u8])> {
    let at = memchr::memchr(separator, bytes)?;
    Some((&bytes[..at], &bytes[at + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A form as `curl -F` writes it: text fields, then a file.
    fn form(boundary: &str, fields: &[(&str, &[u8])]) -> Vec<u8> {
        let mut body = Vec::new();
        for (name, value) in fields {
            body.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
            if *name == "file" {
                body.extend_from_slice(
                    b"Content-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n\
                      Content-Type: audio/wav\r\n\r\n",
                );
            } else {
                body.extend_from_slice(
                    format!("Content-Disposition: form-data; name=\"{name}\"\r\n\r\n").as_bytes(),
                );
            }
            body.extend_from_slice(value);
            body.extend_from_slice(b"\r\n");
        }
        body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
        body
    }

    #[test]
    fn the_boundary_comes_from_the_content_type() {
        assert_eq!(
            form_boundary(b"multipart/form-data; boundary=abc123"),
            Some(&b"abc123"[..])
        );
        assert_eq!(
            form_boundary(b"Multipart/Form-Data;charset=utf-8; Boundary=\"a b\""),
            Some(&b"a b"[..])
        );
        assert_eq!(form_boundary(b"multipart/form-data"), None);
        assert_eq!(form_boundary(b"multipart/form-data; boundary="), None);
        assert_eq!(form_boundary(b"application/json; boundary=x"), None);
        let long = format!("multipart/form-data; boundary={}", "x".repeat(71));
        assert_eq!(form_boundary(long.as_bytes()), None);
    }

    #[test]
    fn finds_model_and_stream_wherever_they_are() {
        let audio: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
        for order in [
            vec![
                ("model", &b"whisper"[..]),
                ("stream", b"true"),
                ("file", &audio),
            ],
            vec![
                ("file", &audio[..]),
                ("stream", b"true"),
                ("model", b"whisper"),
            ],
            vec![
                ("stream", &b"true"[..]),
                ("file", &audio),
                ("model", b"whisper"),
            ],
        ] {
            let body = form("XyZ", &order);
            let fields = read_form(&body, b"XyZ").unwrap();
            assert_eq!(&body[fields.model.unwrap()], b"whisper");
            assert!(fields.stream);
        }
        let body = form("b", &[("file", b"\r\n--c"), ("model", b"m")]);
        let fields = read_form(&body, b"b").unwrap();
        assert_eq!(&body[fields.model.unwrap()], b"m");
        assert!(!fields.stream);
    }

    #[test]
    fn the_boundary_inside_a_line_is_data() {
        let body = form("b", &[("file", b"x--b\n--b--b"), ("model", b"m")]);
        let fields = read_form(&body, b"b").unwrap();
        assert_eq!(&body[fields.model.unwrap()], b"m");
    }

    #[test]
    fn a_preamble_and_empty_values_are_read() {
        let mut body = b"preamble text\r\n".to_vec();
        body.extend(form("q", &[("model", b""), ("file", b"")]));
        let fields = read_form(&body, b"q").unwrap();
        assert_eq!(fields.model.map(|r| r.len()), Some(0));
    }

    #[test]
    fn a_truncated_form_is_an_error_not_a_panic() {
        let body = form("b", &[("file", b"data"), ("model", b"m")]);
        for cut in 0..body.len() - 8 {
            // Every prefix either finds the model (it was complete) or errs.
            if let Ok(fields) = read_form(&body[..cut], b"b") {
                if let Some(model) = fields.model {
                    assert_eq!(&body[model], b"m");
                }
            }
        }
        assert_eq!(read_form(b"", b"b"), Err(FormError::NoFirstBoundary));
        assert_eq!(
            read_form(
                b"--b\r\nContent-Disposition: form-data; name=\"model\"",
                b"b"
            ),
            Err(FormError::UnterminatedHeaders)
        );
    }

    #[test]
    fn only_form_data_dispositions_name_fields() {
        assert_eq!(
            field_name(b"Content-Disposition: form-data; name=model"),
            Some(&b"model"[..])
        );
        assert_eq!(
            field_name(b"content-type: text/plain\r\ncontent-disposition: form-data; filename=\"x\"; name=\"stream\""),
            Some(&b"stream"[..])
        );
        assert_eq!(
            field_name(b"Content-Disposition: attachment; name=\"model\""),
            None
        );
        assert_eq!(field_name(b""), None);
    }
}
