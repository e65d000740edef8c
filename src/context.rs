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
