//! Managed keys and teams: client keys kept as data in the gateway's database, issued, changed, rotated and revoked
//! (teams also deleted) through the admin API (`/admin/…`, operator keys only) without a restart, on every replica.
//!
//! A key has an id, a name (its caller identity, as the name of a `name:key` line of `--api-keys-file`), an
//! optional owner team, an optional expiry, the models and routes it may use (names, or patterns with `*`), its
//! limits (the fields of a `[limits]` entry) and metadata. Its secret (`tcg_` and 64 hex digits from the OS
//! RNG) is answered once, when the key is created or rotated; the store keeps its SHA-256 only. A plain SHA-256
//! is enough here, unlike for passwords: the secret carries 256 random bits, so no dictionary or brute force
//! reaches it through its digest, and a fast hash keeps authentication cheap. Teams carry limits and metadata.
//!
//! The keys file and `[limits]` keep working beside them (the bootstrap a gateway starts with); a managed key
//! may not take the name of a line of the file (refused when created, and at start if one does). Managed keys
//! authenticate only on a gateway that authenticates clients (`--api-keys-file`) and has operators
//! (`--operator-keys-file`) and a database.
//!
//! - [`record`]: the rows and their checks; [`store`]: the tables; [`removal`]: a team's deletion; [`table`]: the in-memory table that
//!   authentication reads, kept current by notifications and a periodic check; [`gate`]: the model allow-list
//!   on the chat routes; [`ops`]: the changes and reads the admin API and the console's pages both run;
//!   [`admin`]: the admin API; [`policy`]: the limits of the keys and teams as a
//!   [`tower_chat_limits::LimitPolicy`].

pub(crate) mod admin;
pub(crate) mod gate;
pub(crate) mod ops;
pub(crate) mod policy;
pub(crate) mod record;
mod removal;
pub(crate) mod store;
pub(crate) mod table;

pub(crate) use record::now_ms;
pub(crate) use store::KeyStore;
pub(crate) use table::{ManagedKeys, OnChange};
