//! What a [`PersistenceLayer`](crate::PersistenceLayer) is configured with, held by every service it builds: the
//! background writer, whether calls are recorded as they start, the prices, and the writer's sizes.

use std::sync::Arc;

use tower_chat::PriceTable;

use crate::recorder::Recorder;

/// A layer's settings; clones share the writer.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub(crate) recorder: Recorder,
    pub(crate) in_flight: bool,
    pub(crate) prices: Option<Arc<PriceTable>>,
    pub(crate) buffer: usize,
    pub(crate) max_batch: usize,
}
