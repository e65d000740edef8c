//! The edge: what a request meets before any handler — serving (HTTP/1.1 and HTTP/2 on one listener, graceful
//! shutdown), the per-connection deadlines, the in-flight caps, the request body's deadline, the client's
//! address behind a proxy, the host and origin checks against browsers, client keys and the access log.

pub(crate) mod auth;
pub(crate) mod body_deadline;
pub mod browser_guard;
pub mod client_addr;
pub(crate) mod connection_deadlines;
pub mod in_flight;
pub(crate) mod middleware;
pub(crate) mod serve;
