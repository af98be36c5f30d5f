//! HTTP/1.1 chunked framing, for tests that write or read it raw.

/// `payloads` in chunked encoding, one chunk each, then the last chunk.
pub fn encode(payloads: impl IntoIterator<Item = impl AsRef<[u8]>>) -> Vec<u8> {
    let mut wire = Vec::new();
    for payload in payloads {
        let payload = payload.as_ref();
        wire.extend_from_slice(format!("{:x}\r\n", payload.len()).as_bytes());
        wire.extend_from_slice(payload);
        wire.extend_from_slice(b"\r\n");
    }
    wire.extend_from_slice(b"0\r\n\r\n");
    wire
}

/// The payload of each chunk of a chunked body, as it was framed, up to
/// the last chunk; panics on framing that is not chunked encoding, or on a
/// body not yet whole.
pub fn split(body: &[u8]) -> Vec<&[u8]> {
    parse(body).expect("a whole chunked body").0
}

/// Where the chunked body at the start of `body` ends (after its last
/// chunk; no trailers), once all of it has arrived; panics on framing that
/// is not chunked encoding.
pub fn end(body: &[u8]) -> Option<usize> {
    parse(body).map(|(_, end)| end)
}

/// Each chunk's payload and the end of the last chunk; `None` while part
/// of the body has yet to arrive.
fn parse(body: &[u8]) -> Option<(Vec<&[u8]>, usize)> {
    let mut chunks = Vec::new();
    let mut at = 0;
    loop {
        let line_end = at + body[at..].windows(2).position(|w| w == b"\r\n")?;
        let size =
            usize::from_str_radix(std::str::from_utf8(&body[at..line_end]).unwrap().trim(), 16)
                .expect("hex chunk size");
        at = line_end + 2;
        let payload = body.get(at..at + size)?;
        let crlf = body.get(at + size..at + size + 2)?;
        assert_eq!(crlf, b"\r\n", "chunk end");
        at += size + 2;
        if size == 0 {
            return Some((chunks, at));
        }
        chunks.push(payload);
    }
}
