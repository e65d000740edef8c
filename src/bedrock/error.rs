//! The detail of a Bedrock failure: the exception's name, as AWS gives it in the `x-amzn-errortype` header, an
//! error body's `__type`, or a stream's `:exception-type`, and its message.

use std::fmt;

/// A Bedrock exception (`ThrottlingException`, `modelStreamErrorException`, `ValidationException`, …), attached
/// as the source of the [`ChatError`](crate::ChatError) it became: match on the error's
/// [`kind`](crate::ChatError::kind), read the exact name here.
///
/// ```
/// use tower_chat::bedrock::BedrockError;
///
/// # fn name(error: &tower_chat::ChatError) -> Option<&str> {
/// let detail = std::error::Error::source(error)?.downcast_ref::<BedrockError>()?;
/// Some(detail.error_type())
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BedrockError {
    error_type: String,
    message: String,
}

impl BedrockError {
    pub(crate) fn new(error_type: &str, message: &str) -> Self {
        BedrockError {
            error_type: error_type.to_owned(),
            message: message.to_owned(),
        }
    }

    /// The exception's name as AWS sent it, without the namespace after a `:`.
    pub fn error_type(&self) -> &str {
        &self.error_type
    }

    /// The exception's message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for BedrockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.message.is_empty() {
            f.write_str(&self.error_type)
        } else {
            write!(f, "{}: {}", self.error_type, self.message)
        }
    }
}

impl std::error::Error for BedrockError {}
