//! A `messages` list (chat, and Anthropic's Messages) read in the same pass
//! as the rest of the body.
//!
//! Captured raw and parsed again, every string of a conversation was scanned
//! twice, and the text of each message a third time for escapes: most of
//! the gateway's own time on a long prompt. Read here, a message's text is
//! borrowed from the body as the parser meets it (decoded only when it has
//! escapes). A list of another shape is still consumed, so the body stays
//! valid and routes, but is marked unreadable, as a failed parse was.
//! These are serde's readers; the envelope scanner (`scan.rs`) builds the
//! same turns for the bodies it reads itself.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::escaped::Escaped;
use super::raw::{string_value, Raw};

/// A visitor's answer to a `null`, a boolean or a number: `$value`, as
/// for any value of a shape it does not read.
macro_rules! scalars_give {
    ($value:expr) => {
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Ok($value)
        }
    };
}

/// `messages`: its turns, or `None` when it is not a list of message
/// objects (a message that is not an object, a `role` or `tool_call_id`
/// that is not a string, a field given twice).
pub struct Turns<'a>(pub Option<Vec<Turn<'a>>>);

/// One message, as routing reads it.
#[derive(Default)]
pub struct Turn<'a> {
    pub role: Option<Cow<'a, str>>,
    pub content: Option<Content<'a>>,
    pub tool_calls: Option<Raw<'a>>,
    pub tool_call_id: Option<Cow<'a, str>>,
}

/// A message's `content` as it was met.
pub enum Content<'a> {
    /// A string: borrowed from the body unless serde decoded its escapes.
    Text(Cow<'a, str>),
    /// A string with escapes, as the envelope scanner met it: decoded as it
    /// is read, never into a copy of its own.
    Escaped(Escaped<'a>),
    /// A list: chat's parts or Messages' blocks.
    List(Vec<Part<'a>>),
    /// A number, a boolean or an object: nothing to read.
    Other,
}

/// One element of a content list (chat's parts, Messages' blocks): kept
/// raw, for what is read by identity (an image, a tool call), and its
/// `type` and `text` when the envelope scanner read them.
pub struct Part<'a> {
    pub raw: Raw<'a>,
    /// `None` leaves the part to serde: it was not an object, or held
    /// something the scanner does not read as serde would (a field given
    /// twice, an escaped key or `type`, a `text` that is not a string, a
    /// tool result's `content` or `tool_use_id`).
    pub fields: Option<PartFields<'a>>,
}

impl<'a> Part<'a> {
    /// A part serde is to read.
    pub fn raw(raw: Raw<'a>) -> Self {
        Self { raw, fields: None }
    }
}

/// A part's `type` and `text`; absent or `null`, `None`.
#[derive(Default)]
pub struct PartFields<'a> {
    pub kind: Option<Cow<'a, str>>,
    pub text: Option<PartText<'a>>,
}

/// A part's text: as it stands in the body, decoded by serde, or with
/// escapes the scanner checked, decoded as it is read (a long prompt sent
/// as a text part is read as a `content` string is).
pub enum PartText<'a> {
    Decoded(Cow<'a, str>),
    Escaped(Escaped<'a>),
}

impl<'de: 'a, 'a> Deserialize<'de> for Turns<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct List<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for List<'a> {
            type Value = Turns<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_seq<S: SeqAccess<'de>>(self, mut seq: S) -> Result<Self::Value, S::Error> {
                let mut turns = Some(Vec::with_capacity(seq.size_hint().unwrap_or(4)));
                while let Some(turn) = seq.next_element::<MaybeTurn<'a>>()? {
                    // The rest is still read: the body must be consumed.
                    match (turn.0, turns.as_mut()) {
                        (Some(turn), Some(turns)) => turns.push(turn),
                        _ => turns = None,
                    }
                }
                Ok(Turns(turns))
            }
            fn visit_map<M: MapAccess<'de>>(self, map: M) -> Result<Self::Value, M::Error> {
                drain_map(map)?;
                Ok(Turns(None))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
                Ok(Turns(None))
            }
            scalars_give!(Turns(None));
        }
        deserializer.deserialize_any(List(std::marker::PhantomData))
    }
}

/// A message, or `None` for one routing cannot read.
struct MaybeTurn<'a>(Option<Turn<'a>>);

/// The fields of a message routing reads.
enum Field {
    Role,
    Content,
    ToolCalls,
    ToolCallId,
    Other,
}

impl Field {
    /// The field's bit in the set of fields seen (none for the others,
    /// which may repeat).
    fn bit(&self) -> u8 {
        match self {
            Field::Role => 1,
            Field::Content => 2,
            Field::ToolCalls => 4,
            Field::ToolCallId => 8,
            Field::Other => 0,
        }
    }
}

impl<'de> Deserialize<'de> for Field {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Name;
        impl Visitor<'_> for Name {
            type Value = Field;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E: de::Error>(self, name: &str) -> Result<Field, E> {
                Ok(match name {
                    "role" => Field::Role,
                    "content" => Field::Content,
                    "tool_calls" => Field::ToolCalls,
                    "tool_call_id" => Field::ToolCallId,
                    _ => Field::Other,
                })
            }
        }
        deserializer.deserialize_identifier(Name)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for MaybeTurn<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Message<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for Message<'a> {
            type Value = MaybeTurn<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
                let mut turn = Turn::default();
                let mut readable = true;
                let mut seen = 0u8;
                while let Some(field) = map.next_key::<Field>()? {
                    let first = seen & field.bit() == 0;
                    seen |= field.bit();
                    match field {
                        Field::Role if first => readable &= text(map.next_value()?, &mut turn.role),
                        Field::ToolCallId if first => {
                            readable &= text(map.next_value()?, &mut turn.tool_call_id)
                        }
                        Field::Content if first => turn.content = map.next_value()?,
                        Field::ToolCalls if first => turn.tool_calls = map.next_value()?,
                        Field::Other => {
                            map.next_value::<IgnoredAny>()?;
                        }
                        // Given twice: serde would have refused the message.
                        _ => {
                            readable = false;
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(MaybeTurn(readable.then_some(turn)))
            }
            fn visit_seq<S: SeqAccess<'de>>(self, seq: S) -> Result<Self::Value, S::Error> {
                drain_seq(seq)?;
                Ok(MaybeTurn(None))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
                Ok(MaybeTurn(None))
            }
            scalars_give!(MaybeTurn(None));
        }
        deserializer.deserialize_any(Message(std::marker::PhantomData))
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Content<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Value<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for Value<'a> {
            type Value = Content<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_borrowed_str<E: de::Error>(self, text: &'de str) -> Result<Self::Value, E> {
                Ok(Content::Text(Cow::Borrowed(text)))
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
                Ok(Content::Text(Cow::Owned(text.to_owned())))
            }
            fn visit_string<E: de::Error>(self, text: String) -> Result<Self::Value, E> {
                Ok(Content::Text(Cow::Owned(text)))
            }
            fn visit_seq<S: SeqAccess<'de>>(self, mut seq: S) -> Result<Self::Value, S::Error> {
                let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(2));
                while let Some(item) = seq.next_element::<Raw<'a>>()? {
                    items.push(Part::raw(item));
                }
                Ok(Content::List(items))
            }
            fn visit_map<M: MapAccess<'de>>(self, map: M) -> Result<Self::Value, M::Error> {
                drain_map(map)?;
                Ok(Content::Other)
            }
            scalars_give!(Content::Other);
        }
        deserializer.deserialize_any(Value(std::marker::PhantomData))
    }
}

/// A `role` or `tool_call_id`: absent, `null` or a string; false for any
/// other value. These are short, so they are captured raw and decoded.
pub(super) fn text<'a>(raw: Option<Raw<'a>>, into: &mut Option<Cow<'a, str>>) -> bool {
    match raw {
        None => true,
        Some(raw) => {
            *into = string_value(raw);
            into.is_some()
        }
    }
}

fn drain_map<'de, M: MapAccess<'de>>(mut map: M) -> Result<(), M::Error> {
    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
    Ok(())
}

fn drain_seq<'de, S: SeqAccess<'de>>(mut seq: S) -> Result<(), S::Error> {
    while seq.next_element::<IgnoredAny>()?.is_some() {}
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_borrowed_from_the_body_and_escaped_text_decoded() {
        let body = r#"[{"role":"user","content":"plain"},{"role":"user","content":"tab\there"}]"#;
        let Turns(Some(turns)) = serde_json::from_str(body).unwrap() else {
            panic!("unreadable");
        };
        let texts: Vec<_> = turns
            .iter()
            .map(|turn| match &turn.content {
                Some(Content::Text(text)) => text.clone(),
                _ => panic!("not text"),
            })
            .collect();
        assert!(matches!(texts[0], Cow::Borrowed("plain")));
        assert!(matches!(&texts[1], Cow::Owned(text) if text == "tab\there"));
    }

    #[test]
    fn parts_are_kept_raw_and_tool_calls_whole() {
        let body = r#"[{"role":"assistant","tool_calls":[{"id":"c1"}],"content":[{"type":"text","text":"a"}, 5]}]"#;
        let Turns(Some(turns)) = serde_json::from_str(body).unwrap() else {
            panic!("unreadable");
        };
        let Some(Content::List(parts)) = &turns[0].content else {
            panic!("not a list");
        };
        let parts: Vec<_> = parts.iter().map(|p| p.raw.get()).collect();
        assert_eq!(parts, [r#"{"type":"text","text":"a"}"#, "5"]);
        assert_eq!(turns[0].tool_calls.unwrap().get(), r#"[{"id":"c1"}]"#);
    }

    #[test]
    fn malformed_json_inside_the_list_is_still_an_error() {
        for body in [
            r#"[{"role":"user","content":"x"}"#,
            r#"[{"role":}]"#,
            r#"[{"a":1,}]"#,
        ] {
            assert!(serde_json::from_str::<Turns<'_>>(body).is_err(), "{body}");
        }
    }
}
