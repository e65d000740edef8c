//! [`ModelInfo`] through tower's own middleware, so metadata survives a `tower::timeout`, a concurrency or rate
//! limit, a retry, a filter or a `map_future` placed between tower-chat layers and the leaf.
//!
//! tower's `MapRequest`, `MapResponse`, `MapErr`, `MapResult`, `AndThen` and `Then` keep their inner service
//! private (no `get_ref`), and a `Buffer` moves it into a worker task, so nothing can read through them: box such
//! a stack as a [`BoxChatService`](crate::BoxChatService), which takes the metadata when it is built.

use tower::filter::{AsyncFilter, Filter};
use tower::limit::{ConcurrencyLimit, RateLimit};
use tower::retry::Retry;
use tower::timeout::Timeout;
use tower::util::{Either, MapFuture};

use crate::{ModelInfo, ModelMetadata};

impl<S: ModelInfo> ModelInfo for Timeout<S> {
    fn model_metadata(&self) -> ModelMetadata {
        self.get_ref().model_metadata()
    }
}

impl<S: ModelInfo> ModelInfo for ConcurrencyLimit<S> {
    fn model_metadata(&self) -> ModelMetadata {
        self.get_ref().model_metadata()
    }
}

impl<S: ModelInfo> ModelInfo for RateLimit<S> {
    fn model_metadata(&self) -> ModelMetadata {
        self.get_ref().model_metadata()
    }
}

impl<P, S: ModelInfo> ModelInfo for Retry<P, S> {
    fn model_metadata(&self) -> ModelMetadata {
        self.get_ref().model_metadata()
    }
}

impl<S: ModelInfo, F> ModelInfo for MapFuture<S, F> {
    fn model_metadata(&self) -> ModelMetadata {
        self.get_ref().model_metadata()
    }
}

impl<S: ModelInfo, P> ModelInfo for Filter<S, P> {
    fn model_metadata(&self) -> ModelMetadata {
        self.get_ref().model_metadata()
    }
}

impl<S: ModelInfo, P> ModelInfo for AsyncFilter<S, P> {
    fn model_metadata(&self) -> ModelMetadata {
        self.get_ref().model_metadata()
    }
}

/// The metadata of the branch this service routes to.
impl<A: ModelInfo, B: ModelInfo> ModelInfo for Either<A, B> {
    fn model_metadata(&self) -> ModelMetadata {
        match self {
            Either::Left(service) => service.model_metadata(),
            Either::Right(service) => service.model_metadata(),
        }
    }
}
