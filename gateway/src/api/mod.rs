//! The HTTP API: the routes (which path goes to which handler, behind which checks) and the pieces every handler
//! shares — the extractors with the API's own refusals, and what one request may hold.

pub(crate) mod chat;
pub(crate) mod count_tokens;
pub(crate) mod extract;
pub mod request_size;
pub(crate) mod routes;
pub(crate) mod state;
