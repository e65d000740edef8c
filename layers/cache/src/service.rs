//! [`Cached`], the service the layer builds.

use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::future::BoxFuture;
use tower_chat::{
    cancellable, CancellationToken, ChatError, ChatRequest, ChatStream, DroppedFields, ModelInfo,
    ModelMetadata,
};
use tower_service::Service;
use tracing::Instrument;

use crate::config::Config;
use crate::control::{CacheControl, CacheOutcome, CacheStatus, CacheTtl};
use crate::flight::{drive, follow, wait_start, Role, Start};
use crate::key::CacheKey;

/// Answers a call from the cache, from an identical call in flight, or from the inner service; built by
/// [`CacheLayer`](crate::CacheLayer).
#[derive(Clone, Debug)]
pub struct Cached<S> {
    inner: S,
    config: Config,
    /// The model a request that names none is sent to: the inner service's, read when the layer wrapped it.
    default_model: Option<Arc<str>>,
}

impl<S> Cached<S> {
    /// Wrap `inner` with a layer's configuration, keying requests that name no model under `default_model`.
    pub(crate) fn from_config(inner: S, config: Config, default_model: Option<Arc<str>>) -> Self {
        Cached {
            inner,
            config,
            default_model,
        }
    }

    tower_chat::define_inner_service_accessors!();

    pub(crate) fn config(&self) -> &Config {
        &self.config
    }
}

impl<S: ModelInfo> ModelInfo for Cached<S> {
    fn model_metadata(&self) -> ModelMetadata {
        self.inner.model_metadata()
    }
}

impl<S> Service<ChatRequest> for Cached<S>
where
    S: Service<ChatRequest, Response = ChatStream, Error = ChatError> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = ChatStream;
    type Error = ChatError;
    type Future = BoxFuture<'static, Result<ChatStream, ChatError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: ChatRequest) -> Self::Future {
        // The service that was polled ready goes with this call; `self` keeps a fresh clone (axum's
        // clone-and-swap), which is polled ready before its own call.
        let fresh = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, fresh);
        let config = self.config.clone();
        let model = request
            .options
            .model
            .as_deref()
            .map(Arc::from)
            .or_else(|| self.default_model.clone());
        Box::pin(respond(inner, config, model, request))
    }
}

/// Tell the caller (and the statistics) how the call is served.
fn settle(config: &Config, request: &ChatRequest, status: CacheStatus) {
    config.runtime.stats.count(status);
    if let Some(outcome) = request.extensions.get::<CacheOutcome>() {
        outcome.set(status);
    }
    tracing::debug!(cache = status.as_str(), "response cache");
}

/// `stream`, ended with a cancellation error when the caller's token is cancelled.
fn for_caller(stream: ChatStream, token: Option<CancellationToken>) -> ChatStream {
    match token {
        Some(token) => cancellable(stream, token),
        None => stream,
    }
}

async fn respond<S>(
    mut inner: S,
    config: Config,
    model: Option<Arc<str>>,
    request: ChatRequest,
) -> Result<ChatStream, ChatError>
where
    S: Service<ChatRequest, Response = ChatStream, Error = ChatError> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    let control = request.extensions.get::<CacheControl>().copied();
    let ttl = request
        .extensions
        .get::<CacheTtl>()
        .map_or_else(|| config.ttl_of(model.as_deref()), |ttl| ttl.0);
    if control == Some(CacheControl::NoStore) || ttl.is_zero() {
        settle(&config, &request, CacheStatus::Bypass);
        return inner.call(request).await;
    }

    let key = CacheKey::of(&request, model.as_deref(), &config.scope);
    let streamed = request.options.stream;
    let token = request.cancellation().cloned();
    if control != Some(CacheControl::NoCache) {
        if let Some(answer) = config.read(key).await {
            settle(&config, &request, CacheStatus::Hit);
            // What the call left out of its request, named again: nothing reached the upstream this time.
            if let Some(list) = request.extensions.get::<DroppedFields>() {
                answer
                    .dropped()
                    .iter()
                    .for_each(|name| list.record(name.as_str()));
            }
            return Ok(for_caller(answer.replay(streamed), token));
        }
    }

    match config.runtime.flights.enter(key) {
        Role::Follow(flight, mut receiver) => {
            match wait_start(&flight, &mut receiver, Some(config.follow_timeout)).await {
                Start::Started => {
                    settle(&config, &request, CacheStatus::Joined);
                    Ok(for_caller(follow(flight, receiver, streamed, true), token))
                }
                Start::Failed(error) => {
                    settle(&config, &request, CacheStatus::Joined);
                    Err(error)
                }
                Start::GiveUp => {
                    drop(receiver);
                    // The call this one joined is stuck or gone: call the model directly (not stored: the call
                    // in flight, if it completes, stores its own answer).
                    settle(&config, &request, CacheStatus::Miss);
                    inner.call(request).await
                }
            }
        }
        Role::Lead(flight, mut receiver) => {
            settle(&config, &request, CacheStatus::Miss);
            // The upstream call belongs to everyone who joins it: the leader's cancellation token stays with the
            // leader's own stream (below), and the call stops early only when every caller has left.
            let mut upstream = request;
            if token.is_some() {
                upstream.extensions.remove::<CancellationToken>();
            }
            let dropped = upstream.extensions.get::<DroppedFields>().cloned();
            let call = inner.call(upstream);
            // In the leader's span, so that what the layers below trace sits under the call that started it.
            let led = flight.clone();
            let driving = async move {
                if let Some(answer) = drive(call, &led).await {
                    let names = dropped.map(|list| list.names()).unwrap_or_default();
                    config.write(key, answer.with_dropped(names), ttl).await;
                }
                config.runtime.flights.leave(&key, &led);
            };
            tokio::spawn(driving.instrument(tracing::Span::current()));
            match wait_start(&flight, &mut receiver, None).await {
                Start::Failed(error) => Err(error),
                Start::Started | Start::GiveUp => {
                    Ok(for_caller(follow(flight, receiver, streamed, false), token))
                }
            }
        }
    }
}
