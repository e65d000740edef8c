//! The chat endpoints (Chat Completions, Messages, Responses): the wire crate's routes
//! ([`WireRouter`]) over the gateway's stack under the turn layer ([`crate::turn`]), the same routes a user
//! embedding the wire crate serves, told that the service keeps turns. A body that missed `--body-timeout` is a
//! `408` here, whatever the route made of the failed read.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use axum::Router;
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use tower::Layer;
use tower_chat_wire::{ApprovalNotices, WireRouter};

use crate::edge::in_flight::{self, BodyTimeout};
use crate::turn::layer::TurnLayer;
use crate::turn::Turns;

/// The three chat routes over `turns`' stack, behind the model allow-lists of `managed` keys.
pub(crate) fn routes<T: Clone + Send + Sync + 'static>(
    turns: &Turns,
    managed: Option<crate::keys::ManagedKeys>,
) -> Router<T> {
    let service = crate::keys::gate::ModelGate::new(
        TurnLayer::new(turns).layer(turns.stack.clone()),
        managed,
    );
    WireRouter::new(service)
        .limits(turns.parse.limits)
        .body_limit(turns.body_limit)
        .upstream(turns.parse.upstream)
        .keeps_turns(if turns.operators.is_some() {
            ApprovalNotices::OperatorsDecide
        } else {
            ApprovalNotices::ClientDecides
        })
        .cut(turns.drain_over.clone())
        .all()
        .route_layer(axum::middleware::from_fn(answer_body_timeout))
}

/// A request whose body did not arrive within `--body-timeout` is answered `408` (the connection closed after
/// it), not with the route's error for a body it could not read.
async fn answer_body_timeout(request: Request, next: Next) -> Response {
    let missed = Arc::new(AtomicBool::new(false));
    let request = request.map(|inner| {
        Body::new(WatchedBody {
            inner,
            missed: missed.clone(),
        })
    });
    let response = next.run(request).await;
    if missed.load(Ordering::Relaxed) {
        return in_flight::body_timeout_response();
    }
    response
}

/// A request body that notes whether it failed for its deadline.
struct WatchedBody {
    inner: Body,
    missed: Arc<AtomicBool>,
}

impl http_body::Body for WatchedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Err(error))) = &polled {
            if BodyTimeout::caused(error) {
                self.missed.store(true, Ordering::Relaxed);
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
