//! [`GatewayError`]: why the gateway could not start, or stopped with an error.

use std::fmt;

use crate::config::CliError;

/// Why the gateway could not start or stopped with an error.
#[derive(Debug)]
pub enum GatewayError {
    /// The command line.
    Cli(CliError),
    /// A configuration value that parsed but cannot be used (an unreadable keys file, …).
    Config(String),
    /// Building the stack failed (a bad upstream URL, a missing files directory, …).
    Chat(tower_chat::ChatError),
    /// Binding or serving failed.
    Io(std::io::Error),
}

impl fmt::Display for GatewayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GatewayError::Cli(e) => write!(f, "{e}"),
            GatewayError::Config(e) => write!(f, "{e}"),
            // A start-up error, not an HTTP answer: the message without the error kind.
            GatewayError::Chat(e) => write!(f, "{}", e.message()),
            GatewayError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for GatewayError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            GatewayError::Cli(e) => Some(e),
            GatewayError::Chat(e) => Some(e),
            GatewayError::Io(e) => Some(e),
            GatewayError::Config(_) => None,
        }
    }
}
