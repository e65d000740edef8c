//! The HTTP machinery shared by the leaf services, one concern per module:
//!
//! - `client`: the pooled hyper client (HTTP/1.1 and HTTP/2, TLS by rustls), its [`Timeouts`], and the exchange
//!   every leaf makes ([`HttpTransport`]);
//! - `connect`: TCP connections that see a close by the upstream before a request is written to them, so that
//!   hyper-util sends the request on another connection instead of failing it ([`StaleConnections`]);
//! - `secret`: API keys that never show in `Debug` output or error messages ([`Secret`]);
//! - `sent`: every credential a request carries, whatever the provider, redacted from the answer's errors;
//! - `status`: HTTP statuses, client and body failures mapped to typed [`ChatError`](crate::ChatError)s;
//! - `body`: response bodies decoded as SSE and mapped to chat events by a provider's decoder;
//! - `request`: build-time checks of the endpoint and headers, and encoding helpers the wire formats share;
//! - `tools`: the JSON of a request's tools, kept while the next requests offer the same list.

mod body;
mod client;
mod connect;
mod deadline;
mod request;
mod secret;
mod sent;
mod status;
mod tools;

#[cfg(feature = "bedrock")]
pub(crate) use body::Framing;
pub(crate) use body::{EventDecoder, WireDecoder};
pub use client::{HttpTransport, Timeouts};
pub use connect::StaleConnections;
pub(crate) use request::{
    cannot_serialize, endpoint, extra_fields, merge_extra, parse_headers, provider_fields,
    resolve_model, set_field, to_body, ExtraField,
};
pub use secret::Secret;
pub(crate) use tools::ToolsJson;

/// The TLS library the transport uses, for [`HttpTransport::with_tls`].
pub use rustls;
