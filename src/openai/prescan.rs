//! What the envelope scanner can learn of a body while the rest of it is
//! still arriving.
//!
//! A large body comes in many reads, and the client takes longer to send it
//! than the gateway takes to read each piece. Work that waits for the last
//! byte adds to the request's time; work done piece by piece, between
//! reads, does not. So a body of several pieces is appended to one buffer
//! as it comes ([`Prescan::push`]), its UTF-8 is checked up to the last
//! whole character, and every 64-byte block is indexed by where a string
//! would stop: a quote, a backslash or a control character. Once the body
//! is whole ([`Prescan::finish`]) the scanner neither checks its UTF-8
//! again nor reads a string's plain run byte by byte: it jumps through the
//! index ([`Prescanned::plain_end`]): a plain 4 MiB prompt is 65,536 word
//! reads, and a prompt full of escapes one read per escape.

use bytes::{Bytes, BytesMut};

use super::plain_run::plain_run;

/// The bytes an index word covers.
const BLOCK: usize = 64;

/// A body being received: the bytes so far, in one buffer, and what is
/// known of them.
pub struct Prescan {
    buffer: BytesMut,
    /// `buffer[..utf8_to]` is valid UTF-8.
    utf8_to: usize,
    /// A byte sequence no later byte can make valid was met.
    utf8_broken: bool,
    /// Bit `i` of word `w`: byte `64 w + i` ends a plain run. Whole blocks
    /// only; the tail past them is read as it stands. An eighth of the
    /// body's size, dropped with the `Prescanned` once the body is parsed.
    specials: Vec<u64>,
}

impl Prescan {
    /// A body expected to be `len` bytes long in all, its first pieces
    /// `pieces`.
    pub fn with_pieces(len: usize, pieces: &[Bytes]) -> Self {
        let mut prescan = Self {
            buffer: BytesMut::with_capacity(len),
            utf8_to: 0,
            utf8_broken: false,
            specials: Vec::with_capacity(len / BLOCK),
        };
        for piece in pieces {
            prescan.buffer.extend_from_slice(piece);
        }
        prescan.read();
        prescan
    }

    /// Appends the next piece of the body and reads it.
    pub fn push(&mut self, piece: &[u8]) {
        self.buffer.extend_from_slice(piece);
        self.read();
    }

    /// Reads what was appended since the last call.
    fn read(&mut self) {
        let bytes = &self.buffer[..];
        if !self.utf8_broken && self.utf8_to < bytes.len() {
            match simdutf8::compat::from_utf8(&bytes[self.utf8_to..]) {
                Ok(_) => self.utf8_to = bytes.len(),
                // A character cut at the end of the piece is checked again
                // with the next; anything else is broken for good.
                Err(e) => {
                    self.utf8_to += e.valid_up_to();
                    self.utf8_broken = e.error_len().is_some();
                }
            }
        }
        let whole = bytes.len() / BLOCK * BLOCK;
        let from = self.specials.len() * BLOCK;
        self.specials.extend(
            bytes[from..whole]
                .chunks_exact(BLOCK)
                .map(|block| special_bits(block.try_into().expect("a whole block"))),
        );
    }

    /// The whole body, prescanned when it is valid UTF-8; else the body,
    /// for the parser to refuse as it refuses any other.
    pub fn finish(self) -> Result<Prescanned, Bytes> {
        let body = self.buffer.freeze();
        if self.utf8_broken || self.utf8_to != body.len() {
            return Err(body);
        }
        Ok(Prescanned {
            body,
            specials: self.specials,
        })
    }
}

/// A whole body that [`Prescan`] read: valid UTF-8, with where its plain
/// runs end.
#[derive(Debug)]
pub struct Prescanned {
    /// Valid UTF-8 ([`Prescan::finish`] checked), and never changed.
    body: Bytes,
    specials: Vec<u64>,
}

impl Prescanned {
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    pub fn into_body(self) -> Bytes {
        self.body
    }

    /// The body as text, without checking it again.
    pub fn text(&self) -> &str {
        // SAFETY: a `Prescanned` is made only by `Prescan::finish`, which
        // found every byte of the body to be valid UTF-8, and `Bytes` is
        // immutable.
        unsafe { std::str::from_utf8_unchecked(&self.body) }
    }

    /// Where the plain run that starts at `at` ends: as
    /// `at + plain_run(&body[at..])`, read from the index.
    pub fn plain_end(&self, at: usize) -> usize {
        let mut word = at / BLOCK;
        let Some(&first) = self.specials.get(word) else {
            return at + plain_run(&self.body[at.min(self.body.len())..]);
        };
        let mut bits = first & (!0u64 << (at % BLOCK));
        loop {
            if bits != 0 {
                return word * BLOCK + bits.trailing_zeros() as usize;
            }
            word += 1;
            match self.specials.get(word) {
                Some(&next) => bits = next,
                None => {
                    let indexed = word * BLOCK;
                    return indexed + plain_run(&self.body[indexed..]);
                }
            }
        }
    }
}

/// One bit per byte of `block` (bit `i` for byte `i`) at which a plain run
/// stops: what [`plain_run`] stops at, by the same comparisons.
#[inline(always)]
fn special_bits(block: &[u8; BLOCK]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        let mut bits = 0;
        for (i, sixteen) in block.chunks_exact(16).enumerate() {
            let sixteen = sixteen.try_into().expect("16 bytes");
            bits |= u64::from(super::plain_run::specials_16(sixteen)) << (16 * i);
        }
        bits
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        block.iter().enumerate().fold(0, |bits, (i, &byte)| {
            let special = byte == b'"' || byte == b'\\' || byte < 0x20;
            bits | u64::from(special) << i
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `body` received in pieces of the sizes `cuts` cycles through.
    fn received(body: &[u8], cuts: &[usize]) -> Result<Prescanned, Bytes> {
        let first = cuts[0].min(body.len());
        let mut prescan =
            Prescan::with_pieces(body.len(), &[Bytes::copy_from_slice(&body[..first])]);
        let mut at = first;
        for &cut in cuts.iter().cycle().skip(1) {
            if at == body.len() {
                break;
            }
            let end = (at + cut.max(1)).min(body.len());
            prescan.push(&body[at..end]);
            at = end;
        }
        assert_eq!(prescan.buffer.len(), body.len());
        prescan.finish()
    }

    #[test]
    fn the_index_ends_every_plain_run_where_a_byte_by_byte_read_does() {
        let mut random = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || {
            random ^= random << 13;
            random ^= random >> 7;
            random ^= random << 17;
            random
        };
        for round in 0..300 {
            let len = (next() % 700) as usize;
            // Mostly plain text, with specials rare or dense by round.
            let density = [2, 20, 200, 5000][round % 4];
            let body: Vec<u8> = (0..len)
                .map(|_| match next() % density {
                    0 => [b'"', b'\\', b'\n', 0x00, 0x1f][(next() % 5) as usize],
                    _ => [b'a', b' ', b'~', 0x7f][(next() % 4) as usize],
                })
                .collect();
            let prescanned =
                received(&body, &[1 + (next() % 150) as usize, 64, 7]).expect("ASCII is UTF-8");
            assert_eq!(&prescanned.body()[..], &body[..]);
            for at in 0..=len {
                assert_eq!(
                    prescanned.plain_end(at),
                    at + plain_run(&body[at..]),
                    "round {round}, at {at} of {len}"
                );
            }
        }
    }

    #[test]
    fn utf8_is_checked_across_the_cuts_between_pieces() {
        let text = "caf\u{e9} \u{1F600} \u{4E2D}\u{6587} ".repeat(40);
        for cut in 1..9 {
            let prescanned = received(text.as_bytes(), &[cut]).expect("valid");
            assert_eq!(prescanned.text(), text);
        }
        let mut broken = text.clone().into_bytes();
        broken[300] = 0xff;
        let mut truncated = text.clone().into_bytes();
        truncated.truncate(text.len() - 2);
        let lone = [text.as_bytes(), b"\xc3"].concat();
        for body in [broken, truncated, lone] {
            for cut in [1, 3, 64, 5000] {
                let refused = received(&body, &[cut]).expect_err("invalid UTF-8 prescanned");
                assert_eq!(&refused[..], &body[..], "the body handed back changed");
            }
        }
    }
}
