// Copyright 2026 Cloudflare, Inc.
//
// Licensed under the Apache License, Version 2.0 (the "License");
// you may not use this file except in compliance with the License.
// You may obtain a copy of the License at
//
// http://www.apache.org/licenses/LICENSE-2.0
//
// Unless required by applicable law or agreed to in writing, software
// distributed under the License is distributed on an "AS IS" BASIS,
// WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
// See the License for the specific language governing permissions and
// limitations under the License.

use crate::*;
use bytes::Bytes;
use http::header;

#[derive(Debug, Clone)]
pub struct CaseHeaderName(Bytes);

impl CaseHeaderName {
    pub fn new(name: String) -> Self {
        CaseHeaderName(name.into())
    }

    /// A name spelled by a static string, without a copy (rolter patch).
    pub const fn from_static(name: &'static str) -> Self {
        CaseHeaderName(Bytes::from_static(name.as_bytes()))
    }

    /// `name` as written when its spelling is not kept (rolter patch).
    pub(crate) fn usual(name: &HeaderName) -> Self {
        CaseHeaderName(titled_header_name(name))
    }
}

impl CaseHeaderName {
    pub fn as_slice(&self) -> &[u8] {
        &self.0
    }

    pub fn from_slice(buf: &[u8]) -> Self {
        CaseHeaderName(Bytes::copy_from_slice(buf))
    }
}

/// A trait that converts into case-sensitive header names.
pub trait IntoCaseHeaderName {
    fn into_case_header_name(self) -> CaseHeaderName;

    /// The name as a header map keys it, and as it is written on the wire.
    /// rolter patch: a [HeaderName] is its own key; it was spelled out and
    /// parsed back on every insert.
    fn into_header_names(self) -> Result<(HeaderName, CaseHeaderName)>
    where
        Self: Sized,
    {
        let case_header_name = self.into_case_header_name();
        let header_name: HeaderName = case_header_name
            .as_slice()
            .try_into()
            .or_err(InvalidHTTPHeader, "invalid header name")?;
        Ok((header_name, case_header_name))
    }

    /// As [Self::into_header_names()], with the spelling only when it is not the name's
    /// [usual] one (rolter patch): what a header block that keeps only unusual spellings
    /// needs, without spelling out a name only to find it usual.
    fn into_header_names_unless_usual(self) -> Result<(HeaderName, Option<CaseHeaderName>)>
    where
        Self: Sized,
    {
        let (header_name, case_header_name) = self.into_header_names()?;
        let unusual = !is_usual(&header_name, case_header_name.as_slice());
        Ok((header_name, unusual.then_some(case_header_name)))
    }
}

/// A name as it was parsed out of `buf`, a header block's shared buffer (rolter patch): its
/// spelling is sliced out of `buf` (a reference count) only when it is not the usual one.
pub struct ParsedName<'a> {
    buf: &'a Bytes,
    name: &'a [u8],
}

impl<'a> ParsedName<'a> {
    /// `name` must lie within `buf`.
    pub fn new(buf: &'a Bytes, name: &'a [u8]) -> Self {
        ParsedName { buf, name }
    }
}

impl IntoCaseHeaderName for ParsedName<'_> {
    fn into_case_header_name(self) -> CaseHeaderName {
        CaseHeaderName(self.buf.slice_ref(self.name))
    }

    fn into_header_names_unless_usual(self) -> Result<(HeaderName, Option<CaseHeaderName>)> {
        let header_name =
            HeaderName::from_bytes(self.name).or_err(InvalidHTTPHeader, "invalid header name")?;
        let unusual = !is_usual(&header_name, self.name);
        Ok((header_name, unusual.then(|| self.into_case_header_name())))
    }
}

impl IntoCaseHeaderName for CaseHeaderName {
    fn into_case_header_name(self) -> CaseHeaderName {
        self
    }
}

impl IntoCaseHeaderName for String {
    fn into_case_header_name(self) -> CaseHeaderName {
        CaseHeaderName(self.into())
    }
}

impl IntoCaseHeaderName for &'static str {
    fn into_case_header_name(self) -> CaseHeaderName {
        CaseHeaderName(self.into())
    }
}

impl IntoCaseHeaderName for HeaderName {
    fn into_case_header_name(self) -> CaseHeaderName {
        CaseHeaderName(titled_header_name(&self))
    }

    fn into_header_names(self) -> Result<(HeaderName, CaseHeaderName)> {
        let case_header_name = CaseHeaderName(titled_header_name(&self));
        Ok((self, case_header_name))
    }

    fn into_header_names_unless_usual(self) -> Result<(HeaderName, Option<CaseHeaderName>)> {
        Ok((self, None))
    }
}

impl IntoCaseHeaderName for &HeaderName {
    fn into_case_header_name(self) -> CaseHeaderName {
        CaseHeaderName(titled_header_name(self))
    }

    fn into_header_names(self) -> Result<(HeaderName, CaseHeaderName)> {
        Ok((self.clone(), CaseHeaderName(titled_header_name(self))))
    }

    fn into_header_names_unless_usual(self) -> Result<(HeaderName, Option<CaseHeaderName>)> {
        Ok((self.clone(), None))
    }
}

impl IntoCaseHeaderName for Bytes {
    fn into_case_header_name(self) -> CaseHeaderName {
        CaseHeaderName(self)
    }
}

fn titled_header_name(header_name: &HeaderName) -> Bytes {
    titled_header_name_str(header_name).map_or_else(
        || Bytes::copy_from_slice(header_name.as_str().as_bytes()),
        |s| Bytes::from_static(s.as_bytes()),
    )
}

/// How a name is written when its spelling is not kept (rolter patch): titled for the common
/// standard names, lowercase (as parsed) for the rest.
pub(crate) fn usual(name: &HeaderName) -> &str {
    titled_header_name_str(name).unwrap_or(name.as_str())
}

/// Whether `spelled` is how [`usual`] writes `name`.
pub(crate) fn is_usual(name: &HeaderName, spelled: &[u8]) -> bool {
    usual(name).as_bytes() == spelled
}

pub(crate) fn titled_header_name_str(header_name: &HeaderName) -> Option<&'static str> {
    Some(match *header_name {
        header::ACCEPT_RANGES => "Accept-Ranges",
        header::AGE => "Age",
        header::CACHE_CONTROL => "Cache-Control",
        header::CONNECTION => "Connection",
        header::CONTENT_TYPE => "Content-Type",
        header::CONTENT_ENCODING => "Content-Encoding",
        header::CONTENT_LENGTH => "Content-Length",
        header::DATE => "Date",
        header::TRANSFER_ENCODING => "Transfer-Encoding",
        header::HOST => "Host",
        header::SERVER => "Server",
        header::SET_COOKIE => "Set-Cookie",
        // TODO: add more const header here to map to their titled case
        // TODO: automatically upper case the first letter?
        _ => {
            return None;
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_case_header_name() {
        assert_eq!("FoO".into_case_header_name().as_slice(), b"FoO");
        assert_eq!("FoO".to_string().into_case_header_name().as_slice(), b"FoO");
        assert_eq!(header::SERVER.into_case_header_name().as_slice(), b"Server");
    }
}
