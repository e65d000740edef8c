//! Typed context that travels in [`crate::ChatRequest::extensions`] from layer to layer.

use std::fmt;

use serde::{Deserialize, Serialize};

macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// Wrap a string.
            pub fn new(value: impl Into<String>) -> Self {
                $name(value.into())
            }

            /// The string.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<String> for $name {
            fn from(value: String) -> Self {
                $name(value)
            }
        }

        impl From<&str> for $name {
            fn from(value: &str) -> Self {
                $name(value.to_owned())
            }
        }
    };
}

string_id!(
    /// Which conversation a call belongs to (persistence keys records by it; approvals are bound to it).
    ConversationId
);

string_id!(
    /// Who is calling: a user or API-key id set by the application (approvals are bound to it).
    CallerIdentity
);

/// Where a layer that charges calls for their usage (a limits layer) leaves the usage it charged when it had to
/// estimate it — the provider's usage report never came (the caller dropped the stream, the provider sends
/// none) — so that a layer recording the call outside it (persistence) records the same estimate, marked
/// estimated, instead of zero tokens.
///
/// The recording layer puts a fresh one into the request's extensions before calling its inner service, and
/// reads it when it writes the call's record (after dropping the inner stream or future, so that a charge made
/// on the way out is in); the charging layer takes it from the request it was called with and sets it once.
/// Clones share one slot.
///
/// ```
/// use tower_chat::{ChatRequest, EstimatedUsage, Message, Usage};
///
/// let slot = EstimatedUsage::new();
/// let request = ChatRequest::new(vec![Message::user("Hi")]).with_extension(slot.clone());
/// // In the charging layer:
/// if let Some(charged) = request.extensions.get::<EstimatedUsage>() {
///     charged.set(Usage { input_tokens: 3, ..Usage::default() });
/// }
/// assert_eq!(slot.get().map(|u| u.input_tokens), Some(3));
/// ```
#[derive(Clone, Debug, Default)]
pub struct EstimatedUsage(std::sync::Arc<std::sync::OnceLock<crate::Usage>>);

impl EstimatedUsage {
    /// An empty slot.
    pub fn new() -> Self {
        EstimatedUsage::default()
    }

    /// Leave the estimate charged (the first one set stays).
    pub fn set(&self, usage: crate::Usage) {
        let _ = self.0.set(usage);
    }

    /// The estimate, if one was charged.
    pub fn get(&self) -> Option<crate::Usage> {
        self.0.get().copied()
    }
}
