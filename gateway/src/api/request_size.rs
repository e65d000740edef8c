//! What one request may hold: the wire formats' [`RequestLimits`], which the gateway's command line sets
//! (`--max-messages`, `--max-tools`, …) and checks on every inbound route; its errors name those flags
//! ([`SettingNames::Flags`]).
//!
//! ```
//! use tower_chat::{ChatRequest, Message};
//! use tower_chat_gateway::request_limits::RequestLimits;
//!
//! let limits = RequestLimits { max_messages: 2, ..RequestLimits::default() };
//! let long = ChatRequest::new(vec![Message::user("a"), Message::user("b"), Message::user("c")]);
//! assert_eq!(limits.check(&long).unwrap_err().code, "limit_exceeded");
//! ```

pub use tower_chat_wire::limits::{RequestLimits, SettingNames};
