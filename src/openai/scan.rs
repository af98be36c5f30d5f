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
//! which it checks and leaves to be decoded as it is read
//! ([`Escaped`]); a `\u` escape of a surrogate that is not half of a pair,
//! in any string, is left to serde. A content list's parts are kept as
//! they stand, and an object part's `type` and `text` read in the same
//! pass (its text like a `content` string); a part the scanner cannot
//! vouch for is left to serde on its own, the rest of the body not.

use std::borrow::Cow;

use super::envelope::Envelope;
use super::escaped::{hex4, Escaped};
use super::plain_run::plain_run;
use super::prescan::Prescanned;
use super::raw::Raw;
use super::turns::{text, Content, Part, PartFields, PartText, Turn, Turns};

/// Nesting the scanner follows; serde's limit is 128.
const MAX_DEPTH: usize = 100;

/// The envelope of `body`, when the scanner can vouch for it.
pub fn envelope(body: &[u8]) -> Option<Envelope<'_>> {
    // simdutf8 checks 32 bytes per instruction where the processor can
    // (chosen at run time); `std`'s check took a third of a large prompt's
    // scan.
    let text = simdutf8::basic::from_utf8(body).ok()?;
    Scanner {
        text,
        at: 0,
        index: None,
    }
    .whole()
}

/// [`envelope`] of a body read as it arrived: its UTF-8 is already
/// checked, and its strings' plain runs are read from the index.
pub fn envelope_prescanned(body: &Prescanned) -> Option<Envelope<'_>> {
    Scanner {
        text: body.text(),
        at: 0,
        index: Some(body),
    }
    .whole()
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
    /// The decoded text's length, when the prescan's index counted the
    /// escapes.
    decoded_len: Option<usize>,
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
    /// Where the body's plain runs end, when it was prescanned.
    index: Option<&'a Prescanned>,
}

impl<'a> Scanner<'a> {
    /// The envelope, and nothing but whitespace after it.
    fn whole(mut self) -> Option<Envelope<'a>> {
        let envelope = self.envelope()?;
        self.whitespace();
        (self.at == self.text.len()).then_some(envelope)
    }

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
            b'"' => Some(Some(match self.string_text()? {
                PartText::Decoded(text) => Content::Text(text),
                PartText::Escaped(text) => Content::Escaped(text),
            })),
            b'[' => {
                let mut parts = Vec::with_capacity(2);
                self.array(|scanner| {
                    parts.push(scanner.part(depth + 1)?);
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

    /// One element of a content list, at nesting `depth`, kept as it
    /// stands, with its `type` and `text` when it is an object serde would
    /// read them from as the scanner does: each at most once, `type` a
    /// plain string or `null`, `text` a string or `null`, and neither a
    /// key the scanner cannot compare undecoded nor a tool result's
    /// `content` or `tool_use_id` (which Messages reads). Anything else is
    /// left to serde ([`Part::raw`]), which also reads a list as a part's
    /// fields in order.
    fn part(&mut self, depth: usize) -> Option<Part<'a>> {
        let from = self.at;
        if self.peek()? != b'{' || depth > MAX_DEPTH {
            return self.raw(depth).map(Part::raw);
        }
        let mut fields = PartFields::default();
        let mut readable = true;
        let [mut kind_seen, mut text_seen] = [false; 2];
        self.object(|scanner, key| {
            match key.plain() {
                Some("type") if !kind_seen => {
                    kind_seen = true;
                    match scanner.peek()? {
                        b'"' => match scanner.string()?.plain() {
                            Some(kind) => fields.kind = Some(Cow::Borrowed(kind)),
                            None => readable = false,
                        },
                        b'n' => scanner.literal("null")?,
                        _ => {
                            readable = false;
                            scanner.skip(depth + 1)?;
                        }
                    }
                }
                Some("text") if !text_seen => {
                    text_seen = true;
                    match scanner.peek()? {
                        b'"' => fields.text = Some(scanner.string_text()?),
                        b'n' => scanner.literal("null")?,
                        _ => {
                            readable = false;
                            scanner.skip(depth + 1)?;
                        }
                    }
                }
                Some("type" | "text" | "content" | "tool_use_id") | None => {
                    readable = false;
                    scanner.skip(depth + 1)?;
                }
                Some(_) => scanner.skip(depth + 1)?,
            }
            Some(())
        })?;
        Some(Part {
            raw: Raw::checked(self.slice(from)),
            fields: readable.then_some(fields),
        })
    }

    /// A string whose text routing reads (a `content`, a part's `text`):
    /// borrowed, or checked and left to be decoded as it is read.
    fn string_text(&mut self) -> Option<PartText<'a>> {
        let text = self.string()?;
        if let Some(plain) = text.plain() {
            return Some(PartText::Decoded(Cow::Borrowed(plain)));
        }
        let (from, to) = (self.at - text.literal.len() + 1, self.at - 1);
        Some(PartText::Escaped(match text.decoded_len {
            Some(decoded_len) => Escaped::counted(self.text, from, to, decoded_len),
            None => Escaped::checked(self.text, from, to),
        }))
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

    /// Where the plain run of a string from `at` ends: at a quote, a
    /// backslash, a control character or the end. Through the prescan's
    /// index when the body has one.
    fn plain_end(&self, at: usize) -> usize {
        match self.index {
            Some(index) => index.plain_end(at),
            None => at + plain_run(&self.text.as_bytes()[at..]),
        }
    }

    /// A string literal: no control characters, only JSON's escapes, and
    /// no surrogate escape that is not half of a pair (serde refuses those
    /// where it decodes the string, so the scanner leaves them to it).
    fn string(&mut self) -> Option<Text<'a>> {
        let bytes = self.text.as_bytes();
        let from = self.at;
        self.eat(b'"')?;
        if let Some((end, escapes)) = self.index.and_then(|index| index.string_end(self.at)) {
            let decoded_len = end - self.at - escapes;
            self.at = end + 1;
            return Some(Text {
                literal: self.slice(from),
                escaped: escapes > 0,
                decoded_len: Some(decoded_len),
            });
        }
        let mut at = self.at;
        let mut escaped = false;
        loop {
            at = self.plain_end(at);
            match *bytes.get(at)? {
                b'"' => {
                    self.at = at + 1;
                    return Some(Text {
                        literal: self.slice(from),
                        escaped,
                        decoded_len: None,
                    });
                }
                b'\\' => {
                    escaped = true;
                    at += match *bytes.get(at + 1)? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => 2,
                        b'u' => unicode_escape(&bytes[at..])?,
                        _ => return None,
                    };
                }
                // A control character.
                _ => return None,
            }
        }
    }
}

/// The length of the `\u` escape at the start of `escape`: 6, or 12 for
/// a surrogate pair; `None` for digits that are not hex or a surrogate
/// that is not half of a pair.
fn unicode_escape(escape: &[u8]) -> Option<usize> {
    let unit = |at: usize| {
        let digits = escape.get(at..at + 4)?;
        digits
            .iter()
            .all(u8::is_ascii_hexdigit)
            .then(|| hex4(digits))
    };
    match unit(2)? {
        0xD800..=0xDBFF => {
            let low = (escape.get(6..8)? == b"\\u").then(|| unit(8))??;
            (0xDC00..=0xDFFF).contains(&low).then_some(12)
        }
        0xDC00..=0xDFFF => None,
        _ => Some(6),
    }
}

/// A value as serde reads it into an `Option`: `null` is `None`.
fn non_null(raw: Raw<'_>) -> Option<Raw<'_>> {
    (raw.get() != "null").then_some(raw)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openai::prescan::Prescan;
    use crate::openai::{
        parse_prescanned, parse_request, parse_request_by_serde, Endpoint, ParsedRequest,
        RequestError, ROUTABLE_ENDPOINTS,
    };
    use bytes::Bytes;

    /// Every endpoint whose body is JSON.
    fn endpoints() -> impl Iterator<Item = Endpoint> {
        ROUTABLE_ENDPOINTS
            .into_iter()
            .chain([Endpoint::Models, Endpoint::ResponseById])
            .filter(|e| !e.takes_form())
    }

    /// The gateway's answer for `body` is serde's, on every endpoint,
    /// whether it came whole or in pieces (prescanned).
    fn assert_same(body: &[u8]) {
        for endpoint in endpoints() {
            let serde = parse_request_by_serde(endpoint, body);
            assert_eq!(
                parse_request(endpoint, body),
                serde,
                "{endpoint:?} {:?}",
                String::from_utf8_lossy(body)
            );
            for cut in [1, 5, 64] {
                assert_eq!(
                    parse_arrived(endpoint, body, cut),
                    serde,
                    "{endpoint:?} in pieces of {cut}: {:?}",
                    String::from_utf8_lossy(body)
                );
            }
        }
    }

    /// `body` received in pieces of `cut` bytes, prescanned, as the
    /// gateway reads such a body: parsed from the prescan, or, when that
    /// found it is not UTF-8, as it stands.
    fn prescanned(body: &[u8], cut: usize) -> Result<Prescanned, Bytes> {
        let mut prescan = Prescan::with_pieces(body.len(), &[]);
        for piece in body.chunks(cut) {
            prescan.push(piece);
        }
        let prescanned = prescan.finish();
        assert_eq!(
            prescanned.is_ok(),
            std::str::from_utf8(body).is_ok(),
            "UTF-8 misjudged in pieces of {cut}"
        );
        prescanned
    }

    fn parse_arrived(
        endpoint: Endpoint,
        body: &[u8],
        cut: usize,
    ) -> Result<ParsedRequest, RequestError> {
        match prescanned(body, cut) {
            Ok(prescanned) => parse_prescanned(endpoint, &prescanned),
            Err(body) => parse_request(endpoint, &body),
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
        r#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"line\none \"q\"","cache_control":{"type":"ephemeral"}},{"text":"untyped"},{"type":null,"text":"a"},{"type":"text","text":null},{"type":"image_url","image_url":{"url":"data:,x","detail":"low"}},{"type":"input_audio","input_audio":{"data":"AAA","format":"wav"}}]}]}"#,
        r#"{"model":"m","max_tokens":8,"system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA"}},{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"42"}]},{"type":"tool_result","tool_use_id":"t2","content":"7"}]}]}"#,
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
            let prescanned = prescanned(body.as_bytes(), 3).unwrap();
            assert!(
                envelope_prescanned(&prescanned).is_some(),
                "declined prescanned {body}"
            );
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
            if let Ok(prescanned) = prescanned(body, 2) {
                assert!(
                    envelope_prescanned(&prescanned).is_none(),
                    "scanned prescanned {:?}",
                    String::from_utf8_lossy(body)
                );
            }
            assert_same(body);
        }
    }

    #[test]
    fn escaped_content_is_decoded_as_serde_decodes_it() {
        let chat = |content: &str| {
            format!(r#"{{"model":"m","messages":[{{"role":"user","content":"{content}"}}]}}"#)
        };
        for content in [
            r#"\"\\\/\b\f\n\r\t"#,
            r#"a\u0000b\u001fc\u0041\u00e9\u4e2d\uFFFF\uffFd"#,
            r#"pair \ud83d\ude00 and \uD834\uDD1E at the end \ud83d\ude00"#,
            r#"\n"#,
            r#"\\u0041"#,
            "caf\u{e9} \\n \u{1F600}\\t",
        ] {
            let body = chat(content);
            assert!(envelope(body.as_bytes()).is_some(), "declined {content}");
            assert_same(body.as_bytes());
        }
        // Surrogates serde refuses, or reads otherwise, are left to it.
        for content in [
            r#"\ud83d"#,
            r#"\ud83d tail"#,
            r#"\ud83d\u0041"#,
            r#"\ude00"#,
            r#"\ude00\ud83d"#,
            r#"\ud83d\ud83d"#,
            r#"\ud83d\n"#,
        ] {
            let body = chat(content);
            assert!(envelope(body.as_bytes()).is_none(), "scanned {content}");
            assert_same(body.as_bytes());
        }
    }

    #[test]
    fn content_parts_are_read_as_serde_reads_them() {
        // Read by the scanner, left to serde, refused by serde: each part
        // alone and all of them in one list, as chat's parts and as
        // Messages' blocks.
        let parts = [
            r#"{"type":"text","text":"a"}"#,
            r#"{"text":"no type","detail":[1,{"x":null}]}"#,
            r#"{"type":null,"text":"a"}"#,
            r#"{"type":"text","text":null}"#,
            r#"{"type":"text"}"#,
            r#"{}"#,
            r#"{"type":"input_text","text":"responses' kind"}"#,
            r#"{"type":"text","text":"tab\there \u00e9 \ud83d\ude00"}"#,
            r#"{"type":"image_url","image_url":{"url":"data:,x"},"text":"caption"}"#,
            r#"{"type":"text","text":"a","text":"b"}"#,
            r#"{"type":"text","type":"image_url","text":"a"}"#,
            r#"{"type":5,"text":"a"}"#,
            r#"{"type":"text","text":5}"#,
            r#"{"type":"text","text":["a"]}"#,
            r#"{"type":"text","text":{"a":1}}"#,
            r#"{"t\u0065xt":"escaped key"}"#,
            r#"{"type":"t\u0065xt","text":"escaped type"}"#,
            r#"["text","a list read as the fields in order"]"#,
            r#"["text"]"#,
            r#""a string""#,
            r#"7"#,
            r#"null"#,
            r#"{"type":"tool_result","tool_use_id":"t1","content":"result"}"#,
            r#"{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"r"}]}"#,
            r#"{"type":"tool_result"}"#,
            r#"{"type":"text","text":"a","content":null}"#,
            r#"{"type":"text","text":"a","tool_use_id":5}"#,
        ];
        let chat = |content: &str| {
            format!(r#"{{"model":"m","messages":[{{"role":"user","content":[{content}]}}]}}"#)
        };
        for part in parts {
            let body = chat(part);
            assert!(envelope(body.as_bytes()).is_some(), "declined {part}");
            assert_same(body.as_bytes());
        }
        assert_same(chat(&parts.join(",")).as_bytes());
        // The reading is not serde's by accident: a text part and its
        // plain string read alike, and differ from an image's.
        let read = |body: &str| parse_request(Endpoint::ChatCompletions, body.as_bytes());
        let as_part = read(&chat(r#"{"type":"text","text":"same"}"#));
        let as_string = read(r#"{"model":"m","messages":[{"role":"user","content":"same"}]}"#);
        let as_image = read(&chat(r#"{"type":"image_url","text":"same"}"#));
        assert_eq!(as_part, as_string);
        assert_ne!(as_part, as_image);
    }

    #[test]
    fn long_strings_read_from_the_index_as_serde_reads_them() {
        let texts = [
            "lorem ipsum ".repeat(400),
            // An escape every few bytes, as a document's newlines are.
            "line\\n".repeat(900),
            "caf\u{e9} \u{1F600} \u{4E2D}".repeat(300),
            format!("{}\\\"{}", "x".repeat(5000), "y".repeat(70)),
            // Longer than a decoded piece: a long run, then dense escapes.
            format!("{}\\n{}", "a".repeat(20_000), "b\\t".repeat(12_000)),
            "\\u00e9\\ud83d\\ude00 ".repeat(4000),
        ];
        for text in &texts {
            for body in [
                format!(r#"{{"model":"m","messages":[{{"role":"user","content":"{text}"}}]}}"#),
                format!(
                    r#"{{"model":"m","stream":true,"messages":[{{"role":"user","content":[{{"type":"text","text":"{text}"}}]}}]}}"#
                ),
                format!(r#"{{"model":"m","prompt":"{text}","input":"{text}","system":"{text}"}}"#),
                format!(r#"{{"x":"{text}","model":"m","instructions":"{text}"}}"#),
            ] {
                let prescanned = prescanned(body.as_bytes(), 4093).unwrap();
                assert!(
                    envelope_prescanned(&prescanned).is_some(),
                    "declined {}",
                    &body[..80]
                );
                assert_same(body.as_bytes());
            }
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
            let serde = parse_request_by_serde(endpoint, &body);
            assert_eq!(
                parse_request(endpoint, &body),
                serde,
                "{endpoint:?} {:?}",
                String::from_utf8_lossy(&body)
            );
            let cut = 1 + random.below(body.len() + 1);
            assert_eq!(
                parse_arrived(endpoint, &body, cut),
                serde,
                "{endpoint:?} in pieces of {cut}: {:?}",
                String::from_utf8_lossy(&body)
            );
        }
        // The mutations leave many bodies valid: the scanner must have read
        // a good share of them itself, or this compared serde with serde.
        assert!(scanned > 2_000, "the scanner read only {scanned} of 20,000");
    }
}
