//! W3C Trace Context (`traceparent`, `tracestate`): read from a caller,
//! written to the engine.

use http::HeaderValue;
use opentelemetry::trace::{SpanId, TraceFlags, TraceId};

/// The longest `tracestate` passed on (the W3C limit is 32 list members;
/// 512 bytes is what the spec asks vendors to keep at least).
pub const MAX_TRACESTATE_BYTES: usize = 512;

/// A caller's `traceparent`: its trace, the span that called, and whether
/// it samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parent {
    pub trace_id: TraceId,
    pub span_id: SpanId,
    pub sampled: bool,
}

/// Parses `00-<32 hex>-<16 hex>-<2 hex>` (a later version's extra fields
/// are ignored, as the spec asks); `None` for anything else, all-zero ids
/// included.
pub fn parse_traceparent(value: &[u8]) -> Option<Parent> {
    let text = std::str::from_utf8(value).ok()?.trim();
    let mut fields = text.split('-');
    let version = fields.next()?;
    let (trace, span, flags) = (fields.next()?, fields.next()?, fields.next()?);
    let version = u8::from_str_radix(hex_exact(version, 2)?, 16).ok()?;
    // Version 255 is invalid; version 00 has exactly four fields.
    if version == 0xff || (version == 0 && fields.next().is_some()) {
        return None;
    }
    let trace_id = u128::from_str_radix(hex_exact(trace, 32)?, 16).ok()?;
    let span_id = u64::from_str_radix(hex_exact(span, 16)?, 16).ok()?;
    let flags = u8::from_str_radix(hex_exact(flags, 2)?, 16).ok()?;
    (trace_id != 0 && span_id != 0).then_some(Parent {
        trace_id: TraceId::from(trace_id),
        span_id: SpanId::from(span_id),
        sampled: flags & 1 == 1,
    })
}

/// `field` when it is exactly `len` lowercase hex digits.
fn hex_exact(field: &str, len: usize) -> Option<&str> {
    (field.len() == len
        && field
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
    .then_some(field)
}

/// The `traceparent` that makes `span_id` the parent of the engine's spans.
pub fn traceparent(trace_id: TraceId, span_id: SpanId, sampled: bool) -> HeaderValue {
    let flags = if sampled {
        TraceFlags::SAMPLED
    } else {
        TraceFlags::default()
    };
    let text = format!("00-{trace_id}-{span_id}-{:02x}", flags.to_u8());
    HeaderValue::from_str(&text).expect("hex digits and dashes are a valid header value")
}

/// A `tracestate` worth passing on: printable ASCII, bounded.
pub fn usable_tracestate(value: &HeaderValue) -> Option<HeaderValue> {
    let bytes = value.as_bytes();
    (!bytes.is_empty()
        && bytes.len() <= MAX_TRACESTATE_BYTES
        && bytes.iter().all(|b| (0x20..0x7f).contains(b)))
    .then(|| value.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn the_specs_example_round_trips() {
        let parent = parse_traceparent(EXAMPLE.as_bytes()).unwrap();
        assert!(parent.sampled);
        assert_eq!(
            parent.trace_id.to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(traceparent(parent.trace_id, parent.span_id, true), EXAMPLE);
        assert_eq!(
            traceparent(parent.trace_id, parent.span_id, false)
                .to_str()
                .unwrap(),
            &EXAMPLE.replace("-01", "-00")
        );
    }

    #[test]
    fn malformed_parents_are_ignored() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "0-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0x",
        ] {
            assert_eq!(parse_traceparent(bad.as_bytes()), None, "{bad:?}");
        }
        // A later version may add fields.
        let later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-more";
        assert!(!parse_traceparent(later.as_bytes()).unwrap().sampled);
    }

    #[test]
    fn only_a_printable_bounded_tracestate_is_passed_on() {
        let ok = HeaderValue::from_static("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE");
        assert_eq!(usable_tracestate(&ok), Some(ok.clone()));
        let long = HeaderValue::from_str(&"a=b,".repeat(200)).unwrap();
        assert_eq!(usable_tracestate(&long), None);
        assert_eq!(usable_tracestate(&HeaderValue::from_static("")), None);
    }
}
