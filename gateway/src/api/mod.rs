//! The HTTP API: the routes (which path goes to which handler, behind which checks), the handlers (the chat
//! endpoints, which are the wire crate's routes over the stack under the turn layer; token counts, models, usage, metrics; the operator API and the console are under `operator/`) and
//! what they share — the handlers' state, the extractors with the API's own refusals, what one request may hold.

pub(crate) mod chat;
pub(crate) mod count_tokens;
pub(crate) mod extract;
pub(crate) mod metrics;
pub(crate) mod models;
pub mod request_size;
pub(crate) mod routes;
pub(crate) mod state;
pub(crate) mod usage;
