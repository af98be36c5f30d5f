//! The top-level fields of a request body that routing reads: what serde
//! reads them into, and what the envelope scanner (`scan.rs`) builds for the
//! bodies it can vouch for. `request.rs` asks the scanner first and serde
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

fn present<'de, D>(deserializer: D) -> Result<Option<Raw<'de>>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    Raw::deserialize(deserializer).map(Some)
}
