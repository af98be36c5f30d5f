// rolter patch: this module is rolter's, not Pingora's (patches/README.md).

//! How the names of a header block are spelled on the wire.
//!
//! Pingora kept every name's spelling in a second header map beside the values, built, cloned
//! and walked with them, so that each header cost two map operations. Most names arrive spelled
//! as Pingora would write them anyway (`Host`, `Content-Length`, `x-request-id`): a block keeps
//! only the names spelled otherwise, in a short list, and turns to the second map when that list
//! is full or one name's values come spelled two ways. Every form writes the same bytes.

use std::borrow::Cow;

use bytes::BufMut;
use http::header::{AsHeaderName, HeaderName, HeaderValue};
use pingora_error::{ErrorType::*, OrErr, Result};

use crate::case_header_name::{usual, CaseHeaderName};
use crate::{HMap, HeaderNameVariant};

type CaseMap = HMap<CaseHeaderName>;

/// Names spelled unusually that the short list holds before the block turns to a map: a scan
/// of the list per header written stays cheaper than a second map.
const MAX_UNUSUAL: usize = 8;

#[derive(Debug, Clone)]
pub(crate) enum Spelling {
    /// Not kept: every name is written in its [usual] spelling.
    Dropped,
    /// Kept, as the usual spelling except for the names listed, each of whose values is
    /// spelled as listed. Every listed name has values in the block.
    Usual(Vec<(HeaderName, CaseHeaderName)>),
    /// Kept, in a map whose entries pair with the value map's, in the same order.
    Kept(CaseMap),
}

impl Spelling {
    pub(crate) fn kept() -> Self {
        Spelling::Usual(Vec::new())
    }

    pub(crate) fn is_kept(&self) -> bool {
        !matches!(self, Spelling::Dropped)
    }

    /// Whether every name's spelling is kept, usual or not: the block turned to the map.
    pub(crate) fn is_map(&self) -> bool {
        matches!(self, Spelling::Kept(_))
    }

    /// Record that `name`, spelled `unusual` (`None`: the [usual] way), is about to be appended
    /// to `values`. In the map form the caller gives every spelling, usual or not.
    pub(crate) fn append<T>(
        &mut self,
        values: &HMap<T>,
        name: &HeaderName,
        unusual: Option<CaseHeaderName>,
    ) -> Result<()> {
        let unusual = match self {
            Spelling::Dropped => return Ok(()),
            Spelling::Usual(listed) => {
                let at = listed.iter().position(|(listed, _)| listed == name);
                match (at, unusual) {
                    // A name missing from the list is spelled the usual way wherever it appears.
                    (None, None) => return Ok(()),
                    (Some(at), Some(spelled)) if listed[at].1.as_slice() == spelled.as_slice() => {
                        return Ok(())
                    }
                    (None, Some(spelled))
                        if listed.len() < MAX_UNUSUAL && !values.contains_key(name) =>
                    {
                        listed.push((name.clone(), spelled));
                        return Ok(());
                    }
                    // Listed another way, or no room left: every spelling goes to the map.
                    (_, unusual) => {
                        self.keep_in_map(values);
                        unusual
                    }
                }
            }
            Spelling::Kept(_) => unusual,
        };
        if let Spelling::Kept(map) = self {
            // Non-panicking `try_append`: the infallible `append` calls
            // `.expect("size overflows MAX_SIZE")` internally, which would abort the
            // process if the case map ever exceeded `http`'s `MAX_SIZE` (1 << 15).
            let spelled = unusual.unwrap_or_else(|| CaseHeaderName::usual(name));
            map.try_append(name.clone(), spelled)
                .or_err(InvalidHTTPHeader, "header name map size overflows MAX_SIZE")?;
        }
        Ok(())
    }

    /// Record that `name`, spelled `unusual` (`None`: the [usual] way), is about to replace
    /// every value of `name` in `values`.
    pub(crate) fn insert<T>(
        &mut self,
        values: &HMap<T>,
        name: &HeaderName,
        unusual: Option<CaseHeaderName>,
    ) {
        let unusual = match self {
            Spelling::Dropped => return,
            Spelling::Usual(listed) => {
                if let Some(at) = listed.iter().position(|(listed, _)| listed == name) {
                    listed.swap_remove(at);
                }
                match unusual {
                    None => return,
                    Some(spelled) if listed.len() < MAX_UNUSUAL => {
                        listed.push((name.clone(), spelled));
                        return;
                    }
                    Some(spelled) => {
                        self.keep_in_map(values);
                        Some(spelled)
                    }
                }
            }
            Spelling::Kept(_) => unusual,
        };
        if let Spelling::Kept(map) = self {
            map.insert(
                name.clone(),
                unusual.unwrap_or_else(|| CaseHeaderName::usual(name)),
            );
        }
    }

    /// Record that every value of `name` was just removed from `values`.
    pub(crate) fn remove<'a, T, N: ?Sized>(&mut self, values: &HMap<T>, name: &'a N)
    where
        &'a N: 'a + AsHeaderName,
    {
        match self {
            Spelling::Dropped => {}
            // The name may be any `AsHeaderName`: what `values` no longer holds goes.
            Spelling::Usual(unusual) => unusual.retain(|(listed, _)| values.contains_key(listed)),
            Spelling::Kept(map) => {
                map.remove(name);
            }
        }
    }

    pub(crate) fn reserve(&mut self, additional: usize) {
        if let Spelling::Kept(map) = self {
            map.reserve(additional);
        }
    }

    /// A copy whose map, if it has one, has room for `additional` more names.
    pub(crate) fn clone_with_room(&self, additional: usize) -> Self {
        match self {
            Spelling::Kept(map) => Spelling::Kept(crate::map_with_room(map, additional)),
            other => other.clone(),
        }
    }

    /// From the short list to the map, pairing each of `values`' entries in its order.
    fn keep_in_map<T>(&mut self, values: &HMap<T>) {
        let Spelling::Usual(unusual) = self else {
            return;
        };
        let mut map = CaseMap::with_capacity(values.len() + 1);
        for (name, _) in values {
            map.append(name.clone(), spelling_of(unusual, name).into_owned());
        }
        *self = Spelling::Kept(map);
    }

    /// Each header of `values` as written, in order, with its spelling.
    pub(crate) fn for_each<'a, T>(
        &'a self,
        values: &'a HMap<T>,
        mut f: impl FnMut(HeaderNameVariant<'a>, &'a T) -> Result<()>,
    ) -> Result<()> {
        match self {
            Spelling::Kept(map) => {
                for ((name, spelled), (value_name, value)) in map.iter().zip(values.iter()) {
                    // in case the header iteration order changes in future versions of HMap
                    assert_eq!(
                        name, value_name,
                        "header iter mismatch {name}, {value_name}"
                    );
                    f(HeaderNameVariant::Case(spelled), value)?;
                }
            }
            Spelling::Usual(unusual) if !unusual.is_empty() => {
                for (name, value) in values {
                    match unusual.iter().find(|(listed, _)| listed == name) {
                        Some((_, spelled)) => f(HeaderNameVariant::Case(spelled), value)?,
                        None => f(HeaderNameVariant::Titled(usual(name)), value)?,
                    }
                }
            }
            _ => {
                for (name, value) in values {
                    f(HeaderNameVariant::Titled(usual(name)), value)?;
                }
            }
        }
        Ok(())
    }

    /// `values` in HTTP/1.1 wire format.
    pub(crate) fn to_h1_wire(&self, values: &HMap, buf: &mut impl BufMut) {
        let _ = self.for_each(values, |name, value| {
            buf.put_slice(match name {
                HeaderNameVariant::Case(spelled) => spelled.as_slice(),
                HeaderNameVariant::Titled(usual) => usual.as_bytes(),
            });
            buf.put_slice(b": ");
            buf.put_slice(value.as_ref());
            buf.put_slice(b"\r\n");
            Ok(())
        });
    }

    /// Each header of `values` with the name as written, when the spelling is kept.
    pub(crate) fn case_iter<'a>(
        &'a self,
        values: &'a HMap,
    ) -> impl Iterator<Item = (CaseHeaderName, &'a HeaderValue)> + 'a {
        let kept = self.is_kept();
        let (unusual, mut map) = match self {
            Spelling::Usual(unusual) => (&unusual[..], None),
            Spelling::Kept(map) => (&[][..], Some(map.iter())),
            Spelling::Dropped => (&[][..], None),
        };
        values
            .iter()
            .filter(move |_| kept)
            .map(move |(name, value)| {
                let spelled = match map.as_mut().and_then(Iterator::next) {
                    Some((in_map, spelled)) => {
                        // in case the header iteration order changes in future versions of HMap
                        assert_eq!(name, in_map, "header iter mismatch {name}, {in_map}");
                        spelled.clone()
                    }
                    None => spelling_of(unusual, name).into_owned(),
                };
                (spelled, value)
            })
    }
}

/// How `name` is spelled in a block whose unusual spellings are `unusual`.
fn spelling_of<'a>(
    unusual: &'a [(HeaderName, CaseHeaderName)],
    name: &HeaderName,
) -> Cow<'a, CaseHeaderName> {
    match unusual.iter().find(|(listed, _)| listed == name) {
        Some((_, spelled)) => Cow::Borrowed(spelled),
        None => Cow::Owned(CaseHeaderName::usual(name)),
    }
}
