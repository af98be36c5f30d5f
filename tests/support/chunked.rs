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
/// the last chunk; panics on framing that is not chunked encoding.
pub fn split(mut body: &[u8]) -> Vec<&[u8]> {
    let mut chunks = Vec::new();
    loop {
        let line_end = body
            .windows(2)
            .position(|w| w == b"\r\n")
            .expect("chunk size");
        let size =
            usize::from_str_radix(std::str::from_utf8(&body[..line_end]).unwrap().trim(), 16)
                .expect("hex chunk size");
        body = &body[line_end + 2..];
        if size == 0 {
            return chunks;
        }
        chunks.push(&body[..size]);
        assert_eq!(&body[size..size + 2], b"\r\n", "chunk end");
        body = &body[size + 2..];
    }
}
