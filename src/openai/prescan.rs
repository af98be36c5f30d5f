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
//!
//! The index also marks which quotes end a string (those no backslash
//! escapes) and what a string may not hold (a control character, an escape
//! JSON does not have) or that needs a closer look (a `\u` escape), so the
//! scanner finds where a string with escapes ends, that it is valid, and
//! how long it is decoded, without stopping at each escape
//! ([`Prescanned::string_end`]). Every 64 blocks are summed up as well
//! ([`Group`]), so a long string is walked 4 KiB at a time: the index of
//! a 4 MiB body is 2 MiB, long out of the cache by its last byte, and
//! reading all of it was most of the scanner's time after that byte.

use bytes::{Bytes, BytesMut};

use super::escaped::SHORT_ESCAPES;
use super::plain_run::plain_run;

/// The bytes an index word covers.
const BLOCK: usize = 64;
/// The blocks a [`Group`] sums up: 4 KiB of the body.
const GROUP: usize = 64;

/// A body being received: the bytes so far, in one buffer, and what is
/// known of them.
pub struct Prescan {
    buffer: BytesMut,
    /// `buffer[..utf8_to]` is valid UTF-8.
    utf8_to: usize,
    /// A byte sequence no later byte can make valid was met.
    utf8_broken: bool,
    /// The index, a [`Block`] per whole 64 bytes received, and one for
    /// the tail past them once the body is whole ([`Prescan::finish`]).
    /// Half the body's size, dropped with the `Prescanned` once the body
    /// is parsed.
    blocks: Vec<Block>,
    /// A [`Group`] per whole [`GROUP`] blocks.
    groups: Vec<Group>,
    /// The next block's first byte is escaped: the last one ended in a
    /// backslash run of odd length.
    carry: bool,
}

/// What the index knows of 64 bytes of the body, a bit per byte (bit `i`
/// for byte `64 w + i` of block `w`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Block {
    /// Where a plain run stops: a quote, a backslash, a control character.
    specials: u64,
    /// The quotes no backslash escapes: where a string ends.
    ends: u64,
    /// What a string may not hold as it stands: control characters, and
    /// characters a backslash escapes that are not one of JSON's short
    /// escapes (`u` among them, which needs a closer look).
    trouble: u64,
    /// The backslashes that begin an escape: in a string without trouble,
    /// each is a byte its decoded text does not have.
    escapes: u64,
}

/// What the index knows of [`GROUP`] blocks together: whether a plain run
/// or a string may stop in any of them, and their escapes, so that
/// [`Prescanned::plain_end`] and [`Prescanned::string_end`] step over the
/// whole group when nothing in it stops them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Group {
    /// The blocks' `specials`, or'ed: a plain run stops in the group.
    specials: bool,
    /// The blocks' `ends` and `trouble`, or'ed: a string ends in the
    /// group or is given up there.
    stops: bool,
    /// The escapes that begin in the group.
    escapes: u32,
}

impl Prescan {
    /// A body expected to be `len` bytes long in all, its first pieces
    /// `pieces`.
    pub fn with_pieces(len: usize, pieces: &[Bytes]) -> Self {
        let mut prescan = Self {
            buffer: BytesMut::with_capacity(len),
            utf8_to: 0,
            utf8_broken: false,
            blocks: Vec::with_capacity(len / BLOCK),
            groups: Vec::with_capacity(len / BLOCK / GROUP),
            carry: false,
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

    /// The buffer the body's next bytes may be appended to in place (read
    /// from the socket straight into it, rather than into a piece of their
    /// own and copied); [`Prescan::appended`] reads them. Only appended
    /// to: what it holds is what has been read.
    pub fn room(&mut self) -> &mut BytesMut {
        &mut self.buffer
    }

    /// Reads the bytes appended through [`Prescan::room`].
    pub fn appended(&mut self) {
        self.read();
    }

    /// Reads what was appended since the last call.
    fn read(&mut self) {
        let bytes = &self.buffer[..];
        debug_assert!(self.utf8_to <= bytes.len() && self.blocks.len() * BLOCK <= bytes.len());
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
        let from = self.blocks.len() * BLOCK;
        index(
            &bytes[from..whole],
            &mut self.blocks,
            &mut self.groups,
            &mut self.carry,
        );
    }

    /// The whole body, prescanned when it is valid UTF-8; else the body,
    /// for the parser to refuse as it refuses any other.
    pub fn finish(mut self) -> Result<Prescanned, Bytes> {
        if self.utf8_broken || self.utf8_to != self.buffer.len() {
            return Err(self.buffer.freeze());
        }
        // The tail is indexed too, padded with spaces (which no string
        // stops at): a long prompt's closing quote usually lies in the
        // body's last bytes, and a string the index cannot see the end of
        // is read escape by escape, all of it.
        let tail = &self.buffer[self.blocks.len() * BLOCK..];
        if !tail.is_empty() {
            let mut padded = [b' '; BLOCK];
            padded[..tail.len()].copy_from_slice(tail);
            index(&padded, &mut self.blocks, &mut self.groups, &mut self.carry);
        }
        Ok(Prescanned {
            body: self.buffer.freeze(),
            blocks: self.blocks,
            groups: self.groups,
        })
    }
}

/// A whole body that [`Prescan`] read: valid UTF-8, with where its plain
/// runs end.
#[derive(Debug)]
pub struct Prescanned {
    /// Valid UTF-8 ([`Prescan::finish`] checked), and never changed.
    body: Bytes,
    blocks: Vec<Block>,
    groups: Vec<Group>,
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
        let Some(first) = self.blocks.get(word).map(|block| block.specials) else {
            return at + plain_run(&self.body[at.min(self.body.len())..]);
        };
        let mut bits = first & (!0u64 << (at % BLOCK));
        loop {
            if bits != 0 {
                return word * BLOCK + bits.trailing_zeros() as usize;
            }
            word += 1;
            word = self.past_groups(word, |group| !group.specials, |_| ());
            match self.blocks.get(word) {
                Some(next) => bits = next.specials,
                // Past the padded tail: the body's end.
                None => return self.body.len(),
            }
        }
    }

    /// Where the string whose text starts at `from` (the byte after its
    /// opening quote) ends, its closing quote, and how many escapes it
    /// holds (all short ones, each a byte longer than its character), when
    /// nothing before that quote needs a closer look. `None` leaves
    /// the string to be read escape by escape: it holds a control
    /// character or an escape that is not one of JSON's short ones (a
    /// `\u` escape, or an invalid one), or the body ends first.
    pub fn string_end(&self, from: usize) -> Option<(usize, usize)> {
        let mut word = from / BLOCK;
        let mut from_here = !0u64 << (from % BLOCK);
        let mut escapes = 0;
        loop {
            if from_here == !0 {
                word = self.past_groups(
                    word,
                    |group| !group.stops,
                    |group| {
                        escapes += group.escapes as usize;
                    },
                );
            }
            let block = self.blocks.get(word)?;
            let ends = block.ends & from_here;
            // The bits before the first end, or all of them without one.
            let inside = from_here & ends.wrapping_sub(1) & !ends;
            if block.trouble & inside != 0 {
                return None;
            }
            escapes += (block.escapes & inside).count_ones() as usize;
            if ends != 0 {
                let end = word * BLOCK + ends.trailing_zeros() as usize;
                return Some((end, escapes));
            }
            word += 1;
            from_here = !0;
        }
    }

    /// The first block from `word` on that is not in a whole group `pass`
    /// lets by, each group passed handed to `passed`. Only a group's first
    /// block starts one: before it, `word` itself.
    #[inline(always)]
    fn past_groups(
        &self,
        mut word: usize,
        pass: impl Fn(&Group) -> bool,
        mut passed: impl FnMut(&Group),
    ) -> usize {
        if word % GROUP != 0 {
            return word;
        }
        while let Some(group) = self.groups.get(word / GROUP) {
            if !pass(group) {
                break;
            }
            passed(group);
            word += GROUP;
        }
        word
    }
}

/// Indexes `bytes`, whole blocks, onto `blocks`, and sums up each group
/// of blocks they complete onto `groups`; `carry` as for [`Block::of`].
fn index(bytes: &[u8], blocks: &mut Vec<Block>, groups: &mut Vec<Group>, carry: &mut bool) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        if has!("avx2") && has!("bmi1") && has!("bmi2") && has!("popcnt") {
            // SAFETY: the processor has all four, checked just above.
            unsafe { index_avx2(bytes, blocks, groups, carry) };
            return;
        }
        if has!("ssse3") {
            // SAFETY: the processor has SSSE3, checked just above.
            unsafe { index_by_nibbles(bytes, blocks, groups, carry) };
            return;
        }
    }
    index_with::<ByTable>(bytes, blocks, groups, carry);
}

/// [`index`] where the processor has SSSE3: the build targets the
/// baseline x86_64 (SSE2 only), so this copy of the loop is compiled for
/// SSSE3 apart and chosen at run time.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "ssse3")]
unsafe fn index_by_nibbles(
    bytes: &[u8],
    blocks: &mut Vec<Block>,
    groups: &mut Vec<Group>,
    carry: &mut bool,
) {
    index_with::<ByNibbles>(bytes, blocks, groups, carry);
}

/// [`index`] where the processor has AVX2, BMI and `popcnt`: each block
/// taken in two 32-byte halves ([`block_avx2`]), half the vector work of
/// the 16-byte code, and the groups' escapes counted by `popcnt`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,bmi1,bmi2,popcnt")]
unsafe fn index_avx2(
    bytes: &[u8],
    blocks: &mut Vec<Block>,
    groups: &mut Vec<Group>,
    carry: &mut bool,
) {
    for block in bytes.chunks_exact(BLOCK) {
        // SAFETY: the caller vouches for AVX2 (and what it implies).
        blocks.push(unsafe { block_avx2(block.try_into().expect("a whole block"), carry) });
    }
    summarize(blocks, groups);
}

#[inline(always)]
fn index_with<C: EscapeCheck>(
    bytes: &[u8],
    blocks: &mut Vec<Block>,
    groups: &mut Vec<Group>,
    carry: &mut bool,
) {
    for block in bytes.chunks_exact(BLOCK) {
        let block = block.try_into().expect("a whole block");
        blocks.push(Block::of::<C>(block, carry));
    }
    summarize(blocks, groups);
}

/// Sums up each whole group of `blocks` that `groups` lacks: those the
/// blocks just written complete, still in the cache.
#[inline(always)]
fn summarize(blocks: &[Block], groups: &mut Vec<Group>) {
    for whole in blocks[groups.len() * GROUP..].chunks_exact(GROUP) {
        groups.push(Group::of(whole));
    }
}

/// [`Block::of`] in 32-byte AVX2 operations: the quotes, backslashes and
/// control characters of each half by three compares, and JSON's short
/// escapes by the nibble lookups of [`SHORT_BY_HIGH`], 32 bytes at a time
/// (the byte shuffle looks up within each 16-byte lane, so both lanes
/// hold the same table).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,bmi1,bmi2,popcnt")]
#[inline]
unsafe fn block_avx2(block: &[u8; BLOCK], carry: &mut bool) -> Block {
    use std::arch::x86_64::{
        __m128i, __m256i, _mm256_and_si256, _mm256_broadcastsi128_si256, _mm256_cmpeq_epi8,
        _mm256_loadu_si256, _mm256_max_epu8, _mm256_or_si256, _mm256_set1_epi8,
        _mm256_setzero_si256, _mm256_shuffle_epi8, _mm256_srli_epi16, _mm256_testz_si256,
        _mm_loadu_si128,
    };
    // SAFETY: the two loads of `block` read, unaligned, the 64 bytes it
    // borrows (32 from its start, 32 from its middle), and each load of a
    // table its 16 bytes; the caller vouches for AVX2.
    unsafe {
        let low = _mm256_loadu_si256(block.as_ptr().cast::<__m256i>());
        let high = _mm256_loadu_si256(block.as_ptr().add(32).cast::<__m256i>());
        let quote_byte = _mm256_set1_epi8(b'"' as i8);
        let backslash_byte = _mm256_set1_epi8(b'\\' as i8);
        let limit = _mm256_set1_epi8(0x1f);
        let quote = [
            _mm256_cmpeq_epi8(low, quote_byte),
            _mm256_cmpeq_epi8(high, quote_byte),
        ];
        let backslash = [
            _mm256_cmpeq_epi8(low, backslash_byte),
            _mm256_cmpeq_epi8(high, backslash_byte),
        ];
        let control = [
            _mm256_cmpeq_epi8(_mm256_max_epu8(low, limit), limit),
            _mm256_cmpeq_epi8(_mm256_max_epu8(high, limit), limit),
        ];
        let any = [
            _mm256_or_si256(_mm256_or_si256(quote[0], backslash[0]), control[0]),
            _mm256_or_si256(_mm256_or_si256(quote[1], backslash[1]), control[1]),
        ];
        // The masks are made 64-bit words only past this test: combined
        // any earlier, LLVM took them apart byte by byte.
        let either = _mm256_or_si256(any[0], any[1]);
        if _mm256_testz_si256(either, either) == 1 && !*carry {
            return Block {
                specials: 0,
                ends: 0,
                trouble: 0,
                escapes: 0,
            };
        }
        let specials = mask_64(any[0], any[1]);
        let quote = mask_64(quote[0], quote[1]);
        let backslash = mask_64(backslash[0], backslash[1]);
        let mut trouble = mask_64(control[0], control[1]);
        let [mut escaped, mut escapes] = [0; 2];
        if backslash != 0 || *carry {
            [escaped, escapes] = escapes_of(backslash, carry);
            // The lookup tables, in both lanes.
            let in_both_lanes = |table: &[u8; 16]| {
                _mm256_broadcastsi128_si256(_mm_loadu_si128(table.as_ptr().cast::<__m128i>()))
            };
            let by_high = in_both_lanes(&SHORT_BY_HIGH);
            let by_low = in_both_lanes(&SHORT_BY_LOW);
            let nibble = _mm256_set1_epi8(0x0f);
            let not_short = |v: __m256i| {
                let low = _mm256_and_si256(v, nibble);
                let high = _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble);
                let classes = _mm256_and_si256(
                    _mm256_shuffle_epi8(by_low, low),
                    _mm256_shuffle_epi8(by_high, high),
                );
                _mm256_cmpeq_epi8(classes, _mm256_setzero_si256())
            };
            trouble |= escaped & mask_64(not_short(low), not_short(high));
        }
        Block {
            specials,
            ends: quote & !escaped,
            trouble,
            escapes,
        }
    }
}

/// A bit per byte of a block from the compare masks of its two 32-byte
/// halves.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn mask_64(low: std::arch::x86_64::__m256i, high: std::arch::x86_64::__m256i) -> u64 {
    use std::arch::x86_64::_mm256_movemask_epi8;
    let low = _mm256_movemask_epi8(low) as u32;
    let high = _mm256_movemask_epi8(high) as u32;
    u64::from(low) | u64::from(high) << 32
}

impl Group {
    #[inline(always)]
    fn of(blocks: &[Block]) -> Self {
        let (mut specials, mut stops, mut escapes) = (0, 0, 0);
        for block in blocks {
            specials |= block.specials;
            stops |= block.ends | block.trouble;
            escapes += block.escapes.count_ones();
        }
        Self {
            specials: specials != 0,
            stops: stops != 0,
            escapes,
        }
    }
}

/// How the bytes a backslash escapes are checked against JSON's short
/// escapes (`"\/bfnrt`).
trait EscapeCheck {
    /// Those of the `escaped` bytes of `block` that are not a short
    /// escape's second byte.
    fn not_short(block: &[u8; BLOCK], escaped: u64) -> u64;
}

/// One table lookup per escaped byte: cheap for a block with an escape or
/// two, and what any processor can do.
struct ByTable;

impl EscapeCheck for ByTable {
    #[inline(always)]
    fn not_short(block: &[u8; BLOCK], escaped: u64) -> u64 {
        let mut not_short = 0;
        let mut bits = escaped;
        while bits != 0 {
            let at = bits.trailing_zeros();
            bits &= bits - 1;
            not_short |= u64::from(SHORT_ESCAPES[usize::from(block[at as usize])] == 0) << at;
        }
        not_short
    }
}

/// Every byte of the block classified at once, by two 16-entry lookups
/// (SSSE3's byte shuffle) of its low and high halves. A document's lines
/// and quotes put an escape in nearly every block, several in most, and
/// a lookup per escape was most of its prescan.
#[cfg(target_arch = "x86_64")]
struct ByNibbles;

#[cfg(target_arch = "x86_64")]
impl EscapeCheck for ByNibbles {
    #[inline(always)]
    fn not_short(block: &[u8; BLOCK], escaped: u64) -> u64 {
        let mut short = 0u64;
        for (i, sixteen) in block.chunks_exact(16).enumerate() {
            // SAFETY: `ByNibbles` checks only where SSSE3 was found:
            // `index_by_nibbles`, and the test that asserts it first.
            let found = unsafe { short_escapes_16(sixteen.try_into().expect("16 bytes")) };
            short |= u64::from(found) << (16 * i);
        }
        escaped & !short
    }
}

/// The nibble lookups that find JSON's short escapes (`"\/bfnrt`, the
/// bytes that may follow a backslash): a byte's high half picks a bit from
/// [`SHORT_BY_HIGH`] (`"` and `/` share 0x2_, `\` is 0x5_, `b f n` 0x6_,
/// `r t` 0x7_), its low half the classes it may close from
/// [`SHORT_BY_LOW`], and it is one when the two agree.
#[cfg(target_arch = "x86_64")]
const SHORT_BY_HIGH: [u8; 16] = {
    let mut table = [0; 16];
    table[0x2] = X2;
    table[0x5] = X5;
    table[0x6] = X6;
    table[0x7] = X7;
    table
};
/// See [`SHORT_BY_HIGH`].
#[cfg(target_arch = "x86_64")]
const SHORT_BY_LOW: [u8; 16] = {
    let mut table = [0; 16];
    table[0x2] = X2 | X6 | X7; // '"' 'b' 'r'
    table[0x4] = X7; // 't'
    table[0x6] = X6; // 'f'
    table[0xc] = X5; // '\'
    table[0xe] = X6; // 'n'
    table[0xf] = X2; // '/'
    table
};
// A bit per high half: `"` and `/`, the backslash, `b f n`, `r t`.
#[cfg(target_arch = "x86_64")]
const X2: u8 = 1;
#[cfg(target_arch = "x86_64")]
const X5: u8 = 2;
#[cfg(target_arch = "x86_64")]
const X6: u8 = 4;
#[cfg(target_arch = "x86_64")]
const X7: u8 = 8;

/// The bytes among 16 that are one of JSON's short escapes' second byte,
/// a bit per byte, by the lookups of [`SHORT_BY_HIGH`] and [`SHORT_BY_LOW`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "ssse3")]
#[inline]
unsafe fn short_escapes_16(bytes: &[u8; 16]) -> u32 {
    use std::arch::x86_64::{
        __m128i, _mm_and_si128, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_set1_epi8,
        _mm_setzero_si128, _mm_shuffle_epi8, _mm_srli_epi16,
    };
    // SAFETY: each load reads, unaligned, exactly the 16 bytes of the
    // array it is given; the caller vouches for SSSE3.
    unsafe {
        let by_high = _mm_loadu_si128(SHORT_BY_HIGH.as_ptr().cast::<__m128i>());
        let by_low = _mm_loadu_si128(SHORT_BY_LOW.as_ptr().cast::<__m128i>());
        let nibble = _mm_set1_epi8(0x0f);
        let v = _mm_loadu_si128(bytes.as_ptr().cast::<__m128i>());
        let low = _mm_and_si128(v, nibble);
        let high = _mm_and_si128(_mm_srli_epi16(v, 4), nibble);
        let classes = _mm_and_si128(
            _mm_shuffle_epi8(by_low, low),
            _mm_shuffle_epi8(by_high, high),
        );
        let none = _mm_cmpeq_epi8(classes, _mm_setzero_si128());
        !(_mm_movemask_epi8(none) as u32) & 0xffff
    }
}

/// Bits at the even positions of a word.
const EVEN: u64 = 0x5555_5555_5555_5555;

impl Block {
    /// Indexes `block`; `carry` says whether its first byte is escaped and
    /// is set to whether the next one's is. `C` checks the escapes.
    #[inline(always)]
    fn of<C: EscapeCheck>(block: &[u8; BLOCK], carry: &mut bool) -> Self {
        // Most blocks of a long prompt hold nothing a string stops at: one
        // combined compare tells, and only the others are taken apart.
        let mut specials = 0u64;
        for (i, sixteen) in block.chunks_exact(16).enumerate() {
            specials |= u64::from(specials_16(sixteen.try_into().expect("16 bytes"))) << (16 * i);
        }
        if specials == 0 && !*carry {
            return Self {
                specials,
                ends: 0,
                trouble: 0,
                escapes: 0,
            };
        }
        let [mut quote, mut backslash, mut control] = [0u64; 3];
        for (i, sixteen) in block.chunks_exact(16).enumerate() {
            let [q, b, c] = string_bytes_16(sixteen.try_into().expect("16 bytes"));
            quote |= u64::from(q) << (16 * i);
            backslash |= u64::from(b) << (16 * i);
            control |= u64::from(c) << (16 * i);
        }
        let mut trouble = control;
        let [mut escaped, mut escapes] = [0; 2];
        if backslash != 0 || *carry {
            [escaped, escapes] = escapes_of(backslash, carry);
            trouble |= C::not_short(block, escaped);
        }
        Self {
            specials,
            ends: quote & !escaped,
            trouble,
            escapes,
        }
    }
}

/// The bytes of a block that a backslash escapes, backslashes aside (those
/// in a run escape one another), and the backslashes that begin an
/// escape, given its backslashes. A run pairs up from its start, so its
/// escapes begin on positions of its start's parity, and a run of odd
/// length escapes the byte after it; for a run at the block's end that is
/// the next block's first byte (`carry`, in and out). Branch-free: adding
/// a run's lowest bit to the run carries through it to the bit after it,
/// clearing it, and a run is odd when it starts and ends after on
/// positions of different parity.
#[inline(always)]
fn escapes_of(all_backslashes: u64, carry: &mut bool) -> [u64; 2] {
    let carried = u64::from(*carry);
    // An escaped first byte is a character, even when it is a backslash.
    let backslash = all_backslashes & !carried;
    let starts = backslash & !(backslash << 1);
    let even_sum = backslash.wrapping_add(starts & EVEN);
    let after_even_starts = even_sum & !backslash;
    let (sum, overflow) = backslash.overflowing_add(starts & !EVEN);
    let after_odd_starts = sum & !backslash;
    // A run from an odd start to the block's end is odd: it escapes the
    // next block's first byte. One from an even start is even.
    *carry = overflow;
    let escaped =
        (carried | (after_even_starts & !EVEN) | (after_odd_starts & EVEN)) & !all_backslashes;
    let from_even_starts = backslash & !even_sum;
    let begin = (from_even_starts & EVEN) | (backslash & !from_even_starts & !EVEN);
    [escaped, begin]
}

/// The quotes, backslashes and control characters among 16 bytes, one bit
/// per byte for any of them.
#[inline(always)]
fn specials_16(bytes: &[u8; 16]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        super::plain_run::specials_16(bytes)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let [quote, backslash, control] = string_bytes_16(bytes);
        quote | backslash | control
    }
}

/// The quotes, backslashes and control characters among 16 bytes, a bit
/// per byte each: the comparisons of `plain_run`'s `specials_16`,
/// kept apart.
#[inline(always)]
fn string_bytes_16(bytes: &[u8; 16]) -> [u32; 3] {
    #[cfg(target_arch = "x86_64")]
    {
        super::plain_run::string_bytes_sse2(bytes)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        bytes
            .iter()
            .enumerate()
            .fold([0; 3], |[q, b, c], (i, &byte)| {
                [
                    q | u32::from(byte == b'"') << i,
                    b | u32::from(byte == b'\\') << i,
                    c | u32::from(byte < 0x20) << i,
                ]
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A repeatable stream of pseudo-random words from `seed`.
    fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
        move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        }
    }

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
        let mut next = xorshift(0x2545_F491_4F6C_DD1Du64);
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

    /// Where a string whose text starts at `from` ends, read byte by
    /// byte: its closing quote and how many escapes it had, or `None` for
    /// a control character, an escape other than JSON's short ones, or no
    /// end.
    fn string_end_by_bytes(body: &[u8], from: usize) -> Option<(usize, usize)> {
        let mut at = from;
        let mut escapes = 0;
        loop {
            match *body.get(at)? {
                b'"' => return Some((at, escapes)),
                b'\\' => match body.get(at + 1)? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {
                        escapes += 1;
                        at += 2;
                    }
                    _ => return None,
                },
                byte if byte < 0x20 => return None,
                _ => at += 1,
            }
        }
    }

    #[test]
    fn the_index_ends_every_string_where_a_byte_by_byte_read_does() {
        let mut next = xorshift(0x9E37_79B9_7F4A_7C15u64);
        let mut found = [0usize; 3];
        for round in 0..400 {
            let len = (next() % 900) as usize;
            // Backslash runs of every length, across block edges too.
            let density = [3, 8, 40, 400][round % 4];
            let body: Vec<u8> = (0..len)
                .map(|_| match next() % density {
                    0 | 1 => b'\\',
                    2 => b'"',
                    _ => [b'a', b'n', b'u', b'"', b'\\', b'/', b't', 0x0a, 0x7f]
                        [(next() % 9) as usize],
                })
                .collect();
            let prescanned =
                received(&body, &[1 + (next() % 130) as usize, 64, 3]).expect("ASCII is UTF-8");
            // A string starts after a quote the scanner met as one.
            for from in (1..=len).filter(|&at| body[at - 1] == b'"') {
                let by_bytes = string_end_by_bytes(&body, from);
                let by_index = prescanned.string_end(from);
                match by_index {
                    Some(_) => assert_eq!(by_index, by_bytes, "round {round}, from {from}"),
                    // Left to the byte-by-byte read: no valid end, or a
                    // `\u` escape before it. The tail past the last whole
                    // block is indexed too.
                    None => assert!(
                        by_bytes
                            .is_none_or(|(end, _)| body[from..end].windows(2).any(|w| w == b"\\u")),
                        "round {round}, from {from}: the index gave up on {by_bytes:?}"
                    ),
                }
                found[match by_index {
                    Some((_, 0)) => 0,
                    Some(_) => 1,
                    None => 2,
                }] += 1;
            }
        }
        // Plain strings, strings with escapes and strings left alone all met.
        assert!(found.iter().all(|&n| n > 100), "{found:?}");
    }

    /// Bodies several groups long, the groups holding nothing, only
    /// escapes, or a stop at any place (the first block, the last, an
    /// edge): every plain run and string ends where the byte-by-byte reads
    /// say, whether or not the walk steps over a group.
    #[test]
    fn long_runs_and_strings_end_where_a_byte_by_byte_read_does_across_groups() {
        const SPAN: usize = GROUP * BLOCK;
        let mut next = xorshift(0xC2B2_AE3D_27D4_EB4Fu64);
        let mut skipped = [0usize; 2];
        for round in 0..24 {
            let groups = 2 + round % 3;
            let len = groups * SPAN + (next() % 200) as usize;
            // Escapes in half the rounds (a document's lines), none in the
            // rest; one stop of each kind at a chosen place per round.
            let filler: &[u8] = if round % 2 == 0 {
                b"ab \\n cd \\\" x"
            } else {
                b"plain text "
            };
            let mut body: Vec<u8> = filler.iter().copied().cycle().take(len).collect();
            let places = [
                SPAN,
                SPAN - 1,
                SPAN + BLOCK,
                2 * SPAN - BLOCK,
                (next() % len as u64) as usize,
            ];
            let at = places[round % places.len()].clamp(1, len - 1);
            // Not in the middle of an escape: a stop of its own.
            let at = if at > 0 && body[at - 1] == b'\\' {
                at + 1
            } else {
                at
            }
            .min(len - 1);
            body[at] = [b'"', 0x0a, b'"'][round % 3];
            if body[at - 1] == b'\\' {
                body[at - 1] = b' ';
            }
            let prescanned =
                received(&body, &[SPAN / 3 + round, 4096, 65_536]).expect("ASCII is UTF-8");
            let froms = [
                0,
                1,
                BLOCK,
                SPAN - 1,
                SPAN,
                SPAN + 1,
                at.saturating_sub(SPAN),
                at,
            ];
            for from in froms.into_iter().filter(|&from| from <= len) {
                assert_eq!(
                    prescanned.plain_end(from),
                    from + plain_run(&body[from..]),
                    "round {round}, plain from {from}, stop at {at}"
                );
                // A string starts after its opening quote, never inside an
                // escape.
                if from > 0 && body[from - 1] == b'\\' {
                    continue;
                }
                let by_bytes = string_end_by_bytes(&body, from);
                assert_eq!(
                    prescanned.string_end(from),
                    by_bytes,
                    "round {round}, string from {from}, stop at {at}"
                );
                skipped[usize::from(by_bytes.is_some())] += 1;
            }
        }
        // Strings that end and strings given up both met.
        assert!(skipped.iter().all(|&n| n > 20), "{skipped:?}");
    }

    #[test]
    fn escapes_begin_and_escape_as_runs_of_backslashes_pair_up() {
        // Byte by byte, over a word: a run pairs up from its start.
        // Backslashes escaped are left out, as the index leaves them.
        fn by_runs(backslash: u64, carry: bool) -> ([u64; 2], bool) {
            let [mut escaped, mut begin] = [0; 2];
            let mut odd = carry;
            for i in 0..64 {
                if odd {
                    escaped |= 1 << i;
                    odd = false;
                } else if backslash >> i & 1 == 1 {
                    begin |= 1 << i;
                    odd = true;
                }
            }
            ([escaped & !backslash, begin], odd)
        }
        let mut next = xorshift(0x0123_4567_89AB_CDEFu64);
        let edges = [
            0,
            !0,
            1,
            1 << 63,
            3 << 62,
            EVEN,
            !EVEN,
            0x7fff_ffff_ffff_ffff,
        ];
        let mut words = edges.to_vec();
        for _ in 0..2000 {
            words.push(next() | next() >> 3);
            words.push(next() & next() & next());
        }
        for backslash in words {
            for carry in [false, true] {
                let mut carried = carry;
                let escapes = escapes_of(backslash, &mut carried);
                assert_eq!(
                    (escapes, carried),
                    by_runs(backslash, carry),
                    "{backslash:064b}, carry {carry}"
                );
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_nibble_lookup_finds_the_short_escapes_the_table_does() {
        assert!(
            std::arch::is_x86_feature_detected!("ssse3"),
            "the index is checked by nibbles where the processor has SSSE3"
        );
        // Every byte value in every lane of a block.
        for shift in 0..64u8 {
            let bytes: Vec<u8> = (0..=255u8).map(|byte| byte.wrapping_add(shift)).collect();
            for block in bytes.chunks_exact(BLOCK) {
                let block = block.try_into().expect("a whole block");
                assert_eq!(
                    ByNibbles::not_short(block, !0),
                    ByTable::not_short(block, !0),
                    "{block:?}"
                );
            }
        }
        // Whole blocks, backslash runs across their edges among them, by
        // either check.
        let mut next = xorshift(0x5DEE_CE66_D1CE_4E5Bu64);
        let [mut by_table, mut by_nibbles] = [false; 2];
        for round in 0..5000 {
            let density = [2, 4, 16][round % 3];
            let block: [u8; BLOCK] = std::array::from_fn(|_| match next() % density {
                0 => b'\\',
                _ => [b'"', b'n', b'u', b'/', b't', b'x', 0x0a, 0xe9][(next() % 8) as usize],
            });
            let table = Block::of::<ByTable>(&block, &mut by_table);
            let nibbles = Block::of::<ByNibbles>(&block, &mut by_nibbles);
            assert_eq!((table, by_table), (nibbles, by_nibbles), "{block:?}");
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_avx2_block_is_the_block_any_processor_indexes() {
        use std::arch::is_x86_feature_detected as has;
        assert!(
            has!("avx2") && has!("bmi1") && has!("bmi2") && has!("popcnt"),
            "this kind of machine indexes with AVX2"
        );
        // Every byte value in every place, then blocks of backslash runs,
        // quotes, escapable letters, control and multi-byte characters,
        // carried from block to block.
        let mut blocks: Vec<[u8; BLOCK]> = (0..64u8)
            .flat_map(|shift| {
                let bytes: Vec<u8> = (0..=255u8).map(|byte| byte.wrapping_add(shift)).collect();
                bytes
                    .chunks_exact(BLOCK)
                    .map(|block| block.try_into().expect("a whole block"))
                    .collect::<Vec<_>>()
            })
            .collect();
        let mut next = xorshift(0x94D0_49BB_1331_11EBu64);
        for round in 0..6000 {
            let density = [2, 3, 8, 40][round % 4];
            blocks.push(std::array::from_fn(|_| match next() % density {
                0 => b'\\',
                _ => [
                    b'"', b'n', b'u', b'/', b'b', b'r', b'f', b't', b'x', 0x0a, 0x1f, 0x7f, 0xe9,
                ][(next() % 13) as usize],
            }));
        }
        let [mut by_table, mut by_avx2] = [false; 2];
        for block in &blocks {
            let table = Block::of::<ByTable>(block, &mut by_table);
            // SAFETY: the processor has what `block_avx2` needs, asserted
            // above.
            let avx2 = unsafe { block_avx2(block, &mut by_avx2) };
            assert_eq!((avx2, by_avx2), (table, by_table), "{block:?}");
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
