//! The gateway's configuration: the options ([`cli`]: the command line, the environment and the `[gateway]`
//! table), the configuration file ([`file`]) and what they are merged into ([`Config`]).

pub mod cli;
pub mod file;
mod provider;
mod settings;

pub use provider::Provider;
pub use settings::*;
