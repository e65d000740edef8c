//! [`TurnLayer`]: what the turn layer holds, shared by every request.

use std::sync::Arc;

use crate::turn::service::Turn;
use crate::turn::{Keeping, Turns};

/// Wraps the gateway's stack in [`Turn`]: see the [module docs](crate::turn).
#[derive(Clone)]
pub(crate) struct TurnLayer {
    pub(super) keeping: Arc<Keeping>,
}

impl std::fmt::Debug for TurnLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TurnLayer").finish_non_exhaustive()
    }
}

impl TurnLayer {
    /// The layer over what `turns` holds (its stores, operators and limits).
    pub(crate) fn new(turns: &Turns) -> Self {
        TurnLayer {
            keeping: Arc::new(Keeping {
                pending: turns.pending.clone(),
                approval_store: turns.approval_store.clone(),
                records: turns.records.clone(),
                media: turns.media.clone(),
                operators: turns.operators.clone(),
                server_tools: turns.server_tools.clone(),
                mcp: turns.mcp.clone(),
                caching: turns.caching.clone(),
            }),
        }
    }
}

impl<S> tower::Layer<S> for TurnLayer {
    type Service = Turn<S>;

    fn layer(&self, inner: S) -> Turn<S> {
        Turn::new(inner, self.keeping.clone())
    }
}
