//! A string with escapes, as the envelope scanner leaves it: checked, not
//! yet decoded. A long prompt's text is read once into the conversation
//! (its digest and bounded routing text); decoding it into a string of its
//! own first would copy megabytes into fresh pages for nothing.

use super::plain_run::plain_run;
use super::prescan::Prescanned;

/// Decoded text is handed on in pieces of about this size: large enough
/// for the digest to hash in bulk, small enough to stay in cache.
const GATHER: usize = 16 * 1024;

/// Where the plain run of a string that starts at `at` in `text` ends: at
/// a quote, a backslash, a control character or the end. Through the
/// prescan's index when the body has one.
pub(super) fn plain_end(text: &str, index: Option<&Prescanned>, at: usize) -> usize {
    match index {
        Some(index) => index.plain_end(at),
        None => at + plain_run(&text.as_bytes()[at..]),
    }
}

/// The text between a string literal's quotes, with escapes that
/// `Scanner::string` checked: each is one of JSON's, and every `\u`
/// escape of a surrogate is half of a pair.
#[derive(Clone, Copy)]
pub struct Escaped<'a> {
    /// The whole body, so that the index's positions apply.
    body: &'a str,
    from: usize,
    to: usize,
    index: Option<&'a Prescanned>,
}

impl<'a> Escaped<'a> {
    /// The literal's text at `from..to` of `body` (quotes excluded), which
    /// the scanner checked as described on the type.
    pub(super) fn checked(
        body: &'a str,
        from: usize,
        to: usize,
        index: Option<&'a Prescanned>,
    ) -> Self {
        Self {
            body,
            from,
            to,
            index,
        }
    }

    /// The decoded text, handed to `sink` in order and in pieces that
    /// each end on a character boundary: plain runs as they stand (a long
    /// one whole), escapes decoded and gathered with the short runs
    /// around them.
    pub fn decode(&self, mut sink: impl FnMut(&str)) {
        let bytes = self.body.as_bytes();
        let mut gathered = String::new();
        let mut at = self.from;
        loop {
            let run = plain_end(self.body, self.index, at).min(self.to);
            let plain = &self.body[at..run];
            if gathered.len() + plain.len() > GATHER && !gathered.is_empty() {
                sink(&gathered);
                gathered.clear();
            }
            if plain.len() >= GATHER {
                sink(plain);
            } else {
                if gathered.capacity() == 0 {
                    gathered.reserve(GATHER + 4);
                }
                gathered.push_str(plain);
            }
            if run == self.to {
                break;
            }
            let (decoded, len) = unescape(&bytes[run..]);
            gathered.push(decoded);
            at = run + len;
        }
        if !gathered.is_empty() {
            sink(&gathered);
        }
    }
}

/// The character the checked escape at the start of `escape` stands for,
/// and the escape's length.
fn unescape(escape: &[u8]) -> (char, usize) {
    match escape[1] {
        b'"' => ('"', 2),
        b'\\' => ('\\', 2),
        b'/' => ('/', 2),
        b'b' => ('\u{8}', 2),
        b'f' => ('\u{c}', 2),
        b'n' => ('\n', 2),
        b'r' => ('\r', 2),
        b't' => ('\t', 2),
        _ => {
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
    }
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
    use bytes::Bytes;

    use super::*;
    use crate::openai::prescan::Prescan;

    /// `text`'s pieces, decoded from a body that is the literal alone, with
    /// and without the prescan's index.
    fn pieces(text: &str) -> [Vec<String>; 2] {
        let literal = format!("\"{text}\"");
        let prescanned = Prescan::with_pieces(literal.len(), &[Bytes::from(literal.clone())])
            .finish()
            .expect("UTF-8");
        [None, Some(&prescanned)].map(|index| {
            let mut pieces = Vec::new();
            Escaped::checked(&literal, 1, literal.len() - 1, index)
                .decode(|piece| pieces.push(piece.to_owned()));
            pieces
        })
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
            for pieces in pieces(&text) {
                assert_eq!(pieces.concat(), expected);
                assert!(pieces.iter().all(|piece| !piece.is_empty()));
            }
        }
    }

    #[test]
    fn short_runs_are_gathered_and_a_long_one_handed_on_whole() {
        for pieces in pieces(&"word\\n".repeat(20_000)) {
            assert!(pieces.len() > 1, "{} bytes in one piece", pieces[0].len());
            assert!(pieces.iter().all(|piece| piece.len() <= GATHER + 4));
        }
        let long_run = "b".repeat(3 * GATHER);
        for pieces in pieces(&format!("a\\n{long_run}\\tc")) {
            assert_eq!(pieces, ["a\n", long_run.as_str(), "\tc"]);
        }
    }
}
