//! What a route hands the chat service beside the [`ChatRequest`](tower_chat::ChatRequest), in its extensions,
//! and what the service hands back for the answer's head.
//!
//! Every route puts its [`InboundRoute`](crate::InboundRoute), the caller's
//! [`CallerIdentity`](tower_chat::CallerIdentity) (when the app's middleware set one), the `x-conversation-id`
//! header's [`ConversationId`](tower_chat::ConversationId) and a [`ResponseHeaders`] there. A router that
//! [keeps turns](crate::WireRouter::keeps_turns) adds the [`TurnContext`]: what a layer that resumes turns
//! needs of the HTTP request.

use std::sync::{Arc, Mutex};

use http::HeaderMap;

use crate::format::ApprovalAnswer;

/// What the client's request said about the turn beyond its messages: the approval decisions it answers a
/// paused turn with, the stored response it continues, the id its answer is stored under, and its headers.
/// Only a router that [keeps turns](crate::WireRouter::keeps_turns) sends it; a layer takes it out of the
/// extensions before the rest of the stack sees the request.
#[derive(Clone, Debug, Default)]
pub struct TurnContext {
    /// `tower_chat.approvals`: decisions on the approvals a paused turn waits for.
    pub approvals: Vec<ApprovalAnswer>,
    /// Responses' `previous_response_id`: the stored response whose conversation this request continues.
    pub previous_response_id: Option<String>,
    /// The id the answer names (a Responses answer's `id`) and its records are to be found by.
    pub record_id: Option<String>,
    /// The request's HTTP headers.
    pub headers: HeaderMap,
}

/// Headers the service adds to the answer: what it put here by the time the stream's first event arrived
/// (a whole answer: by its end) goes into the response's head.
#[derive(Clone, Debug, Default)]
pub struct ResponseHeaders(Arc<Mutex<HeaderMap>>);

impl ResponseHeaders {
    /// Add `value` under `name` (replacing an earlier value of the same name).
    pub fn insert(&self, name: http::HeaderName, value: http::HeaderValue) {
        self.0
            .lock()
            .expect("response headers lock")
            .insert(name, value);
    }

    /// Move what was added into `headers`.
    pub fn apply(&self, headers: &mut HeaderMap) {
        let mut added = self.0.lock().expect("response headers lock");
        if !added.is_empty() {
            headers.extend(std::mem::take(&mut *added));
        }
    }
}
