//! Store opening: the database `--database-url` (PostgreSQL) or `--db` (SQLite) names, migrated on open, and the
//! layers backed by it ([`Stores`]): persistence (the call records) and approvals (pending ids and their audit
//! log, in the same database so a paused turn survives a restart and resumes in any replica sharing it).

use std::sync::Arc;

use tower_chat::ChatError;
use tower_chat_approval::{
    ApprovalLayer, ApprovalStore, PostgresApprovalStore, SqliteApprovalStore,
};
use tower_chat_persistence::{PersistenceLayer, PostgresStore, SqliteStore, Store, StoreError};

use crate::config::Config;
use crate::GatewayError;

/// The layers backed by the database: persistence, and approvals whose pending ids and audit log live in the
/// same database (so a paused turn survives a restart and resumes in any replica sharing it).
#[derive(Clone)]
pub struct Stores {
    /// Records every call.
    pub persistence: PersistenceLayer,
    /// Issues and verifies approval ids.
    pub approvals: ApprovalLayer,
    /// The approval store, for looking up a pending approval's conversation.
    pub approval_store: Arc<dyn ApprovalStore>,
    /// Console sessions, in the same database.
    pub(crate) sessions: crate::operator::console::SessionStore,
    /// Managed keys and teams, in the same database.
    pub(crate) keys: crate::keys::KeyStore,
}

impl std::fmt::Debug for Stores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stores")
            .field("persistence", &self.persistence)
            .field("approvals", &self.approvals)
            .finish_non_exhaustive()
    }
}

/// Open the store `--database-url` (PostgreSQL) or `--db` (SQLite) names (migrations are applied on open) and
/// build the layers that use it.
pub async fn stores(config: &Config) -> Result<Stores, GatewayError> {
    let store_error =
        |what: String| move |e: StoreError| GatewayError::Config(format!("{what}: {e}"));
    let approval_error =
        |what: String| move |e: ChatError| GatewayError::Config(format!("{what}: {e}"));
    // One database for both: the call records and the approval crate's tables.
    let session_error =
        |what: String| move |e: StoreError| GatewayError::Config(format!("{what}: {e}"));
    let (store, approval_store, sessions, keys): (Arc<dyn Store>, Arc<dyn ApprovalStore>, _, _) =
        match &config.database_url {
            Some(url) => {
                let store = PostgresStore::connect(url.clone())
                    .await
                    .map_err(store_error("--database-url".into()))?;
                let approvals = PostgresApprovalStore::new(store.clone())
                    .await
                    .map_err(approval_error("--database-url".into()))?;
                let sessions = crate::operator::console::SessionStore::postgres(store.clone())
                    .await
                    .map_err(session_error("--database-url".into()))?;
                let keys = crate::keys::KeyStore::postgres(store.clone(), url.clone())
                    .await
                    .map_err(session_error("--database-url".into()))?;
                (Arc::new(store), Arc::new(approvals), sessions, keys)
            }
            None => {
                // The console searches the call log: the store keeps its full-text index.
                let store = SqliteStore::builder(&config.db)
                    .search_index(true)
                    .open()
                    .await
                    .map_err(store_error(format!("--db {}", config.db.display())))?;
                let approvals = SqliteApprovalStore::new(store.clone())
                    .await
                    .map_err(approval_error(format!("--db {}", config.db.display())))?;
                let sessions = crate::operator::console::SessionStore::sqlite(store.clone())
                    .await
                    .map_err(session_error(format!("--db {}", config.db.display())))?;
                let keys = crate::keys::KeyStore::sqlite(store.clone())
                    .await
                    .map_err(session_error(format!("--db {}", config.db.display())))?;
                (Arc::new(store), Arc::new(approvals), sessions, keys)
            }
        };
    if let Some(retention) = config.retention {
        super::retention::spawn(&store, retention);
    }
    Ok(Stores {
        persistence: PersistenceLayer::shared(store).prices(config.file.limits.price_table()),
        approvals: {
            let layer = ApprovalLayer::new()
                .store(approval_store.clone())
                .ttl(config.approval_ttl);
            if config.operator_keys_file.is_some() {
                layer.approver_rule(crate::operator::only_operators_approve)
            } else {
                layer
            }
        },
        approval_store,
        sessions,
        keys,
    })
}
