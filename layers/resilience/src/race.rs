//! Two futures raced without a runtime macro: the first to finish wins, the other is dropped.

use std::future::{poll_fn, Future};
use std::pin::pin;
use std::task::Poll;

/// Which future finished first.
pub(crate) enum Either<A, B> {
    Left(A),
    Right(B),
}

/// Poll `left` then `right` until one is ready; `left` wins a tie.
pub(crate) async fn race<A: Future, B: Future>(left: A, right: B) -> Either<A::Output, B::Output> {
    let mut left = pin!(left);
    let mut right = pin!(right);
    poll_fn(|cx| {
        if let Poll::Ready(out) = left.as_mut().poll(cx) {
            return Poll::Ready(Either::Left(out));
        }
        if let Poll::Ready(out) = right.as_mut().poll(cx) {
            return Poll::Ready(Either::Right(out));
        }
        Poll::Pending
    })
    .await
}

/// Resolves when `token` is cancelled; never without one.
pub(crate) async fn cancelled(token: Option<tower_chat::CancellationToken>) {
    match token {
        Some(token) => token.cancelled_owned().await,
        None => std::future::pending().await,
    }
}
