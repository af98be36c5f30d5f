//! Where a JSON string's plain run ends: the first quote, backslash or
//! control character, the bytes a string cannot hold as they are. The
//! envelope scanner (`scan.rs`) stops there in every string, and the
//! prescan (`prescan.rs`) indexes them while a body arrives, by the same
//! comparisons.

/// How many bytes at the start of `bytes` a string may hold as they are:
/// up to the first quote, backslash or control character; 32 at a time
/// where the processor compares 16 in one instruction, then eight at a
/// time. A long prompt is one long run: this loop is most of the scan.
pub fn plain_run(bytes: &[u8]) -> usize {
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
    let (low, high) = block.split_at(16);
    specials_16(low.try_into().expect("16 bytes"))
        | specials_16(high.try_into().expect("16 bytes")) << 16
}

/// [`specials_sse2`] of 16 bytes (the low 16 bits).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub fn specials_16(bytes: &[u8; 16]) -> u32 {
    use std::arch::x86_64::{_mm_movemask_epi8, _mm_or_si128};
    let [quote, backslash, control] = compare_16(bytes);
    // SAFETY: SSE2 is part of every x86_64 processor.
    unsafe { _mm_movemask_epi8(_mm_or_si128(_mm_or_si128(quote, backslash), control)) as u32 }
}

/// The quotes, backslashes and control characters among 16 bytes, each a
/// bit per byte (the low 16 bits): [`specials_16`]'s comparisons, apart.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub fn string_bytes_sse2(bytes: &[u8; 16]) -> [u32; 3] {
    use std::arch::x86_64::_mm_movemask_epi8;
    // SAFETY: SSE2 is part of every x86_64 processor.
    compare_16(bytes).map(|found| unsafe { _mm_movemask_epi8(found) as u32 })
}

/// Where `byte` is among 16 bytes, a bit per byte (the low 16 bits).
#[inline(always)]
pub fn equal_16(bytes: &[u8; 16], byte: u8) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{
            __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_set1_epi8,
        };
        // SAFETY: SSE2 is part of every x86_64 processor, and the load
        // reads, unaligned, exactly the 16 bytes `bytes` borrows.
        unsafe {
            let v = _mm_loadu_si128(bytes.as_ptr().cast::<__m128i>());
            _mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(byte as i8))) as u32
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        bytes
            .iter()
            .enumerate()
            .fold(0, |bits, (i, &each)| bits | u32::from(each == byte) << i)
    }
}

/// Per byte of `bytes`, all ones where it is a quote, a backslash, a
/// control character.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn compare_16(bytes: &[u8; 16]) -> [std::arch::x86_64::__m128i; 3] {
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_max_epu8, _mm_set1_epi8,
    };
    // SAFETY: SSE2 is part of every x86_64 processor (no runtime check is
    // needed), and the load reads, unaligned, exactly the 16 bytes `bytes`
    // borrows.
    unsafe {
        let v = _mm_loadu_si128(bytes.as_ptr().cast::<__m128i>());
        let quote = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8));
        let backslash = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8));
        // Unsigned `v <= 0x1f` is `max(v, 0x1f) == 0x1f`; bytes of 0x80
        // and over (UTF-8's multi-byte characters) are large and pass.
        let limit = _mm_set1_epi8(0x1f);
        let control = _mm_cmpeq_epi8(_mm_max_epu8(v, limit), limit);
        [quote, backslash, control]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
