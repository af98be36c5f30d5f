//! A hand-written reader of a request's envelope, for the bodies it can
//! vouch for.
//!
//! serde's generated parser was the largest part of the gateway's own work
//! on a chat request (callgrind: ~7 k of the ~25 k instructions rolter adds
//! to Pingora's path), and its code the largest part of what the path
//! fetches into the instruction cache. This scanner reads the same fields
//! in one pass over the bytes. It answers only for bodies that serde would
//! accept and read the same way; for anything else (invalid JSON, a field
//! serde would refuse, a string or number whose reading it would have to
//! reproduce) it answers `None`, and the caller asks serde, so errors and
//! every edge case stay serde's. `tests` and the `request` fuzz target
//! hold the two to the same answers.
//!
//! What it declines, beyond invalid JSON: invalid UTF-8 anywhere; nesting
//! deeper than [`MAX_DEPTH`]; a known field given twice; an escaped object
//! key where serde decodes keys (the envelope, a message, an object read
//! in place of a list); an escaped string or any number where serde reads
//! the value itself rather than skipping it (a message, `messages`, a
//! message's `content` given as a scalar), except a `content` string,
//! which it decodes with serde.

use std::borrow::Cow;

use super::envelope::Envelope;
use super::raw::Raw;
use super::turns::{text, Content, Turn, Turns};

/// Nesting the scanner follows; serde's limit is 128.
const MAX_DEPTH: usize = 100;

/// The envelope of `body`, when the scanner can vouch for it.
pub fn envelope(body: &[u8]) -> Option<Envelope<'_>> {
    // simdutf8 checks 32 bytes per instruction where the processor can
    // (chosen at run time); `std`'s check took a third of a large prompt's
    // scan.
    let text = simdutf8::basic::from_utf8(body).ok()?;
    let mut scanner = Scanner { text, at: 0 };
    let envelope = scanner.envelope()?;
    scanner.whitespace();
    (scanner.at == text.len()).then_some(envelope)
}

/// The envelope's fields, by their bit in the set of those seen.
#[derive(Clone, Copy)]
enum Field {
    Model = 1 << 0,
    Stream = 1 << 1,
    Messages = 1 << 2,
    Prompt = 1 << 3,
    Input = 1 << 4,
    System = 1 << 5,
    Instructions = 1 << 6,
    PreviousResponseId = 1 << 7,
    StreamOptions = 1 << 8,
}

impl Field {
    fn of(name: &str) -> Option<Field> {
        Some(match name {
            "model" => Field::Model,
            "stream" => Field::Stream,
            "messages" => Field::Messages,
            "prompt" => Field::Prompt,
            "input" => Field::Input,
            "system" => Field::System,
            "instructions" => Field::Instructions,
            "previous_response_id" => Field::PreviousResponseId,
            "stream_options" => Field::StreamOptions,
            _ => return None,
        })
    }
}

/// A message's fields routing reads, by their bit in the set of those seen.
#[derive(Clone, Copy)]
enum TurnField {
    Role = 1 << 0,
    Content = 1 << 1,
    ToolCalls = 1 << 2,
    ToolCallId = 1 << 3,
}

impl TurnField {
    fn of(name: &str) -> Option<TurnField> {
        Some(match name {
            "role" => TurnField::Role,
            "content" => TurnField::Content,
            "tool_calls" => TurnField::ToolCalls,
            "tool_call_id" => TurnField::ToolCallId,
            _ => return None,
        })
    }
}

/// A string as the scanner met it.
struct Text<'a> {
    /// The literal, quotes included.
    literal: &'a str,
    escaped: bool,
}

impl<'a> Text<'a> {
    /// The text, when it needs no decoding: what serde would read it as.
    fn plain(&self) -> Option<&'a str> {
        (!self.escaped).then(|| &self.literal[1..self.literal.len() - 1])
    }
}

struct Scanner<'a> {
    /// The whole body, valid UTF-8: every position the scanner stops at is
    /// next to an ASCII byte, so a char boundary.
    text: &'a str,
    at: usize,
}

impl<'a> Scanner<'a> {
    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    fn whitespace(&mut self) {
        let bytes = self.text.as_bytes();
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = bytes.get(self.at) {
            self.at += 1;
        }
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    fn literal(&mut self, word: &str) -> Option<()> {
        let end = self.at + word.len();
        (self.text.as_bytes().get(self.at..end)? == word.as_bytes()).then(|| self.at = end)
    }

    fn slice(&self, from: usize) -> &'a str {
        &self.text[from..self.at]
    }

    /// The top-level object, whitespace before it included.
    fn envelope(&mut self) -> Option<Envelope<'a>> {
        self.whitespace();
        let mut envelope = Envelope::default();
        let mut seen = 0u16;
        self.object(|scanner, key| {
            let Some(field) = Field::of(key.plain()?) else {
                return scanner.skip(2);
            };
            if seen & field as u16 != 0 {
                return None;
            }
            seen |= field as u16;
            scanner.field(field, &mut envelope)
        })?;
        Some(envelope)
    }

    fn field(&mut self, field: Field, envelope: &mut Envelope<'a>) -> Option<()> {
        let slot = match field {
            Field::Messages => {
                envelope.messages = self.messages(2)?;
                return Some(());
            }
            Field::Model => &mut envelope.model,
            Field::Stream => &mut envelope.stream,
            Field::Prompt => &mut envelope.prompt,
            Field::Input => &mut envelope.input,
            Field::System => &mut envelope.system,
            Field::Instructions => &mut envelope.instructions,
            Field::PreviousResponseId => &mut envelope.previous_response_id,
            Field::StreamOptions => &mut envelope.stream_options,
        };
        let raw = self.raw(2)?;
        // `null` reads as absent, but for the two fields whose `null` is
        // an answer of its own (`present` in `envelope.rs`).
        *slot = match field {
            Field::Model | Field::StreamOptions => Some(raw),
            _ => non_null(raw),
        };
        Some(())
    }

    /// An object: `member` reads each value, the scanner standing past its
    /// key (handed over as met) and the colon.
    fn object(&mut self, mut member: impl FnMut(&mut Self, Text<'a>) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        self.whitespace();
        if self.eat(b'}').is_some() {
            return Some(());
        }
        loop {
            let key = self.string()?;
            self.whitespace();
            self.eat(b':')?;
            self.whitespace();
            member(self, key)?;
            self.whitespace();
            match self.peek()? {
                b',' => {
                    self.at += 1;
                    self.whitespace();
                }
                b'}' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// An array: `element` reads each element.
    fn array(&mut self, mut element: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.eat(b'[')?;
        self.whitespace();
        if self.eat(b']').is_some() {
            return Some(());
        }
        loop {
            element(self)?;
            self.whitespace();
            match self.peek()? {
                b',' => {
                    self.at += 1;
                    self.whitespace();
                }
                b']' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// `messages`, at nesting `depth`: `None` for `null`, as serde reads an
    /// absent list.
    fn messages(&mut self, depth: usize) -> Option<Option<Turns<'a>>> {
        match self.peek()? {
            b'n' => {
                self.literal("null")?;
                Some(None)
            }
            b'[' => {
                let mut turns = Some(Vec::with_capacity(4));
                self.array(|scanner| {
                    match (scanner.turn(depth + 1)?, turns.as_mut()) {
                        (Some(turn), Some(turns)) => turns.push(turn),
                        _ => turns = None,
                    }
                    Some(())
                })?;
                Some(Some(Turns(turns)))
            }
            _ => {
                self.unread_scalar_or_object(depth)?;
                Some(Some(Turns(None)))
            }
        }
    }

    /// A value serde reads (not skips) only to find it is of a shape routing
    /// does not read: an object (keys decoded), a string, a boolean or
    /// `null`. Numbers and escaped strings are declined: serde's reading of
    /// them can fail where skipping does not.
    fn unread_scalar_or_object(&mut self, depth: usize) -> Option<()> {
        match self.peek()? {
            b'{' if depth <= MAX_DEPTH => self.object(|scanner, key| {
                key.plain()?;
                scanner.skip(depth + 1)
            }),
            b'"' => self.string()?.plain().map(drop),
            b't' => self.literal("true"),
            b'f' => self.literal("false"),
            b'n' => self.literal("null"),
            _ => None,
        }
    }

    /// One element of `messages`, at nesting `depth`: `Some(turn)` for a
    /// message routing can read.
    fn turn(&mut self, depth: usize) -> Option<Option<Turn<'a>>> {
        match self.peek()? {
            b'{' => {}
            b'[' => {
                self.skip(depth)?;
                return Some(None);
            }
            _ => {
                self.unread_scalar_or_object(depth)?;
                return Some(None);
            }
        }
        let mut turn = Turn::default();
        let mut readable = true;
        let mut seen = 0u8;
        self.object(|scanner, key| {
            let Some(field) = TurnField::of(key.plain()?) else {
                return scanner.skip(depth + 1);
            };
            if seen & field as u8 != 0 {
                // Given twice: serde would have refused the message.
                readable = false;
                return scanner.skip(depth + 1);
            }
            seen |= field as u8;
            match field {
                TurnField::Role => {
                    readable &= text(non_null(scanner.raw(depth + 1)?), &mut turn.role)
                }
                TurnField::ToolCallId => {
                    readable &= text(non_null(scanner.raw(depth + 1)?), &mut turn.tool_call_id)
                }
                TurnField::ToolCalls => turn.tool_calls = non_null(scanner.raw(depth + 1)?),
                TurnField::Content => turn.content = scanner.content(depth + 1)?,
            }
            Some(())
        })?;
        Some(readable.then_some(turn))
    }

    /// A message's `content`, at nesting `depth`; `None` for `null`.
    fn content(&mut self, depth: usize) -> Option<Option<Content<'a>>> {
        match self.peek()? {
            b'"' => {
                let text = self.string()?;
                Some(Some(Content::Text(match text.plain() {
                    Some(plain) => Cow::Borrowed(plain),
                    // serde decodes it; so does this, the same way.
                    None => Cow::Owned(serde_json::from_str::<String>(text.literal).ok()?),
                })))
            }
            b'[' => {
                let mut parts = Vec::with_capacity(2);
                self.array(|scanner| {
                    parts.push(scanner.raw(depth + 1)?);
                    Some(())
                })?;
                Some(Some(Content::List(parts)))
            }
            b'n' => {
                self.literal("null")?;
                Some(None)
            }
            _ => {
                self.unread_scalar_or_object(depth)?;
                Some(Some(Content::Other))
            }
        }
    }

    /// A value kept as it stands, at nesting `depth` (the containers
    /// around it, itself included if it is one).
    fn raw(&mut self, depth: usize) -> Option<Raw<'a>> {
        let from = self.at;
        self.skip(depth)?;
        Some(Raw::checked(self.slice(from)))
    }

    /// Any valid JSON value, at nesting `depth`, skipped.
    fn skip(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        match self.peek()? {
            b'"' => self.string().map(drop),
            b'{' => self.object(|scanner, _| scanner.skip(depth + 1)),
            b'[' => self.array(|scanner| scanner.skip(depth + 1)),
            b't' => self.literal("true"),
            b'f' => self.literal("false"),
            b'n' => self.literal("null"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    /// A number, by JSON's grammar: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`.
    fn number(&mut self) -> Option<()> {
        let bytes = self.text.as_bytes();
        let digits = |at: &mut usize| {
            let from = *at;
            while bytes.get(*at).is_some_and(u8::is_ascii_digit) {
                *at += 1;
            }
            *at > from
        };
        let mut at = self.at;
        if bytes.get(at) == Some(&b'-') {
            at += 1;
        }
        match bytes.get(at)? {
            b'0' => at += 1,
            b'1'..=b'9' => {
                digits(&mut at);
            }
            _ => return None,
        }
        if bytes.get(at) == Some(&b'.') {
            at += 1;
            if !digits(&mut at) {
                return None;
            }
        }
        if let Some(b'e' | b'E') = bytes.get(at) {
            at += 1;
            if let Some(b'+' | b'-') = bytes.get(at) {
                at += 1;
            }
            if !digits(&mut at) {
                return None;
            }
        }
        self.at = at;
        Some(())
    }

    /// A string literal: no control characters, only JSON's escapes.
    fn string(&mut self) -> Option<Text<'a>> {
        let bytes = self.text.as_bytes();
        let from = self.at;
        self.eat(b'"')?;
        let mut at = self.at;
        let mut escaped = false;
        loop {
            at += plain_run(&bytes[at..]);
            match *bytes.get(at)? {
                b'"' => {
                    self.at = at + 1;
                    return Some(Text {
                        literal: self.slice(from),
                        escaped,
                    });
                }
                b'\\' => {
                    escaped = true;
                    at += match *bytes.get(at + 1)? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => 2,
                        b'u' if bytes.get(at + 2..at + 6)?.iter().all(u8::is_ascii_hexdigit) => 6,
                        _ => return None,
                    };
                }
                // A control character.
                _ => return None,
            }
        }
    }
}

/// How many bytes at the start of `bytes` a string may hold as they are:
/// up to the first quote, backslash or control character; 32 at a time
/// where the processor compares 16 in one instruction, then eight at a
/// time. A long prompt is one long run: this loop is most of the scan.
fn plain_run(bytes: &[u8]) -> usize {
    const ONES: u64 = u64::from_le_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_le_bytes([0x80; 8]);
    const QUOTES: u64 = u64::from_le_bytes([b'"'; 8]);
    const BACKSLASHES: u64 = u64::from_le_bytes([b'\\'; 8]);
    const SPACES: u64 = u64::from_le_bytes([0x20; 8]);
    let mut at = 0;
    #[cfg(target_arch = "x86_64")]
    while let Some(Ok(block)) = bytes.get(at..at + 32).map(<&[u8; 32]>::try_from) {
        let flags = specials_sse2(block);
        if flags != 0 {
            return at + flags.trailing_zeros() as usize;
        }
        at += 32;
    }
    while let Some(Ok(word)) = bytes.get(at..at + 8).map(<[u8; 8]>::try_from) {
        let word = u64::from_le_bytes(word);
        // A byte XORed to zero borrows in the subtraction of ONES, a byte
        // under 0x20 in that of SPACES; a borrow only carries upward, so
        // the lowest flag marks the first such byte exactly. Bytes of 0x80
        // and over never flag: UTF-8's multi-byte characters pass.
        let zero = |x: u64| x.wrapping_sub(ONES) & !x;
        let flags = (zero(word ^ QUOTES) | zero(word ^ BACKSLASHES) | word.wrapping_sub(SPACES))
            & !word
            & HIGHS;
        if flags != 0 {
            return at + (flags.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    while let Some(&byte) = bytes.get(at) {
        if byte == b'"' || byte == b'\\' || byte < 0x20 {
            break;
        }
        at += 1;
    }
    at
}

/// One bit per byte of `block` (bit `i` for byte `i`) that ends a plain
/// run: a quote, a backslash or a control character.
#[cfg(target_arch = "x86_64")]
fn specials_sse2(block: &[u8; 32]) -> u32 {
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_max_epu8, _mm_movemask_epi8, _mm_or_si128,
        _mm_set1_epi8,
    };
    let specials = |half: &[u8; 16]| {
        // SAFETY: SSE2 is part of every x86_64 processor (no runtime check
        // is needed), and the load reads, unaligned, exactly the 16 bytes
        // `half` borrows.
        unsafe {
            let v = _mm_loadu_si128(half.as_ptr().cast::<__m128i>());
            let quote = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8));
            let backslash = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8));
            // Unsigned `v <= 0x1f` is `max(v, 0x1f) == 0x1f`; bytes of 0x80
            // and over (UTF-8's multi-byte characters) are large and pass.
            let limit = _mm_set1_epi8(0x1f);
            let control = _mm_cmpeq_epi8(_mm_max_epu8(v, limit), limit);
            _mm_movemask_epi8(_mm_or_si128(_mm_or_si128(quote, backslash), control)) as u32 & 0xffff
        }
    };
    let (low, high) = block.split_at(16);
    specials(low.try_into().expect("16 bytes")) | specials(high.try_into().expect("16 bytes")) << 16
}

/// A value as serde reads it into an `Option`: `null` is `None`.
fn non_null(raw: Raw<'_>) -> Option<Raw<'_>> {
    (raw.get() != "null").then_some(raw)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openai::{parse_request, parse_request_by_serde, Endpoint, ROUTABLE_ENDPOINTS};

    /// Every endpoint whose body is JSON.
    fn endpoints() -> impl Iterator<Item = Endpoint> {
        ROUTABLE_ENDPOINTS
            .into_iter()
            .chain([Endpoint::Models, Endpoint::ResponseById])
            .filter(|e| !e.takes_form())
    }

    /// The gateway's answer for `body` is serde's, on every endpoint.
    fn assert_same(body: &[u8]) {
        for endpoint in endpoints() {
            assert_eq!(
                parse_request(endpoint, body),
                parse_request_by_serde(endpoint, body),
                "{endpoint:?} {:?}",
                String::from_utf8_lossy(body)
            );
        }
    }

    /// Bodies clients send every day: the scanner reads them itself.
    const EVERYDAY: &[&str] = &[
        r#"{"model":"chat","stream":false,"max_tokens":16,"messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Say hello in one short sentence, please."}]}"#,
        r#"{"model":"chat","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"line one\nline \"two\" \u00e9 \ud83d\ude00"}],"temperature":0.7,"top_p":1e-3,"n":1,"stop":null}"#,
        r#" { "model" : "m" , "messages" : [ { "role" : "user" , "content" : [ {"type":"text","text":"a"} , {"type":"image_url","image_url":{"url":"data:,x"}} ] } ] } "#,
        r#"{"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]},{"role":"tool","tool_call_id":"c1","content":"42"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{}}}}]}"#,
        r#"{"model":"m","prompt":"Once upon a time","max_tokens":-1}"#,
        r#"{"model":"m","prompt":[1,2,3]}"#,
        r#"{"model":"m","input":["a","b"],"encoding_format":"float"}"#,
        r#"{"model":"m","instructions":"be brief","input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]}],"previous_response_id":"resp_1"}"#,
        r#"{"model":"m","system":"s","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}"#,
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"caf\u{e9} \u{1F600} \u{4E2D}\u{6587}\"}]}",
        r#"{"model":"m","messages":[]}"#,
        r#"{"model":"m","messages":null,"stream":null,"stream_options":null}"#,
        r#"{"model":"m","messages":"text","prompt":null}"#,
        r#"{"model":"m","messages":[{},[1,2],"x",true,null,{"role":"user","role":"system"}]}"#,
        r#"{"model":"m","messages":{"a":[1,{"b":2}]}}"#,
        r#"{"model":null}"#,
        r#"{"model":42,"stream":"true"}"#,
        r#"{"model":{"nested":["deep",[[]]]}}"#,
        r#"{"model":""}"#,
        r#"{}"#,
        r#"{"model":"a\/b\u0041"}"#,
    ];

    /// Bodies serde answers itself: invalid, or read in a way only it knows.
    const DECLINED: &[&[u8]] = &[
        br#"{"model":"m","model":"n"}"#,
        br#"{"model":"m","messages":[],"messages":[]}"#,
        br#"{"mod\u0065l":"m"}"#,
        br#"{"model":"m","messages":[{"r\u006fle":"user"}]}"#,
        br#"{"model":"m","messages":[{"role":"user","content":"\ud800"}]}"#,
        br#"{"model":"m","messages":[{"role":"user","content":1e400}]}"#,
        br#"{"model":"m","messages":[7]}"#,
        br#"{"model":"m","messages":7}"#,
        br#"{"model":"m","messages":["\n"]}"#,
        br#"{"model":"m",}"#,
        br#"{"model":"m"} x"#,
        br#"{"model":"m""#,
        br#"{"model":"m\x"}"#,
        br#"{"model":"m\u12"}"#,
        b"{\"model\":\"m\tn\"}",
        b"{\"model\":\"m\",\"x\":\"\xff\"}",
        b"\x0c{\"model\":\"m\"}",
        br#"{"model":"m","n":01}"#,
        br#"{"model":"m","n":1.}"#,
        br#"{"model":"m","n":-}"#,
        br#"{"model":"m","n":1e}"#,
        br#"{"model":"m","n":.5}"#,
        br#"{"model":"m","n":tru}"#,
        br#"{"model":"m","n":NaN}"#,
    ];

    #[test]
    fn everyday_bodies_are_scanned_and_read_as_serde_reads_them() {
        for body in EVERYDAY {
            assert!(envelope(body.as_bytes()).is_some(), "declined {body}");
            assert_same(body.as_bytes());
        }
    }

    #[test]
    fn what_only_serde_can_answer_is_left_to_it() {
        for body in DECLINED {
            assert!(
                envelope(body).is_none(),
                "scanned {:?}",
                String::from_utf8_lossy(body)
            );
            assert_same(body);
        }
    }

    #[test]
    fn nesting_past_the_scanners_limit_is_left_to_serde_and_past_serdes_refused() {
        for depth in [MAX_DEPTH - 2, MAX_DEPTH + 5, 127, 128, 129, 400] {
            let body = format!(
                r#"{{"model":"m","x":{}{}}}"#,
                "[".repeat(depth),
                "]".repeat(depth)
            );
            assert_eq!(
                envelope(body.as_bytes()).is_some(),
                depth < MAX_DEPTH,
                "{depth}"
            );
            assert_same(body.as_bytes());
        }
        let deep = format!(r#"{{"model":"m","x":{}}}"#, "[".repeat(200));
        assert!(matches!(
            parse_request(Endpoint::ChatCompletions, deep.as_bytes()),
            Err(crate::openai::RequestError::InvalidJson(_))
        ));
    }

    #[test]
    fn plain_runs_stop_at_quotes_backslashes_and_control_characters() {
        for (text, run) in [
            (&b"abcdefghijkl\"x"[..], 12),
            (b"abcdefgh\\", 8),
            (b"abc\x1fdefghij", 3),
            (b"\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\"", 10),
            (b"\x7f\x7f\x7f\x7f\x7f\x7f\x7f\x7f\x7f", 9),
            (b" !#$%&'()*+,-./0123456789:;<=>?@[]^_`{|}~\"", 41),
            (b"", 0),
            // The first of several in one word; a multi-byte character before it.
            (b"a\"\\\x00bcdefgh", 1),
            (b"ab\xc3\xa9\x01\"cd", 4),
            (b"\xff\xfe\x80\x81\xa0\xa2\xdc\x1f", 7),
        ] {
            assert_eq!(plain_run(text), run, "{:?}", String::from_utf8_lossy(text));
        }
        // Every byte at every offset of a word and of a 32-byte block, in
        // ASCII and in multi-byte text, with the bytes around the edges
        // that must pass.
        for special in [b'"', b'\\', 0x00, 0x0a, 0x1f] {
            for filler in [b'a', 0x20, 0x7f, 0x80, 0xe9, 0xff, b'!', b'#', b'[', b']'] {
                for len in [17, 40, 70] {
                    for at in 0..len {
                        let mut text = vec![filler; len];
                        text[at] = special;
                        assert_eq!(plain_run(&text), at, "{special:#x} at {at} in {filler:#x}");
                    }
                    assert_eq!(plain_run(&vec![filler; len]), len, "only {filler:#x}");
                }
            }
        }
        // Two in one block: the first counts.
        let mut text = vec![b'a'; 64];
        text[50] = b'"';
        text[35] = b'\\';
        assert_eq!(plain_run(&text), 35);
    }

    /// A small deterministic generator, so a failure replays.
    struct XorShift(u64);

    impl XorShift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    #[test]
    fn mutated_bodies_read_as_serde_reads_them() {
        // Bytes that change what JSON means, and a multi-byte character cut.
        const INTERESTING: &[u8] =
            b"{}[]\",:\\/ \n\t0123456789-+.eEtrufalsn\x00\x1f\x7f\xc3\xa9\xff";
        let mut random = XorShift(0x9E37_79B9_7F4A_7C15);
        let seeds: Vec<&[u8]> = EVERYDAY
            .iter()
            .map(|body| body.as_bytes())
            .chain(DECLINED.iter().copied())
            .collect();
        let mut scanned = 0;
        for round in 0..20_000 {
            let mut body = seeds[round % seeds.len()].to_vec();
            for _ in 0..1 + random.below(3) {
                let at = random.below(body.len() + 1);
                let byte = INTERESTING[random.below(INTERESTING.len())];
                match random.below(3) {
                    0 => body.insert(at, byte),
                    1 if at < body.len() => body[at] = byte,
                    _ if at < body.len() => {
                        body.remove(at);
                    }
                    _ => body.push(byte),
                }
            }
            if envelope(&body).is_some() {
                scanned += 1;
            }
            let endpoint = endpoints().nth(round % endpoints().count()).unwrap();
            assert_eq!(
                parse_request(endpoint, &body),
                parse_request_by_serde(endpoint, &body),
                "{endpoint:?} {:?}",
                String::from_utf8_lossy(&body)
            );
        }
        // The mutations leave many bodies valid: the scanner must have read
        // a good share of them itself, or this compared serde with serde.
        assert!(scanned > 2_000, "the scanner read only {scanned} of 20,000");
    }
}
