//! [`Violation`]: one way a value fails its schema.

use std::fmt;

/// One way a value fails its schema.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub(super) instance_path: String,
    pub(super) message: String,
}

impl Violation {
    /// Where in the value, as a JSON pointer (`/items/0/city`; empty for the value itself).
    pub fn instance_path(&self) -> &str {
        &self.instance_path
    }

    /// What is wrong there.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Violation {
    /// `/city: expected string, found integer 7` (`/` for the value itself).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = if self.instance_path.is_empty() {
            "/"
        } else {
            &self.instance_path
        };
        write!(f, "{at}: {}", self.message)
    }
}
