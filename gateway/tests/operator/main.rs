//! What operators see and decide: the console's pages in a real browser, the operator API, approvals, timelines, call records and tenancy.
//!
//! One test binary for the whole area: the suite links a few binaries, not one per file.

#[path = "../common/mod.rs"]
mod common;

mod approval;
mod console;
mod console_calls;
mod console_cards;
mod console_keys;
mod console_keys_edit;
mod console_long_timeline;
mod console_media;
mod console_pages;
mod console_refusals;
mod console_search;
mod console_sessions;
mod console_spend;
mod console_usage;
mod console_waiting;
mod keys;
mod keys_team_delete;
mod keys_team_spend;
mod operator;
mod persistence;
mod tenancy;
mod timeline;
