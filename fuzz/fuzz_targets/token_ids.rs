//! `parse_token_ids`, the `x-rolter-token-ids` header: never panics; what it
//! accepts is one id per comma-separated entry and survives a round trip;
//! what it refuses it says so in a message of bounded size (the message
//! quotes the caller's entry, so it must not echo a whole header back).

#![no_main]

use libfuzzer_sys::fuzz_target;
use rolter::openai::{parse_token_ids, RequestError};

/// The message quotes at most 32 bytes of the entry; even fully escaped that
/// stays well inside this.
const MAX_MESSAGE: usize = 512;

fuzz_target!(|header: &[u8]| {
    match parse_token_ids(header) {
        Ok(ids) => {
            let text = std::str::from_utf8(header).expect("accepted a header that is not UTF-8");
            assert_eq!(ids.len(), text.split(',').count(), "one id per entry");
            let canonical = ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
            assert_eq!(
                parse_token_ids(canonical.as_bytes()).as_ref(),
                Ok(&ids),
                "round trip through {canonical:?}"
            );
        }
        Err(error) => {
            assert!(
                matches!(error, RequestError::InvalidTokenIds(_)),
                "unexpected error kind: {error:?}"
            );
            let message = error.to_string();
            assert!(
                message.len() <= MAX_MESSAGE,
                "a {}-byte message for a {}-byte header",
                message.len(),
                header.len()
            );
        }
    }
});
