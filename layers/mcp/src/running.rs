//! [`StopOnDrop`]: the servers stay up while the hub or one of its tools is held.

use tower_chat::CancellationToken;

/// Stops the servers when the last holder goes: the hub and every tool it made hold one.
///
/// The tools must keep the servers up, not only the hub: a request carries the tools it was offered in its
/// extensions, and its stream runs their calls after the service that offered them is gone (`oneshot` drops the
/// service as soon as it returns the stream). When only the hub held the servers, the tool calls of such a stream
/// failed with rmcp's "Transport closed", on any runtime flavour and both transports (the former `no_run` doc
/// example; `tests/lifetime.rs`). No cycle: this guard holds only a token, not the hub.
pub(crate) struct StopOnDrop(pub(crate) CancellationToken);

impl StopOnDrop {
    pub(crate) fn is_stopped(&self) -> bool {
        self.0.is_cancelled()
    }
}

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}
