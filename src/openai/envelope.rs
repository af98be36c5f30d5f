//! The top-level fields of a request body that routing reads, found by the
//! envelope scanner (`scan.rs`) when it can vouch for the body and by serde
//! otherwise, so that every answer, errors included, is serde's.

use serde::Deserialize;

use super::raw::Raw;
use super::turns::Turns;

/// The fields routing looks at; everything else is skipped unparsed.
#[derive(Default, Deserialize)]
pub struct Envelope<'a> {
    /// Present (even as `null`) or absent: `null` is a `model` of the wrong
    /// type, not a missing one.
    #[serde(borrow, default, deserialize_with = "present")]
    pub model: Option<Raw<'a>>,
    #[serde(borrow)]
    pub stream: Option<Raw<'a>>,
    /// Chat's and Messages' conversation, read in this pass.
    #[serde(borrow)]
    pub messages: Option<Turns<'a>>,
    #[serde(borrow)]
    pub prompt: Option<Raw<'a>>,
    #[serde(borrow)]
    pub input: Option<Raw<'a>>,
    /// Anthropic Messages: the system prompt.
    #[serde(borrow)]
    pub system: Option<Raw<'a>>,
    /// Responses: the system prompt.
    #[serde(borrow)]
    pub instructions: Option<Raw<'a>>,
    #[serde(borrow)]
    pub previous_response_id: Option<Raw<'a>>,
    /// Present (even as `null`) or absent, as for `model`.
    #[serde(borrow, default, deserialize_with = "present")]
    pub stream_options: Option<Raw<'a>>,
}

/// Which parser reads the envelope.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reader {
    /// The scanner, and serde for what it declines: the gateway's.
    Scanner,
    /// serde alone: the reference the scanner is held to.
    Serde,
}

/// The envelope of `body`, or serde's error.
pub fn read(body: &[u8], reader: Reader) -> Result<Envelope<'_>, serde_json::Error> {
    if reader == Reader::Scanner {
        if let Some(envelope) = super::scan::envelope(body) {
            return Ok(envelope);
        }
    }
    serde_json::from_slice(body)
}

fn present<'de, D>(deserializer: D) -> Result<Option<Raw<'de>>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    Raw::deserialize(deserializer).map(Some)
}
