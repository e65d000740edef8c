//! `--body-timeout` as one deadline for the whole request body, counted from the moment the request's head was
//! read: a body that has not ended by then fails with [`BodyDeadlineExceeded`] (answered `408 request_timeout`).
//!
//! Own code because tower-http's `RequestBodyTimeoutLayer` restarts its timer at every frame: a client that
//! sends one byte every few seconds would hold its connection, and a task, for as long as it likes. A deadline
//! over the whole body bounds that, as it did before the edge moved to tower-http.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use http::Request;
use http_body::{Frame, SizeHint};
use tokio::time::Sleep;

/// The body did not end within `--body-timeout` of the request's head.
#[derive(Debug)]
pub(crate) struct BodyDeadlineExceeded;

impl std::fmt::Display for BodyDeadlineExceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the request body did not end within the body timeout")
    }
}

impl std::error::Error for BodyDeadlineExceeded {}

/// A request body that fails once its deadline has passed.
pub(crate) struct DeadlineBody {
    inner: Body,
    deadline: Pin<Box<Sleep>>,
}

impl http_body::Body for DeadlineBody {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        // What has already arrived is read first: only a body still waiting for bytes is cut.
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        match self.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyDeadlineExceeded)))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The request with its body under a deadline of `timeout` from now.
pub(crate) fn with_deadline<B>(request: Request<B>, timeout: Duration) -> Request<Body>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    request.map(|inner| {
        Body::new(DeadlineBody {
            inner: Body::new(inner),
            deadline: Box::pin(tokio::time::sleep(timeout)),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test(start_paused = true)]
    async fn a_body_that_keeps_dripping_is_cut_at_the_deadline() {
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(8);
        let dripping = Body::new(http_body_util::StreamBody::new(tokio_stream_from(rx)));
        let request = with_deadline(Request::new(dripping), Duration::from_secs(1));
        tokio::spawn(async move {
            // A byte every 300 ms: never a gap as long as the timeout, never an end.
            loop {
                if tx
                    .send(Ok(Frame::data(Bytes::from_static(b"x"))))
                    .await
                    .is_err()
                {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        });
        let error = request.into_body().collect().await.unwrap_err();
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&error);
        let mut found = false;
        while let Some(e) = source {
            found |= e.is::<BodyDeadlineExceeded>();
            source = e.source();
        }
        assert!(found, "{error}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_arrives_in_time_is_read_whole() {
        let request = with_deadline(
            Request::new(Body::from("{\"model\":\"m\"}")),
            Duration::from_secs(1),
        );
        let body = request.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"{\"model\":\"m\"}");
    }

    fn tokio_stream_from<T: Send + 'static>(
        mut rx: tokio::sync::mpsc::Receiver<T>,
    ) -> impl futures_util::Stream<Item = T> + Send {
        futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
    }
}
