//! [`ModelGate`]: the chat routes' check of a managed key's model allow-list. It runs where the model is known,
//! once the route has parsed the body, and before the turn or any layer sees the call; a refusal is a 403
//! `model_not_allowed` in the route's error shape. A call it lets through carries its key's team
//! ([`CallerTeam`]), which the call's record keeps and the spend rollup sums by.

use std::task::{Context, Poll};

use futures_util::future::{self, Either, Ready};
use tower_chat::{CallerIdentity, ChatError, ChatRequest, ChatStream};
use tower_chat_persistence::CallerTeam;

use super::table::ManagedKeys;

/// Refuses a managed key's call to a model its list does not allow; passes every other call to `inner`.
#[derive(Clone, Debug)]
pub(crate) struct ModelGate<S> {
    inner: S,
    keys: Option<ManagedKeys>,
}

impl<S> ModelGate<S> {
    /// `inner` behind the allow-lists of `keys` (none: every call passes).
    pub(crate) fn new(inner: S, keys: Option<ManagedKeys>) -> Self {
        ModelGate { inner, keys }
    }
}

impl<S> tower::Service<ChatRequest> for ModelGate<S>
where
    S: tower::Service<ChatRequest, Response = ChatStream, Error = ChatError>,
{
    type Response = ChatStream;
    type Error = ChatError;
    type Future = Either<Ready<Result<ChatStream, ChatError>>, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ChatError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: ChatRequest) -> Self::Future {
        if let (Some(keys), Some(caller)) = (&self.keys, request.extensions.get::<CallerIdentity>())
        {
            let model = request.options.model.as_deref().unwrap_or_default();
            let table = keys.table();
            if let Some(refusal) = table.model_refusal(caller.as_str(), model) {
                return Either::Left(future::ready(Err(refusal.into_chat())));
            }
            if let Some(team) = table.team_of(caller.as_str()) {
                request.extensions.insert(CallerTeam::new(team));
            }
        }
        Either::Right(self.inner.call(request))
    }
}
