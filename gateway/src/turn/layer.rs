//! [`TurnLayer`]: what the turn layer holds, shared by every request.

use std::sync::Arc;

use tower_chat_approval::ApprovalStore;
use tower_chat_persistence::Store;

use crate::edge::in_flight::MediaInFlight;
use crate::operator::OperatorState;
use crate::stack::cache::RouteTtls;
use crate::stack::mcp::GatewayMcp;
use crate::turn::pending::PendingStore;
use crate::turn::service::Turn;
use crate::turn::Turns;

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

/// What a turn is resumed from and kept in.
pub(super) struct Keeping {
    /// Paused turns and hand-backs this process holds.
    pub(super) pending: Arc<PendingStore>,
    /// Where an approval layer keeps pending approvals, and the call records: together they let a resume find
    /// its conversation after a restart, or in another replica; the records also hold stored responses.
    pub(super) approval_store: Option<Arc<dyn ApprovalStore>>,
    pub(super) records: Option<Arc<dyn Store>>,
    /// `--max-media-in-flight`: the media of all turns in flight, capped.
    pub(super) media: Arc<MediaInFlight>,
    /// Operator decisions on pending approvals (`--operator-keys-file`).
    pub(super) operators: Option<OperatorState>,
    /// The names of the server-side tools the gateway offers: client tools must not take them.
    pub(super) server_tools: Vec<&'static str>,
    /// `[[mcp]]`: the MCP tools the loop offers, whose names client tools must not take.
    pub(super) mcp: Option<GatewayMcp>,
    /// `[cache]` is on: requests carry their `Cache-Control` (and their route's time to live) and answers their
    /// `x-cache`.
    pub(super) caching: Option<Arc<RouteTtls>>,
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
