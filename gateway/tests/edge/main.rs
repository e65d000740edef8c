//! Serving: connections and their deadlines, HTTP/2, the edge's checks, the first minute of a new user, and how errors reach clients.
//!
//! One test binary for the whole area: the suite links a few binaries, not one per file.

#[path = "../common/mod.rs"]
mod common;

mod connections;
mod edge;
mod errors;
mod first_minute;
mod http2;
mod server;
