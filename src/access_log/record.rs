//! One access-log record and its two line formats.
//!
//! `json`: one object per line, every field always present (`null` when
//! unknown):
//!
//! ```text
//! {"time":"2025-06-01T12:00:00.123Z","request_id":"4f9c…","client":"203.0.113.5","peer":"10.0.0.1",
//!  "method":"POST","path":"/v1/chat/completions","protocol":"HTTP/1.1","status":200,
//!  "key":"team-alpha","model":"chat","route":"chat","strategy":"round_robin",
//!  "target":"gpu-a/Qwen/Qwen3-8B","prefill_target":null,"attempts":1,"upstream_status":200,"bytes_sent":612,
//!  "request_bytes":97,"ttfb_ms":12.5,"total_ms":13.1,"client_cancel":false,
//!  "prompt_tokens":42,"cached_tokens":32,"completion_tokens":16,"error":null,
//!  "referer":null,"user_agent":"curl/8.5.0"}
//! ```
//!
//! `combined`: nginx's `combined` format, then rolter's fields as
//! `key=value` (a value with spaces, quotes or other bytes outside visible
//! ASCII is double-quoted and escaped as nginx escapes, `\xHH`; `-` is
//! unknown):
//!
//! ```text
//! 203.0.113.5 - - [01/Jun/2025:12:00:00 +0000] "POST /v1/chat/completions HTTP/1.1" 200 612 "-" "curl/8.5.0"
//!  request_id=4f9c… key=team-alpha model=chat route=chat strategy=round_robin
//!  target=gpu-a/Qwen/Qwen3-8B prefill_target=- attempts=1 upstream_status=200 request_bytes=97 ttfb_ms=12.500
//!  total_ms=13.100 client_cancel=false prompt_tokens=42 cached_tokens=32
//!  completion_tokens=16 error=- peer=10.0.0.1
//! ```
//!
//! (one line each; wrapped here). Times are UTC; `time` is when the request
//! arrived (nginx's `$time_local` is when it ended).

use std::fmt::Write as _;
use std::net::IpAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Serialize, Serializer};

use crate::config::AccessLogFormat;

/// One proxied request, as the access log records it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AccessRecord {
    /// When the request arrived.
    #[serde(serialize_with = "rfc3339")]
    pub time: SystemTime,
    pub request_id: String,
    /// The client (after `trusted_proxies`, see `proxy/forwarding.rs`).
    pub client: Option<IpAddr>,
    /// The direct peer of the connection.
    pub peer: Option<IpAddr>,
    pub method: String,
    /// Path and query as the client sent them.
    pub path: String,
    pub protocol: &'static str,
    /// Sent to the client; 499 when the client left before a status was
    /// sent (nginx's convention).
    pub status: u16,
    /// The API key's name (`anonymous` on an open gateway).
    pub key: Option<String>,
    /// The model the client asked for.
    pub model: Option<String>,
    /// The route that served it.
    pub route: Option<String>,
    pub strategy: Option<&'static str>,
    /// The last target tried, `provider/model`.
    pub target: Option<String>,
    /// On a disaggregated route, the prefill engine of the last attempt.
    pub prefill_target: Option<String>,
    /// Targets dispatched to.
    pub attempts: u32,
    /// The last attempt's upstream status.
    pub upstream_status: Option<u16>,
    /// Response body bytes sent to the client.
    pub bytes_sent: u64,
    /// Request body bytes read from the client.
    pub request_bytes: u64,
    /// Until the response header went to the client.
    #[serde(rename = "ttfb_ms", serialize_with = "millis_opt")]
    pub ttfb: Option<Duration>,
    /// Until the response ended.
    #[serde(rename = "total_ms", serialize_with = "millis")]
    pub total: Duration,
    /// The client went away before the response ended.
    pub client_cancel: bool,
    /// The tokens the engine reported (`usage`), when it did.
    pub prompt_tokens: Option<u64>,
    pub cached_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    /// What went wrong, as a fixed code (OpenAI's error `code`, or type).
    pub error: Option<&'static str>,
    pub referer: Option<String>,
    pub user_agent: Option<String>,
}

impl AccessRecord {
    /// Appends the record as one line (with its `\n`) in `format`.
    pub fn write_line(&self, format: AccessLogFormat, out: &mut Vec<u8>) {
        match format {
            AccessLogFormat::Json => {
                if let Err(e) = serde_json::to_writer(&mut *out, self) {
                    // Not reachable for this type; keep the line count right.
                    log::error!("access log: cannot encode a record: {e}");
                    out.extend_from_slice(b"{}");
                }
                out.push(b'\n');
            }
            AccessLogFormat::Combined => {
                let mut line = String::with_capacity(384);
                self.write_combined(&mut line);
                line.push('\n');
                out.extend_from_slice(line.as_bytes());
            }
        }
    }

    fn write_combined(&self, out: &mut String) {
        let client = self.client.or(self.peer);
        match client {
            Some(ip) => write!(out, "{ip}"),
            None => write!(out, "-"),
        }
        .ok();
        out.push_str(" - - [");
        clf_time(self.time, out);
        out.push_str("] \"");
        escape_into(&self.method, out);
        out.push(' ');
        escape_into(&self.path, out);
        out.push(' ');
        out.push_str(self.protocol);
        write!(out, "\" {} {} \"", self.status, self.bytes_sent).ok();
        escape_into(self.referer.as_deref().unwrap_or("-"), out);
        out.push_str("\" \"");
        escape_into(self.user_agent.as_deref().unwrap_or("-"), out);
        out.push('"');

        pair(out, "request_id", Some(&self.request_id));
        pair(out, "key", self.key.as_deref());
        pair(out, "model", self.model.as_deref());
        pair(out, "route", self.route.as_deref());
        pair(out, "strategy", self.strategy);
        pair(out, "target", self.target.as_deref());
        pair(out, "prefill_target", self.prefill_target.as_deref());
        write!(out, " attempts={}", self.attempts).ok();
        match self.upstream_status {
            Some(status) => write!(out, " upstream_status={status}"),
            None => write!(out, " upstream_status=-"),
        }
        .ok();
        write!(out, " request_bytes={}", self.request_bytes).ok();
        match self.ttfb {
            Some(ttfb) => write!(out, " ttfb_ms={:.3}", as_millis(ttfb)),
            None => write!(out, " ttfb_ms=-"),
        }
        .ok();
        write!(out, " total_ms={:.3}", as_millis(self.total)).ok();
        write!(out, " client_cancel={}", self.client_cancel).ok();
        for (name, value) in [
            ("prompt_tokens", self.prompt_tokens),
            ("cached_tokens", self.cached_tokens),
            ("completion_tokens", self.completion_tokens),
        ] {
            match value {
                Some(n) => write!(out, " {name}={n}"),
                None => write!(out, " {name}=-"),
            }
            .ok();
        }
        pair(out, "error", self.error);
        match self.peer {
            Some(ip) => write!(out, " peer={ip}"),
            None => write!(out, " peer=-"),
        }
        .ok();
    }
}

/// ` key=value`, the value bare when it is visible ASCII without quotes or
/// backslashes, else quoted and escaped; `-` when absent.
fn pair(out: &mut String, key: &str, value: Option<&str>) {
    out.push(' ');
    out.push_str(key);
    out.push('=');
    match value {
        None => out.push('-'),
        Some(v)
            if !v.is_empty()
                && v.bytes()
                    .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\') =>
        {
            out.push_str(v)
        }
        Some(v) => {
            out.push('"');
            escape_into(v, out);
            out.push('"');
        }
    }
}

/// nginx's default log escaping: `"`, `\`, control bytes and bytes above
/// 0x7e become `\xHH`.
fn escape_into(value: &str, out: &mut String) {
    for &b in value.as_bytes() {
        if b == b'"' || b == b'\\' || !(0x20..0x7f).contains(&b) {
            write!(out, "\\x{b:02X}").ok();
        } else {
            out.push(b as char);
        }
    }
}

fn as_millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Milliseconds with microsecond precision.
fn rounded_millis(d: Duration) -> f64 {
    (as_millis(d) * 1000.0).round() / 1000.0
}

fn millis<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(rounded_millis(*d))
}

fn millis_opt<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_f64(rounded_millis(*d)),
        None => s.serialize_none(),
    }
}

fn rfc3339<S: Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    let (date, millis) = civil(*t);
    s.collect_str(&format_args!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        date.year, date.month, date.day, date.hour, date.minute, date.second
    ))
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// `10/Oct/2000:13:55:36 +0000`, the common log format's time.
fn clf_time(t: SystemTime, out: &mut String) {
    let (date, _) = civil(t);
    write!(
        out,
        "{:02}/{}/{:04}:{:02}:{:02}:{:02} +0000",
        date.day,
        MONTHS[(date.month - 1) as usize],
        date.year,
        date.hour,
        date.minute,
        date.second
    )
    .ok();
}

struct Civil {
    year: i64,
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
    second: u32,
}

/// UTC calendar time and milliseconds of `t` (Howard Hinnant's
/// `civil_from_days`; times before 1970 count as 1970).
fn civil(t: SystemTime) -> (Civil, u32) {
    let since = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs() as i64;
    let days = secs.div_euclid(86_400);
    let of_day = secs.rem_euclid(86_400) as u32;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = (if mp < 10 { mp + 3 } else { mp - 9 }) as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    debug_assert!((1..=12).contains(&month) && (1..=31).contains(&day));
    (
        Civil {
            year,
            month,
            day,
            hour: of_day / 3600,
            minute: of_day / 60 % 60,
            second: of_day % 60,
        },
        since.subsec_millis(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> AccessRecord {
        AccessRecord {
            // 2000-10-10T13:55:36.123Z
            time: UNIX_EPOCH + Duration::from_millis(971_186_136_123),
            request_id: "abc123".into(),
            client: Some("203.0.113.5".parse().unwrap()),
            peer: Some("10.0.0.1".parse().unwrap()),
            method: "POST".into(),
            path: "/v1/chat/completions".into(),
            protocol: "HTTP/1.1",
            status: 200,
            key: Some("team-alpha".into()),
            model: Some("chat".into()),
            route: Some("chat".into()),
            strategy: Some("round_robin"),
            target: Some("gpu-a/Qwen/Qwen3-8B".into()),
            prefill_target: None,
            attempts: 2,
            upstream_status: Some(200),
            bytes_sent: 612,
            request_bytes: 97,
            ttfb: Some(Duration::from_micros(12_500)),
            total: Duration::from_micros(13_125),
            client_cancel: false,
            prompt_tokens: Some(42),
            cached_tokens: Some(32),
            completion_tokens: Some(16),
            error: None,
            referer: None,
            user_agent: Some("curl/8.5.0".into()),
        }
    }

    fn line(record: &AccessRecord, format: AccessLogFormat) -> String {
        let mut out = Vec::new();
        record.write_line(format, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn json_line_has_every_field() {
        let text = line(&record(), AccessLogFormat::Json);
        assert!(text.ends_with('\n') && text.matches('\n').count() == 1);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["time"], "2000-10-10T13:55:36.123Z");
        assert_eq!(v["client"], "203.0.113.5");
        assert_eq!(v["status"], 200);
        assert_eq!(v["strategy"], "round_robin");
        assert_eq!(v["attempts"], 2);
        assert_eq!(v["ttfb_ms"], 12.5);
        assert_eq!(v["total_ms"], 13.125);
        assert_eq!(v["error"], serde_json::Value::Null);
        assert_eq!(v["referer"], serde_json::Value::Null);
        assert_eq!(v["cached_tokens"], 32);
        assert_eq!(v["prefill_target"], serde_json::Value::Null);
        assert_eq!(v.as_object().unwrap().len(), 27);
    }

    #[test]
    fn combined_line_is_nginx_combined_then_pairs() {
        let text = line(&record(), AccessLogFormat::Combined);
        assert_eq!(
            text,
            "203.0.113.5 - - [10/Oct/2000:13:55:36 +0000] \"POST /v1/chat/completions HTTP/1.1\" 200 612 \"-\" \"curl/8.5.0\" \
             request_id=abc123 key=team-alpha model=chat route=chat strategy=round_robin \
             target=gpu-a/Qwen/Qwen3-8B prefill_target=- attempts=2 upstream_status=200 request_bytes=97 \
             ttfb_ms=12.500 total_ms=13.125 client_cancel=false prompt_tokens=42 cached_tokens=32 \
             completion_tokens=16 error=- peer=10.0.0.1\n"
        );
    }

    #[test]
    fn combined_escapes_what_could_break_the_line() {
        let mut r = record();
        r.path = "/v1/x\"y\n".into();
        r.user_agent = Some("evil \"agent\"\\".into());
        r.model = Some("my model\n".into());
        r.key = None;
        r.upstream_status = None;
        r.ttfb = None;
        let text = line(&r, AccessLogFormat::Combined);
        assert_eq!(text.matches('\n').count(), 1);
        assert!(
            text.contains("\"POST /v1/x\\x22y\\x0A HTTP/1.1\""),
            "{text}"
        );
        assert!(text.contains("\"evil \\x22agent\\x22\\x5C\""), "{text}");
        assert!(text.contains(" model=\"my model\\x0A\""), "{text}");
        assert!(text.contains(" key=- "), "{text}");
        assert!(text.contains(" upstream_status=- "), "{text}");
        assert!(text.contains(" ttfb_ms=- "), "{text}");
    }

    #[test]
    fn calendar_dates_are_right_around_leap_days() {
        let at = |secs: u64| {
            let (c, _) = civil(UNIX_EPOCH + Duration::from_secs(secs));
            (c.year, c.month, c.day, c.hour, c.minute, c.second)
        };
        assert_eq!(at(0), (1970, 1, 1, 0, 0, 0));
        assert_eq!(at(951_782_400), (2000, 2, 29, 0, 0, 0));
        assert_eq!(at(1_709_251_199), (2024, 2, 29, 23, 59, 59));
        assert_eq!(at(1_735_689_600), (2025, 1, 1, 0, 0, 0));
    }
}
