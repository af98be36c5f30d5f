//! A string with escapes, as the envelope scanner leaves it: checked, not
//! yet decoded. A long prompt's text is read once into the conversation
//! (its digest and bounded routing text); decoding it into a string of its
//! own first would copy megabytes into fresh pages for nothing.

/// Decoded text is handed on in pieces of about this size: large enough
/// for the digest to hash in bulk, small enough to stay in cache.
const GATHER: usize = 16 * 1024;

/// The text between a string literal's quotes, with escapes that
/// `Scanner::string` checked: each is one of JSON's, and every `\u`
/// escape of a surrogate is half of a pair.
#[derive(Clone, Copy)]
pub struct Escaped<'a> {
    /// The whole body: a window may read past the literal.
    body: &'a str,
    from: usize,
    to: usize,
    /// The decoded text's length, when it was counted already.
    decoded_len: Option<usize>,
}

impl<'a> Escaped<'a> {
    /// The literal's text at `from..to` of `body` (quotes excluded), which
    /// the scanner checked as described on the type.
    pub(super) fn checked(body: &'a str, from: usize, to: usize) -> Self {
        Self {
            body,
            from,
            to,
            decoded_len: None,
        }
    }

    /// [`checked`](Self::checked), its decoded length known: the prescan's
    /// index counted its escapes, so nothing reads the text again only to
    /// count it.
    pub(super) fn counted(body: &'a str, from: usize, to: usize, decoded_len: usize) -> Self {
        Self {
            decoded_len: Some(decoded_len),
            ..Self::checked(body, from, to)
        }
    }

    /// What is left from `from`, once `decoded` bytes of the text before
    /// it were decoded.
    fn rest(&self, from: usize, decoded: usize) -> Self {
        Self {
            from,
            decoded_len: self.decoded_len.map(|len| len.saturating_sub(decoded)),
            ..*self
        }
    }

    /// The decoded text, handed to `sink` in order and in pieces that
    /// each end on a character boundary: plain runs as they stand (a long
    /// one whole), escapes decoded and gathered with the short runs
    /// around them.
    pub fn decode(&self, sink: impl FnMut(&str)) {
        self.decode_some(usize::MAX, sink);
    }

    /// [`decode`](Self::decode) of the text's beginning, at least `want`
    /// bytes of it once decoded (or all of it); returns the rest, not
    /// decoded. A route that reads only the conversation's first bytes
    /// and its length decodes no more than those bytes and counts the
    /// rest ([`decoded_len`](Self::decoded_len)).
    ///
    /// The text is walked 64 bytes at a time by its backslashes, a bit per
    /// byte: the next escape is the lowest bit left, so finding it does not
    /// wait on the escape before it, and a document's escapes a few words
    /// apart decode at the pace of their copies rather than one lookup
    /// after another.
    pub fn decode_some(&self, want: usize, mut sink: impl FnMut(&str)) -> Escaped<'a> {
        let bytes = self.body.as_bytes();
        let mut gathered = Gathered::for_text(self.to - self.from);
        // The next byte to hand on: past the last escape.
        let mut at = self.from;
        let mut block = self.from;
        while block < self.to {
            if gathered.decoded() >= want {
                gathered.flush(&mut sink);
                return self.rest(at, gathered.decoded());
            }
            let mut bits = backslashes(bytes, block);
            if self.to - block < 64 {
                bits &= (1 << (self.to - block)) - 1;
            }
            while bits != 0 {
                let escape = block + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                // A backslash that the one before it escapes, or a low
                // surrogate's, taken with its pair.
                if escape < at {
                    continue;
                }
                gathered.push_plain(self.body, at, escape, &mut sink);
                at = escape + gathered.push_escape(&bytes[escape..]);
            }
            block += 64;
        }
        gathered.push_plain(self.body, at, self.to, &mut sink);
        gathered.flush(&mut sink);
        self.rest(self.to, gathered.decoded())
    }

    /// The length of the decoded text: as the prescan counted it, or
    /// counted here without decoding it, the literal's length less what
    /// each escape saves. A block of 64 bytes whose escapes are all short
    /// ones, none escaping a backslash, saves a byte per backslash,
    /// counted in one go; a document's `\n` and `\"` are that case.
    pub fn decoded_len(&self) -> usize {
        if let Some(len) = self.decoded_len {
            return len;
        }
        let bytes = self.body.as_bytes();
        let mut len = self.to - self.from;
        // Past the last escape counted one by one.
        let mut at = self.from;
        let mut block = self.from;
        while block < self.to {
            let (mut bits, mut unicode) = backslashes_and_us(bytes, block);
            if self.to - block < 64 {
                let within = (1 << (self.to - block)) - 1;
                bits &= within;
                unicode &= within;
            }
            // Each backslash starts a two-byte escape that ends in this
            // block: none follows another (`\\`), none is the block's
            // last byte, none is a `\u`, and none was taken by an escape
            // of the block before.
            let short_only =
                at <= block && bits & (bits << 1 | 1 << 63) == 0 && (bits << 1) & unicode == 0;
            if short_only {
                len -= bits.count_ones() as usize;
            } else {
                while bits != 0 {
                    let escape = block + bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    if escape < at {
                        continue;
                    }
                    let (decoded, escape_len) = match SHORT_ESCAPES[usize::from(bytes[escape + 1])]
                    {
                        0 => {
                            let (decoded, escape_len) = unescape_unicode(&bytes[escape..]);
                            (decoded.len_utf8(), escape_len)
                        }
                        _ => (1, 2),
                    };
                    len -= escape_len - decoded;
                    at = escape + escape_len;
                }
            }
            block += 64;
        }
        len
    }
}

/// The backslashes among the 64 bytes of `bytes` from `at` (fewer at its
/// end), a bit per byte.
#[inline(always)]
fn backslashes(bytes: &[u8], at: usize) -> u64 {
    bits_of(bytes, at, b'\\')
}

/// [`backslashes`], and the `u`s of `\u` escapes among the same bytes.
#[inline(always)]
fn backslashes_and_us(bytes: &[u8], at: usize) -> (u64, u64) {
    (bits_of(bytes, at, b'\\'), bits_of(bytes, at, b'u'))
}

/// Where `byte` is among the 64 bytes of `bytes` from `at` (fewer at its
/// end), a bit per byte.
#[inline(always)]
fn bits_of(bytes: &[u8], at: usize, byte: u8) -> u64 {
    match bytes.get(at..at + 64) {
        Some(block) => block
            .chunks_exact(16)
            .enumerate()
            .fold(0, |bits, (i, sixteen)| {
                let sixteen = sixteen.try_into().expect("16 bytes");
                bits | u64::from(super::plain_run::equal_16(sixteen, byte)) << (16 * i)
            }),
        None => bytes[at..]
            .iter()
            .enumerate()
            .fold(0, |bits, (i, &each)| bits | u64::from(each == byte) << i),
    }
}

/// How many bytes a short run is copied in, whatever its length: one
/// fixed-size copy (two vector moves) instead of a call to `memcpy` per
/// run. A document's escapes stand a line or a few words apart, so most
/// runs are short and their number is the cost.
const WINDOW: usize = 32;

/// Decoded text gathered into pieces for the sink.
struct Gathered {
    buffer: Vec<u8>,
    len: usize,
    /// Bytes handed on so far.
    handed: usize,
}

impl Gathered {
    /// Room for the decoded text of an escaped text of `len` bytes, or a
    /// piece of it, and a window past it. Decoding never lengthens a text
    /// (an escape's character is shorter than the escape), so what is
    /// gathered stays within `len`; a piece within `GATHER` bytes and the
    /// character that may follow it.
    fn for_text(len: usize) -> Self {
        Self {
            buffer: vec![0; len.min(GATHER) + WINDOW],
            len: 0,
            handed: 0,
        }
    }

    /// Bytes decoded so far: handed on or gathered.
    fn decoded(&self) -> usize {
        self.handed + self.len
    }

    /// Appends `body[at..run]`, a plain run: gathered when it is shorter
    /// than a piece, else handed on whole after what was gathered.
    #[inline(always)]
    fn push_plain(&mut self, body: &str, at: usize, run: usize, sink: &mut impl FnMut(&str)) {
        let len = run - at;
        if len >= GATHER || self.len + len > GATHER {
            self.flush(sink);
            if len >= GATHER {
                sink(&body[at..run]);
                self.handed += len;
                return;
            }
        }
        let bytes = body.as_bytes();
        // The window may copy bytes past the run; what it wrote past
        // `len` is overwritten by what comes next, or never read.
        match bytes.get(at..at + WINDOW) {
            Some(window) if len <= WINDOW => {
                self.buffer[self.len..self.len + WINDOW].copy_from_slice(window)
            }
            _ => self.buffer[self.len..self.len + len].copy_from_slice(&bytes[at..run]),
        }
        self.len += len;
    }

    /// Appends the character the checked escape at the start of `escape`
    /// stands for; returns the escape's length.
    #[inline(always)]
    fn push_escape(&mut self, escape: &[u8]) -> usize {
        match SHORT_ESCAPES[usize::from(escape[1])] {
            0 => {
                let (decoded, len) = unescape_unicode(escape);
                let end = self.len + decoded.len_utf8();
                decoded.encode_utf8(&mut self.buffer[self.len..end]);
                self.len = end;
                len
            }
            byte => {
                self.buffer[self.len] = byte;
                self.len += 1;
                2
            }
        }
    }

    /// Hands what was gathered to `sink`.
    fn flush(&mut self, sink: &mut impl FnMut(&str)) {
        if self.len == 0 {
            return;
        }
        // Runs are cut at ASCII bytes of a valid UTF-8 body and escapes
        // add whole characters, so this holds; checked all the same, at a
        // small fraction of the decode's cost.
        match simdutf8::basic::from_utf8(&self.buffer[..self.len]) {
            Ok(text) => sink(text),
            Err(_) => sink(&String::from_utf8_lossy(&self.buffer[..self.len])),
        }
        self.handed += self.len;
        self.len = 0;
    }
}

/// What each byte after a backslash stands for in one of JSON's short
/// escapes (`"\\/bfnrt`); 0 for any other, `u` among them.
pub(super) const SHORT_ESCAPES: [u8; 256] = {
    let mut table = [0; 256];
    let pairs = [
        (b'"', b'"'),
        (b'\\', b'\\'),
        (b'/', b'/'),
        (b'b', 0x08),
        (b'f', 0x0c),
        (b'n', b'\n'),
        (b'r', b'\r'),
        (b't', b'\t'),
    ];
    let mut i = 0;
    while i < pairs.len() {
        table[pairs[i].0 as usize] = pairs[i].1;
        i += 1;
    }
    table
};

/// The character the checked `\u` escape (of a pair, for a surrogate) at
/// the start of `escape` stands for, and the escape's length.
fn unescape_unicode(escape: &[u8]) -> (char, usize) {
    let unit = hex4(&escape[2..6]);
    let (code, len) = match unit {
        0xD800..=0xDBFF => {
            let low = hex4(&escape[8..12]);
            (0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00), 12)
        }
        _ => (unit, 6),
    };
    (
        char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER),
        len,
    )
}

/// The value of four hex digits the scanner checked.
pub(super) fn hex4(digits: &[u8]) -> u32 {
    digits[..4].iter().fold(0, |value, &digit| {
        let nibble = match digit {
            b'0'..=b'9' => digit - b'0',
            b'a'..=b'f' => digit - b'a' + 10,
            _ => digit - b'A' + 10,
        };
        value << 4 | u32::from(nibble)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `text`'s pieces, decoded from a body that is the literal alone.
    fn pieces(text: &str) -> Vec<String> {
        let literal = format!("\"{text}\"");
        let mut pieces = Vec::new();
        Escaped::checked(&literal, 1, literal.len() - 1)
            .decode(|piece| pieces.push(piece.to_owned()));
        pieces
    }

    #[test]
    fn pieces_join_into_what_serde_decodes() {
        let long_run = "a".repeat(GATHER + 100);
        for text in [
            r#"\"\\\/\b\f\n\r\t"#.to_owned(),
            r#"\u0000\u001f\u0041\u00e9\u4e2d\uFFFF\ud83d\ude00\uDBFF\uDFFF"#.repeat(900),
            "line of a document\\n".repeat(4000),
            format!("\\n{long_run}\\t{long_run}"),
            "caf\u{e9} \u{1F600}\\n".repeat(3000),
        ] {
            let expected: String = serde_json::from_str(&format!("\"{text}\"")).expect("valid");
            let pieces = pieces(&text);
            assert_eq!(pieces.concat(), expected);
            assert!(pieces.iter().all(|piece| !piece.is_empty()));
        }
    }

    /// Runs of every length around the copy window's, between escapes of
    /// each kind, in a body that goes on after the string (so the window
    /// reads past it) and in one that ends right after it.
    #[test]
    fn runs_of_any_length_decode_as_serde_does() {
        let pieces_of_text = [
            "x",
            r"\u00e9",
            r"\n",
            r"\\",
            r#"\""#,
            r"\ud83d\ude00",
            r"\u4e2d",
            "é",
            "中",
            "u",
            r"\\u",
        ];
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = |bound: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % bound as u64) as usize
        };
        for round in 0..300 {
            let mut text = String::new();
            let target = if round % 10 == 0 { 3 * GATHER } else { 200 };
            while text.len() < target {
                let run = next(2 * WINDOW + 3);
                text.push_str(&"r".repeat(run));
                text.push_str(pieces_of_text[next(pieces_of_text.len())]);
            }
            let expected: String = serde_json::from_str(&format!("\"{text}\"")).expect("valid");
            for tail in ["", "}]} and more than a window's worth of bytes after it"] {
                let body = format!("\"{text}\"{tail}");
                let escaped = Escaped::checked(&body, 1, text.len() + 1);
                let mut decoded = String::new();
                escaped.decode(|piece| decoded.push_str(piece));
                assert_eq!(decoded, expected, "round {round}, tail {tail:?}");
                assert_eq!(
                    escaped.decoded_len(),
                    expected.len(),
                    "round {round}, tail {tail:?}"
                );
                // Decoded in part, the rest counted: what a route that
                // skips the digest reads.
                let want = next(expected.len() + 2);
                let mut first = String::new();
                let rest = escaped.decode_some(want, |piece| first.push_str(piece));
                assert!(
                    first.len() >= want.min(expected.len()),
                    "round {round}: {} of {want}",
                    first.len()
                );
                assert_eq!(
                    first.len() + rest.decoded_len(),
                    expected.len(),
                    "round {round}"
                );
                rest.decode(|piece| first.push_str(piece));
                assert_eq!(first, expected, "round {round}, want {want}");
            }
        }
    }

    #[test]
    fn short_runs_are_gathered_and_a_long_one_handed_on_whole() {
        let gathered = pieces(&"word\\n".repeat(20_000));
        assert!(
            gathered.len() > 1,
            "{} bytes in one piece",
            gathered[0].len()
        );
        assert!(gathered.iter().all(|piece| piece.len() <= GATHER + 4));
        let long_run = "b".repeat(3 * GATHER);
        assert_eq!(
            pieces(&format!("a\\n{long_run}\\tc")),
            ["a\n", long_run.as_str(), "\tc"]
        );
    }
}
