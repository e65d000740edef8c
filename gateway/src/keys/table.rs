//! [`ManagedKeys`]: the in-memory table authentication reads (digest → key), swapped whole when the store's
//! version counter moves, and the task that keeps it current.
//!
//! A request never waits on the database: it takes the current table (an `Arc` behind a lock held for the
//! clone) and looks its key's digest up in a hash map. The lookup is not constant-time, and needs not be: the
//! map is keyed by the SHA-256 of the presented secret, whose timing tells an attacker nothing about any stored
//! secret's bytes. Swapping the table leaves the calls admitted under the old one running.
//!
//! The table is reloaded after every change made through this process, on every PostgreSQL `NOTIFY` of a change
//! made elsewhere, and every backstop interval (`[keys] recheck_seconds`, default 5 s) when the counter moved (a
//! notification lost while the listening connection was down, a change made by another process sharing the
//! SQLite file).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use tower_chat::CallerIdentity;

use super::record::{allowed, KeyDoc, Kind, Row, TeamDoc};
use super::store::{KeyStore, Snapshot, CHANNEL};
use crate::error::ApiError;

/// A key as authentication sees it.
#[derive(Clone, Debug)]
pub(crate) struct Key {
    pub(crate) row: Row,
    pub(crate) doc: KeyDoc,
    pub(crate) caller: CallerIdentity,
}

/// One consistent view of the store.
#[derive(Debug, Default)]
pub(crate) struct Table {
    pub(crate) version: i64,
    /// Each key under its current digest, and under its previous one during a rotation's grace (`true`).
    by_digest: HashMap<[u8; 32], (Arc<Key>, bool)>,
    by_name: HashMap<String, Arc<Key>>,
    pub(crate) keys: Vec<Arc<Key>>,
    pub(crate) teams: Vec<(Row, TeamDoc)>,
}

fn digest_bytes(hex: &str) -> Option<[u8; 32]> {
    let mut out = [0u8; 32];
    if hex.len() != 64 {
        return None;
    }
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

impl Table {
    /// The table of `snapshot`.
    pub(crate) fn build(snapshot: Snapshot) -> Table {
        let mut table = Table {
            version: snapshot.version,
            ..Table::default()
        };
        for row in snapshot.keys {
            let doc = match row.key_doc() {
                Ok(doc) => doc,
                Err(e) => {
                    // One unreadable row refuses its own key, not every key.
                    tracing::warn!(error = %e, "managed key left out");
                    continue;
                }
            };
            let key = Arc::new(Key {
                caller: CallerIdentity::new(row.name.clone()),
                row,
                doc,
            });
            if let Some(digest) = digest_bytes(&key.row.digest) {
                table.by_digest.insert(digest, (key.clone(), false));
            }
            if let Some(previous) = key.row.previous_digest.as_deref().and_then(digest_bytes) {
                table.by_digest.insert(previous, (key.clone(), true));
            }
            table.by_name.insert(key.row.name.clone(), key.clone());
            table.keys.push(key);
        }
        for row in snapshot.teams {
            match row.team_doc() {
                Ok(doc) => table.teams.push((row, doc)),
                Err(e) => tracing::warn!(error = %e, "team left out"),
            }
        }
        table
    }

    /// The caller `secret` authenticates on `path`: `None` when it is no managed key; a 401 when the key was
    /// revoked, expired or rotated past its grace; a 403 when the key may not use the route.
    pub(crate) fn authenticate(
        &self,
        secret: &str,
        path: &str,
        now_ms: i64,
    ) -> Option<Result<CallerIdentity, ApiError>> {
        let (key, previous) = self.by_digest.get(&crate::edge::auth::digest(secret))?;
        let refused = if key.doc.revoked_at.is_some() {
            Some("this key was revoked")
        } else if key.doc.status(now_ms) == "expired" {
            Some("this key expired")
        } else if *previous
            && key
                .doc
                .previous_valid_until
                .is_none_or(|until| until <= now_ms)
        {
            Some("this key was rotated and its grace period is over; use the new key")
        } else {
            None
        };
        if let Some(message) = refused {
            return Some(Err(ApiError::unauthorized(message)));
        }
        if !allowed(&key.doc.routes, path) {
            return Some(Err(super::record::forbidden(
                "route_not_allowed",
                format!("this key may not use {path}"),
            )));
        }
        Some(Ok(key.caller.clone()))
    }

    /// Whether `caller` may call `model`: callers that are no managed key, and keys without a model list, may.
    pub(crate) fn model_refusal(&self, caller: &str, model: &str) -> Option<ApiError> {
        let key = self.by_name.get(caller)?;
        (!allowed(&key.doc.models, model)).then(|| {
            super::record::forbidden(
                "model_not_allowed",
                format!("this key may not use the model `{model}`"),
            )
        })
    }

    /// The name of the team `caller`'s managed key is in (the name the limits and the spend rollup know it by).
    pub(crate) fn team_of(&self, caller: &str) -> Option<&str> {
        let team = self.by_name.get(caller)?.doc.team.as_deref()?;
        self.teams
            .iter()
            .find(|(row, _)| row.id == team)
            .map(|(row, _)| row.name.as_str())
    }
}

/// The managed keys of a gateway: the store, the current table, and the names of the keys file (a managed key
/// may not take one). Cheap to clone.
#[derive(Clone, Debug)]
pub(crate) struct ManagedKeys {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    store: KeyStore,
    table: RwLock<Arc<Table>>,
    /// Serialises reloads, so an older snapshot never replaces a newer one.
    reload: tokio::sync::Mutex<()>,
    file_names: HashSet<String>,
    on_change: Option<OnChange>,
}

/// What runs each time the table changes (and once when it is loaded): the gateway hands the limits layer the
/// policy of the new table.
pub(crate) struct OnChange(pub(crate) Box<dyn Fn(&Table) + Send + Sync>);

impl std::fmt::Debug for OnChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OnChange")
    }
}

impl ManagedKeys {
    /// Load the table from `store`; refused when a managed key takes the name of a line of the keys file.
    /// Starts the task that keeps the table current (it ends when the last clone is dropped).
    pub(crate) async fn open(
        store: KeyStore,
        file_names: HashSet<String>,
        on_change: Option<OnChange>,
        recheck: Duration,
    ) -> Result<ManagedKeys, String> {
        let snapshot = store.load().await.map_err(|e| e.to_string())?;
        let mut both: Vec<&str> = snapshot
            .keys
            .iter()
            .map(|row| row.name.as_str())
            .filter(|name| file_names.contains(*name))
            .collect();
        if !both.is_empty() {
            both.sort_unstable();
            return Err(format!(
                "the key name{} {} {} in both --api-keys-file and the managed keys of the database; rename \
                 the line of the file or remove it",
                if both.len() == 1 { "" } else { "s" },
                both.iter()
                    .map(|n| format!("`{n}`"))
                    .collect::<Vec<_>>()
                    .join(", "),
                if both.len() == 1 { "is" } else { "are" },
            ));
        }
        let table = Table::build(snapshot);
        if let Some(on_change) = &on_change {
            (on_change.0)(&table);
        }
        let keys = ManagedKeys {
            inner: Arc::new(Inner {
                table: RwLock::new(Arc::new(table)),
                reload: tokio::sync::Mutex::new(()),
                file_names,
                store: store.clone(),
                on_change,
            }),
        };
        tokio::spawn(keep_current(Arc::downgrade(&keys.inner), store, recheck));
        Ok(keys)
    }

    /// The table now.
    pub(crate) fn table(&self) -> Arc<Table> {
        self.inner
            .table
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The store.
    pub(crate) fn store(&self) -> &KeyStore {
        &self.inner.store
    }

    /// Whether `name` is a line of the keys file.
    pub(crate) fn in_file(&self, name: &str) -> bool {
        self.inner.file_names.contains(name)
    }

    /// Reload the table when the store's counter moved.
    pub(crate) async fn refresh(&self) {
        self.inner.refresh().await;
    }

    /// The row of `kind` under `id` in the current table.
    pub(crate) fn row(&self, kind: Kind, id: &str) -> Option<Row> {
        let table = self.table();
        match kind {
            Kind::Key => table
                .keys
                .iter()
                .find(|k| k.row.id == id)
                .map(|k| k.row.clone()),
            Kind::Team => table
                .teams
                .iter()
                .find(|(row, _)| row.id == id)
                .map(|(row, _)| row.clone()),
        }
    }
}

impl Inner {
    async fn refresh(&self) {
        let _one_at_a_time = self.reload.lock().await;
        let current = self.table.read().unwrap_or_else(|e| e.into_inner()).version;
        match self.store.version().await {
            Ok(version) if version == current => return,
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "managed keys: cannot read the version; the table stays as it is");
                return;
            }
        }
        match self.store.load().await {
            Ok(snapshot) => {
                let table = Arc::new(Table::build(snapshot));
                if let Some(on_change) = &self.on_change {
                    (on_change.0)(&table);
                }
                *self.table.write().unwrap_or_else(|e| e.into_inner()) = table;
            }
            Err(e) => {
                tracing::warn!(error = %e, "managed keys: cannot reload; the table stays as it is")
            }
        }
    }
}

/// Reload on notifications (PostgreSQL) and every `recheck`, until the keys are dropped.
async fn keep_current(keys: Weak<Inner>, store: KeyStore, recheck: Duration) {
    let mut backstop = tokio::time::interval(recheck);
    backstop.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut listener: Option<Listener> = None;
    loop {
        if listener.is_none() {
            if let KeyStore::Postgres(_, url) = &store {
                listener = Listener::connect(url, recheck).await;
            }
        }
        let notified = async {
            match &mut listener {
                Some(listener) => listener.changes.recv().await,
                None => std::future::pending().await,
            }
        };
        let broke = tokio::select! {
            _ = backstop.tick() => false,
            change = notified => change.is_none(),
        };
        if broke {
            // The connection broke: listen again at the next round; the backstop covers the gap.
            listener = None;
        }
        let Some(keys) = keys.upgrade() else {
            return;
        };
        keys.refresh().await;
    }
}

/// A PostgreSQL connection of its own that `LISTEN`s for changes (a pooled connection would lose them).
/// Dropping it closes the connection, which ends the task driving it.
struct Listener {
    _client: tokio_postgres::Client,
    changes: tokio::sync::mpsc::Receiver<()>,
}

impl Listener {
    async fn connect(url: &str, recheck: Duration) -> Option<Listener> {
        let (client, mut connection) = match tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
        {
            Ok(pair) => pair,
            Err(e) => {
                tracing::warn!(error = %e, "managed keys: cannot listen for changes; checking every {recheck:?}");
                return None;
            }
        };
        let (tx, changes) = tokio::sync::mpsc::channel(1);
        tokio::spawn(async move {
            let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
            while let Some(message) = messages.next().await {
                match message {
                    Ok(tokio_postgres::AsyncMessage::Notification(_)) => {
                        // A full channel already holds a wake-up: the reload it causes sees this change too.
                        let _ = tx.try_send(());
                    }
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
        });
        if let Err(e) = client.batch_execute(&format!("LISTEN {CHANNEL}")).await {
            tracing::warn!(error = %e, "managed keys: LISTEN failed; checking every {recheck:?}");
            return None;
        }
        Some(Listener {
            _client: client,
            changes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::record::secret_digest;

    fn key(name: &str, secret: &str, doc: KeyDoc, previous: Option<&str>) -> Row {
        Row {
            id: format!("id-{name}"),
            name: name.into(),
            digest: secret_digest(secret),
            previous_digest: previous.map(secret_digest),
            doc: serde_json::to_string(&doc).unwrap(),
        }
    }

    #[test]
    fn the_table_refuses_revoked_expired_rotated_and_other_routes() {
        let now = 1_000_000;
        let table = Table::build(Snapshot {
            version: 1,
            keys: vec![
                key("live", "s-live", KeyDoc::default(), None),
                key(
                    "gone",
                    "s-gone",
                    KeyDoc {
                        revoked_at: Some(1),
                        ..KeyDoc::default()
                    },
                    None,
                ),
                key(
                    "old",
                    "s-old",
                    KeyDoc {
                        expires_at: Some(now / 1000),
                        ..KeyDoc::default()
                    },
                    None,
                ),
                key(
                    "grace",
                    "s-new",
                    KeyDoc {
                        previous_valid_until: Some(now + 1),
                        routes: vec!["/v1/chat/*".into()],
                        models: vec!["gpt-*".into()],
                        ..KeyDoc::default()
                    },
                    Some("s-before"),
                ),
                key(
                    "over",
                    "s-over-new",
                    KeyDoc {
                        previous_valid_until: Some(now),
                        ..KeyDoc::default()
                    },
                    Some("s-over-old"),
                ),
            ],
            teams: vec![],
        });
        let auth = |secret: &str, path: &str| {
            table.authenticate(secret, path, now).map(|r| {
                r.map(|c| c.as_str().to_owned())
                    .map_err(|e| e.status.as_u16())
            })
        };
        let chat = "/v1/chat/completions";
        assert_eq!(auth("s-live", chat), Some(Ok("live".into())));
        assert_eq!(auth("s-unknown", chat), None);
        assert_eq!(auth("s-gone", chat), Some(Err(401)));
        assert_eq!(auth("s-old", chat), Some(Err(401)));
        assert_eq!(auth("s-before", chat), Some(Ok("grace".into())));
        assert_eq!(auth("s-new", chat), Some(Ok("grace".into())));
        assert_eq!(auth("s-new", "/v1/messages"), Some(Err(403)));
        assert_eq!(auth("s-over-old", chat), Some(Err(401)));
        assert_eq!(auth("s-over-new", chat), Some(Ok("over".into())));
        assert!(table.model_refusal("grace", "gpt-4o").is_none());
        assert_eq!(
            table
                .model_refusal("grace", "claude")
                .map(|e| e.status.as_u16()),
            Some(403)
        );
        assert!(table.model_refusal("file-key", "claude").is_none());
    }
}
