//! The strings of a chunk, borrowed from the event's JSON where they can be.

use std::borrow::Cow;

use serde::Deserialize;

/// A JSON string borrowed from the input when it has no escape sequences, owned otherwise.
///
/// (`Option<Cow<str>>` would not do: serde borrows a `Cow` only when it is the field's whole type.)
#[derive(Deserialize)]
#[serde(transparent)]
pub(super) struct Text<'a>(#[serde(borrow)] pub(super) Cow<'a, str>);

impl Text<'_> {
    pub(super) fn into_string(self) -> String {
        self.0.into_owned()
    }
}

impl From<String> for Text<'_> {
    fn from(text: String) -> Self {
        Text(Cow::Owned(text))
    }
}
