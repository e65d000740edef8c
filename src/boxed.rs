//! [`BoxChatService`]: a type-erased, cloneable chat service that still answers [`ModelInfo`].

use std::fmt;
use std::task::{Context, Poll};

use futures_util::future::BoxFuture;
use tower::util::BoxCloneSyncService;
use tower_service::Service;

use crate::{ChatError, ChatRequest, ChatStream, ModelInfo, ModelMetadata};

/// A boxed chat service (`Clone + Send + Sync`) that keeps the metadata of what it boxes, so a stack can be
/// named as one type — stored in a struct, chosen at run time, shared by axum handlers — and the layers above
/// it still report the leaf's provider and model. tower's `BoxCloneService` would erase the metadata.
///
/// ```
/// use tower::ServiceExt;
/// use tower_chat::openai::OpenAiChat;
/// use tower_chat::{BoxChatService, ModelInfo};
///
/// let leaf = OpenAiChat::builder().base_url("http://127.0.0.1:9").model("gpt-4o-mini").build()?;
/// let chat = BoxChatService::new(leaf.clone());
/// assert_eq!(chat.model_metadata().model_id.as_deref(), Some("gpt-4o-mini"));
///
/// // Middleware that hides its inner service (here tower's `MapRequest`): name the metadata yourself.
/// let mapped = leaf.clone().map_request(|request: tower_chat::ChatRequest| request.stream(false));
/// let chat = BoxChatService::with_metadata(mapped, leaf.model_metadata());
/// assert_eq!(chat.model_metadata().provider, "openai");
/// # Ok::<(), tower_chat::ChatError>(())
/// ```
#[derive(Clone)]
pub struct BoxChatService {
    inner: BoxCloneSyncService<ChatRequest, ChatStream, ChatError>,
    metadata: ModelMetadata,
}

impl BoxChatService {
    /// Box `service`, reading its metadata now.
    pub fn new<S>(service: S) -> Self
    where
        S: Service<ChatRequest, Response = ChatStream, Error = ChatError>
            + ModelInfo
            + Clone
            + Send
            + Sync
            + 'static,
        S::Future: Send + 'static,
    {
        let metadata = service.model_metadata();
        BoxChatService::with_metadata(service, metadata)
    }

    /// Box `service` (which cannot tell its metadata itself) with `metadata`.
    pub fn with_metadata<S>(service: S, metadata: ModelMetadata) -> Self
    where
        S: Service<ChatRequest, Response = ChatStream, Error = ChatError>
            + Clone
            + Send
            + Sync
            + 'static,
        S::Future: Send + 'static,
    {
        BoxChatService {
            inner: BoxCloneSyncService::new(service),
            metadata,
        }
    }
}

impl Service<ChatRequest> for BoxChatService {
    type Response = ChatStream;
    type Error = ChatError;
    type Future = BoxFuture<'static, Result<ChatStream, ChatError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ChatError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: ChatRequest) -> Self::Future {
        self.inner.call(request)
    }
}

impl ModelInfo for BoxChatService {
    fn model_metadata(&self) -> ModelMetadata {
        self.metadata.clone()
    }
}

impl fmt::Debug for BoxChatService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BoxChatService")
            .field("metadata", &self.metadata)
            .finish_non_exhaustive()
    }
}
