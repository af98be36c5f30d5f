//! The patched `pingora-http`'s inserts under a parsed name (patches/README.md):
//! a header inserted under a `HeaderName` is keyed and written exactly as one
//! whose name is parsed from its text, with the client's own spelling kept
//! for the rest. Here because the vendored crate runs no tests of its own.

use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use pingora::http::{ParsedName, RequestHeader};

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

/// What the wire must show: each value under the spelling it was added
/// with, in `http::HeaderMap`'s order (a name's entry stays where it was
/// first added; removing one moves the last entry into its place).
#[derive(Default)]
struct Model(Vec<(String, Vec<(String, String)>)>);

impl Model {
    fn entry(&mut self, spelled: &str) -> Option<&mut Vec<(String, String)>> {
        let key = spelled.to_ascii_lowercase();
        self.0
            .iter_mut()
            .find(|(name, _)| *name == key)
            .map(|(_, values)| values)
    }

    fn append(&mut self, spelled: &str, value: &str) {
        let pair = (spelled.to_string(), value.to_string());
        match self.entry(spelled) {
            Some(values) => values.push(pair),
            None => self.0.push((spelled.to_ascii_lowercase(), vec![pair])),
        }
    }

    fn insert(&mut self, spelled: &str, value: &str) {
        let pair = (spelled.to_string(), value.to_string());
        match self.entry(spelled) {
            Some(values) => *values = vec![pair],
            None => self.0.push((spelled.to_ascii_lowercase(), vec![pair])),
        }
    }

    fn remove(&mut self, spelled: &str) {
        let key = spelled.to_ascii_lowercase();
        if let Some(at) = self.0.iter().position(|(name, _)| *name == key) {
            self.0.swap_remove(at);
        }
    }

    fn wire(&self) -> String {
        let mut wire = String::new();
        for (spelled, value) in self.0.iter().flat_map(|(_, values)| values) {
            wire += &format!("{spelled}: {value}\r\n");
        }
        wire
    }
}

static X_GATEWAY: HeaderName = HeaderName::from_static("x-gateway");

/// The patched `pingora-http` keeps a name's spelling only when it is not
/// the one Pingora would write, in a short list, then in a second map
/// (`spelling.rs`): whichever it holds, every header goes out as spelled.
#[test]
fn every_header_is_written_as_it_was_spelled_whatever_the_mix() {
    // Usual and unusual spellings of standard and custom names, more of
    // them than the short list holds.
    let names: Vec<&str> = "Host host HOST Content-Length content-length Accept accept \
         User-Agent x-a X-A x-b X-B X-C X-D X-E X-F X-G X-H X-I X-J x-gateway X-Gateway"
        .split_whitespace()
        .collect();
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = |below: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % below as u64) as usize
    };
    let mut kinds_seen = [0usize; 5];
    for sequence in 0..400 {
        let mut request = RequestHeader::build("POST", b"/", None).unwrap();
        let mut model = Model::default();
        for step in 0..next(30) {
            let spelled = names[next(names.len())];
            let value = format!("v{step}");
            let kind = next(5);
            kinds_seen[kind] += 1;
            match kind {
                0 => {
                    request
                        .append_header(spelled.to_string(), value.as_str())
                        .unwrap();
                    model.append(spelled, &value);
                }
                1 if step % 2 == 0 => {
                    // As Pingora's parser appends: the name a slice of the
                    // block's buffer.
                    let buf = Bytes::from(format!("{step}\r\n{spelled}: "));
                    let at = buf.len() - spelled.len() - 2;
                    let name = ParsedName::new(&buf, &buf[at..at + spelled.len()]);
                    request.append_header(name, value.as_str()).unwrap();
                    model.append(spelled, &value);
                }
                1 => {
                    // Under a parsed `HeaderName`: spelled the usual way.
                    let name = HeaderName::from_bytes(spelled.as_bytes()).unwrap();
                    let usual = match name.as_str() {
                        "host" => "Host",
                        "content-length" => "Content-Length",
                        other => other,
                    };
                    model.append(usual, &value);
                    request.append_header(name, value.as_str()).unwrap();
                }
                2 => {
                    request
                        .insert_header(spelled.to_string(), value.as_str())
                        .unwrap();
                    model.insert(spelled, &value);
                }
                3 => {
                    request.remove_header(spelled);
                    model.remove(spelled);
                }
                _ => {
                    // Pingora's own inserts: the proxy's copy, its `Host`
                    // (titled) and a gateway header (lowercase).
                    request = request.clone_with_room(2);
                    if step % 2 == 0 {
                        request.insert_header(header::HOST, value.as_str()).unwrap();
                        model.insert("Host", &value);
                    } else {
                        let value = HeaderValue::from_str(&value).unwrap();
                        request.insert_header_static(&X_GATEWAY, value.clone());
                        model.insert("x-gateway", value.to_str().unwrap());
                    }
                }
            }
            assert_eq!(
                wire(&request),
                model.wire(),
                "sequence {sequence}, step {step}"
            );
        }
        let as_iterated: String = request
            .case_header_iter()
            .map(|(name, value)| {
                let name = String::from_utf8(name.as_slice().to_vec()).unwrap();
                format!("{name}: {}\r\n", value.to_str().unwrap())
            })
            .collect();
        assert_eq!(as_iterated, model.wire(), "sequence {sequence}, iterated");
    }
    assert!(kinds_seen.iter().all(|&n| n > 100), "{kinds_seen:?}");
}
