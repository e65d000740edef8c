//! The session store on each backend: lookup, logout, expiry, the bound on sessions, sharing across stores.

use super::*;

fn with_cookie(id: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        http::header::COOKIE,
        format!("other=1; tc_console={id}").parse().unwrap(),
    );
    headers
}

async fn sqlite(dir: &tempfile::TempDir) -> SessionStore {
    let db = SqliteStore::open(dir.path().join("gateway.db"))
        .await
        .unwrap();
    SessionStore::sqlite(db).await.unwrap()
}

async fn found_removed_and_expired(store: SessionStore) {
    let id = store.create("carol", "fp-carol").await.unwrap();
    assert_eq!(id.len(), 64);
    let session = store.find(&with_cookie(&id)).await.unwrap().unwrap();
    assert_eq!(session.operator, "carol");
    assert_eq!(session.csrf.len(), 64);
    assert_ne!(session.csrf, id);
    assert_eq!(store.find(&with_cookie("00")).await.unwrap(), None);
    assert_eq!(store.find(&HeaderMap::new()).await.unwrap(), None);
    let forged = "0".repeat(64);
    assert_eq!(store.find(&with_cookie(&forged)).await.unwrap(), None);
    store.remove(&with_cookie(&id)).await.unwrap();
    assert_eq!(
        store.find(&with_cookie(&id)).await.unwrap(),
        None,
        "logged out"
    );

    let idle = store.create("carol", "fp-carol").await.unwrap();
    store
        .age(&idle, IDLE_TIMEOUT + Duration::from_secs(1))
        .await;
    let fresh = store.create("dave", "fp-dave").await.unwrap();
    assert_eq!(store.len().await, 1, "a login deletes expired sessions");
    assert_eq!(
        store.find(&with_cookie(&idle)).await.unwrap(),
        None,
        "idle too long"
    );
    // Kept alive by use, a session still ends MAX_AGE after login.
    store.age(&fresh, MAX_AGE - Duration::from_secs(30)).await;
    store.touch(digest(&fresh), now_ms()).await.unwrap();
    assert!(store.find(&with_cookie(&fresh)).await.unwrap().is_some());
    store.age(&fresh, Duration::from_secs(60)).await;
    store.touch(digest(&fresh), now_ms()).await.unwrap();
    assert_eq!(
        store.find(&with_cookie(&fresh)).await.unwrap(),
        None,
        "past the maximum age"
    );
}

#[tokio::test]
async fn in_memory_sessions_are_found_removed_and_expire() {
    found_removed_and_expired(SessionStore::default()).await;
}

#[tokio::test]
async fn sqlite_sessions_are_found_removed_and_expire() {
    let dir = tempfile::tempdir().unwrap();
    found_removed_and_expired(sqlite(&dir).await).await;
}

#[tokio::test]
async fn a_session_outlives_the_process_and_is_shared_by_a_second_store_on_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let first = sqlite(&dir).await;
    let id = first.create("carol", "fp-carol").await.unwrap();
    drop(first);
    let reopened = sqlite(&dir).await;
    let session = reopened.find(&with_cookie(&id)).await.unwrap().unwrap();
    assert_eq!(session.operator, "carol");
    let stored: String = match &reopened {
        SessionStore::Sqlite(db) => db
            .run("read", |conn| {
                conn.query_row(
                    "SELECT id_digest FROM tower_chat_console_sessions",
                    [],
                    |row| row.get(0),
                )
            })
            .await
            .unwrap(),
        _ => unreachable!(),
    };
    assert_ne!(stored, id, "the database holds the digest, not the cookie");
    reopened.remove(&with_cookie(&id)).await.unwrap();
    assert_eq!(
        sqlite(&dir).await.find(&with_cookie(&id)).await.unwrap(),
        None
    );
}

#[tokio::test]
async fn the_least_recently_seen_go_past_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    for store in [SessionStore::default(), sqlite(&dir).await] {
        least_recently_seen_go(store).await;
    }
}

async fn least_recently_seen_go(store: SessionStore) {
    let first = store.create("carol", "fp-carol").await.unwrap();
    store.age(&first, Duration::from_secs(10)).await;
    store
        .fill(MAX_SESSIONS - 1, now_ms() - millis(Duration::from_secs(5)))
        .await;
    assert_eq!(store.len().await, MAX_SESSIONS);
    let newest = store.create("carol", "fp-carol").await.unwrap();
    assert_eq!(store.len().await, MAX_SESSIONS);
    assert_eq!(
        store.find(&with_cookie(&first)).await.unwrap(),
        None,
        "the least recently seen"
    );
    assert!(store.find(&with_cookie(&newest)).await.unwrap().is_some());
}

#[tokio::test]
async fn postgresql_sessions_are_shared_and_logout_ends_them_everywhere() {
    let Some(url) = tower_chat_testkit::database_url() else {
        return;
    };
    let a = SessionStore::postgres(PostgresStore::connect(url.clone()).await.unwrap())
        .await
        .unwrap();
    let b = SessionStore::postgres(PostgresStore::connect(url).await.unwrap())
        .await
        .unwrap();
    let id = a.create("carol", "fp-carol").await.unwrap();
    assert_eq!(
        b.find(&with_cookie(&id)).await.unwrap().unwrap().operator,
        "carol"
    );
    b.remove(&with_cookie(&id)).await.unwrap();
    assert_eq!(a.find(&with_cookie(&id)).await.unwrap(), None);
}

impl SessionStore {
    /// How many sessions are stored (expired ones included until the next login clears them).
    async fn len(&self) -> usize {
        match self {
            SessionStore::Memory(map) => lock(map).len(),
            SessionStore::Sqlite(db) => db
                .run("count", |conn| {
                    conn.query_row(
                        "SELECT COUNT(*) FROM tower_chat_console_sessions",
                        [],
                        |r| r.get::<_, i64>(0),
                    )
                })
                .await
                .unwrap() as usize,
            SessionStore::Postgres(_) => {
                unreachable!("only counted in the SQLite and memory tests")
            }
        }
    }

    /// Store `n` sessions last seen at `seen_ms`, in one go (tests of the bound without `n` logins).
    async fn fill(&self, n: usize, seen_ms: i64) {
        let rows: Vec<(String, Row)> = (0..n)
            .map(|_| {
                let row = Row {
                    operator: "filler".into(),
                    key_fingerprint: String::new(),
                    csrf: random_token(),
                    created_ms: seen_ms,
                    last_seen_ms: seen_ms,
                };
                (digest(&random_token()), row)
            })
            .collect();
        match self {
            SessionStore::Memory(map) => lock(map).extend(rows),
            SessionStore::Sqlite(db) => db
                .run("fill", move |conn| {
                    let tx = conn.transaction()?;
                    for (key, row) in rows {
                        tx.execute(
                            "INSERT INTO tower_chat_console_sessions VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                            params![
                                key,
                                row.operator,
                                row.csrf,
                                row.created_ms,
                                row.last_seen_ms,
                                row.key_fingerprint
                            ],
                        )?;
                    }
                    tx.commit()
                })
                .await
                .unwrap(),
            SessionStore::Postgres(_) => unreachable!("only filled in the SQLite and memory tests"),
        }
    }

    /// Age the session `id` by `by` (tests of expiry without waiting).
    async fn age(&self, id: &str, by: Duration) {
        let (key, by) = (digest(id), millis(by));
        match self {
            SessionStore::Memory(map) => {
                let mut map = lock(map);
                let row = map.get_mut(&key).unwrap();
                row.created_ms -= by;
                row.last_seen_ms -= by;
            }
            SessionStore::Sqlite(db) => {
                db.run("age", move |conn| {
                    conn.execute(
                        "UPDATE tower_chat_console_sessions \
                         SET created_ms = created_ms - ?1, last_seen_ms = last_seen_ms - ?1 WHERE id_digest = ?2",
                        params![by, key],
                    )
                })
                .await
                .unwrap();
            }
            SessionStore::Postgres(_) => unreachable!("not aged in tests"),
        }
    }
}

#[tokio::test]
async fn sessions_of_keys_no_longer_configured_end() {
    let dir = tempfile::tempdir().unwrap();
    for store in [SessionStore::default(), sqlite(&dir).await] {
        let carol = store.create("carol", "fp-carol").await.unwrap();
        let dave = store.create("dave", "fp-dave").await.unwrap();
        let found = store.find(&with_cookie(&carol)).await.unwrap().unwrap();
        assert_eq!(found.key_fingerprint, "fp-carol");
        assert_eq!(store.end_unbound(vec!["fp-dave".into()]).await.unwrap(), 1);
        assert_eq!(store.find(&with_cookie(&carol)).await.unwrap(), None);
        assert!(store.find(&with_cookie(&dave)).await.unwrap().is_some());
        assert_eq!(store.end_unbound(Vec::new()).await.unwrap(), 1, "no keys");
    }
}
