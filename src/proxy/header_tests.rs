//! The patched `pingora-http`'s inserts under a parsed name (patches/README.md):
//! a header inserted under a `HeaderName` is keyed and written exactly as one
//! whose name is parsed from its text, with the client's own spelling kept
//! for the rest. Here because the vendored crate runs no tests of its own.

use http::header::{self, HeaderName, HeaderValue};
use pingora::http::RequestHeader;

/// A request as Pingora reads one from a client: every name as it was spelled.
fn as_read(names: &[&str]) -> RequestHeader {
    let mut request = RequestHeader::build("POST", b"/v1/chat/completions", None).unwrap();
    for name in names {
        request.append_header(name.to_string(), "client").unwrap();
    }
    request
}

fn wire(request: &RequestHeader) -> String {
    let mut bytes = Vec::new();
    request.header_to_h1_wire(&mut bytes);
    String::from_utf8(bytes).unwrap()
}

#[test]
fn a_header_inserted_under_a_parsed_name_is_the_one_its_text_would_give() {
    let custom = HeaderName::from_static("x-rolter-test");
    for client in [
        &["Host", "Content-Type"][..],
        &["host", "X-Rolter-Test"],
        &[],
    ] {
        let mut by_name = as_read(client);
        let mut by_text = as_read(client);
        for (name, text) in [
            (header::HOST, "Host"),
            (header::CONTENT_LENGTH, "Content-Length"),
            (header::AUTHORIZATION, "authorization"),
            (custom.clone(), "x-rolter-test"),
        ] {
            let value = HeaderValue::from_static("gateway");
            by_name.insert_header(name.clone(), value.clone()).unwrap();
            by_text.insert_header(text, value).unwrap();
            assert_eq!(by_name.headers, by_text.headers, "{client:?}, {name}");
            assert_eq!(wire(&by_name), wire(&by_text), "{client:?}, {name}");
        }
        by_name.append_header(&header::ACCEPT, "a").unwrap();
        by_text.append_header("accept", "a").unwrap();
        assert_eq!(wire(&by_name), wire(&by_text), "{client:?}, appended");
    }
    let mut request = as_read(&["hOsT"]);
    request.insert_header(header::HOST, "engine").unwrap();
    assert_eq!(
        wire(&request),
        "Host: engine\r\n",
        "replaced, in Pingora's spelling"
    );
}
