//! What the console's handlers read ([`ConsoleState`]), and the live session a request's cookie names.

use std::collections::HashMap;
use std::sync::Arc;

use http::HeaderMap;
use maud::Markup;
use tower_chat_persistence::Store;

use super::session::Session;
use super::session_store::SessionStore;
use crate::operator::OperatorState;

/// Rendered usage pages: (range, by) → when rendered, the page's `<main>` content.
pub(crate) type UsageCache = HashMap<(&'static str, &'static str), (std::time::Instant, Markup)>;

/// What the console's handlers read.
#[derive(Clone)]
pub(crate) struct ConsoleState {
    pub(crate) operators: OperatorState,
    pub(crate) records: Option<Arc<dyn Store>>,
    /// The limits layer, for the spend page's budgets (`None` without `[limits]`).
    pub(crate) limits: Option<tower_chat_limits::LimitsLayer>,
    /// The managed keys and teams, for their pages (`None` when the gateway manages no keys).
    pub(crate) managed: Option<crate::keys::admin::AdminState>,
    pub(crate) sessions: SessionStore,
    /// Rendered usage pages by query, for [`super::usage::CACHE_FOR`]: operators refreshing the page do not each
    /// re-read and re-aggregate every call of the range.
    pub(crate) usage_cache: Arc<std::sync::Mutex<UsageCache>>,
}

impl ConsoleState {
    /// The live session the request's cookie names: found, not expired, and logged in with a key the operator
    /// keys file still holds (a session of a removed or rotated key is ended here, on every replica).
    pub(crate) async fn session(
        &self,
        headers: &HeaderMap,
    ) -> Result<Option<Session>, tower_chat_persistence::StoreError> {
        let Some(session) = self.sessions.find(headers).await? else {
            return Ok(None);
        };
        if self
            .operators
            .keys
            .holds_fingerprint(&session.key_fingerprint)
        {
            return Ok(Some(session));
        }
        tracing::info!(
            operator = session.operator,
            "console: session ended, its operator key is no longer configured"
        );
        self.sessions.remove(headers).await?;
        Ok(None)
    }
}
