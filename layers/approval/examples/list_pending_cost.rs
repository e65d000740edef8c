//! What one page of `list_pending` costs on SQLite, for instruction counts under callgrind (BENCHMARKS.md,
//! "Approvals"): seeds `EXPIRED` expired and `PENDING` unexpired approvals in a fresh file, then lists the first
//! page of 201 `LISTS` times — through `SqliteApprovalStore::list_pending` (`MODE=store`), or as the same
//! SELECT run straight on the connection without decoding (`MODE=raw`, the raw client). Run once with
//! `LISTS=0` and subtract to get the listings' own cost.
//!
//! ```sh
//! cargo build --release -p tower-chat-approval --features sqlite --example list_pending_cost
//! EXPIRED=100000 PENDING=300 LISTS=100 MODE=store valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!   target/release/examples/list_pending_cost
//! ```

use std::time::SystemTime;

use serde_json::json;
use tower_chat::ToolCall;
use tower_chat_approval::{ApprovalStore, PendingApproval, SqliteApprovalStore};
use tower_chat_persistence::store::sqlite::rusqlite::params;
use tower_chat_persistence::SqliteStore;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (expired, pending, lists) = (env("EXPIRED", 1000), env("PENDING", 300), env("LISTS", 100));
    let raw = std::env::var("MODE").as_deref() == Ok("raw");
    let dir = tempfile::tempdir()?;
    let db = SqliteStore::open(dir.path().join("list.db")).await?;
    let store = SqliteApprovalStore::new(db.clone()).await?;
    let now = SystemTime::now();
    let call = serde_json::to_string(&ToolCall::new(
        "call-1",
        "write_file",
        json!({"path": "out/a.txt", "content": "hello"}),
    ))?;
    let micros = |t: SystemTime| {
        t.duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_micros() as i64
    };
    let (now_us, hour) = (micros(now), 3_600_000_000i64);
    // One transaction of plain INSERTs: seeding is not what is measured.
    db.run("seed", move |conn| {
        let tx = conn.transaction()?;
        {
            let mut insert = tx.prepare(
                "INSERT INTO chat_pending_approvals (approval_id, conversation_id, caller, call, reason, \
                 created_at, expires_at) VALUES (?1, 'conv', 'alice', ?2, 'writes a file', ?3, ?4)",
            )?;
            for i in 0..expired + pending {
                let expires = if i < expired {
                    now_us - hour + i as i64
                } else {
                    now_us + hour + i as i64
                };
                insert.execute(params![format!("apr_{i:08}"), call, expires - 2 * hour, expires])?;
            }
        }
        tx.commit()
    })
    .await?;
    let mut listed = 0;
    for _ in 0..lists {
        listed += if raw {
            let now_us = micros(SystemTime::now());
            db.run("raw page", move |conn| {
                let mut select = conn.prepare_cached(
                    "SELECT approval_id, conversation_id, caller, call, reason, created_at, expires_at, \
                     decided_approved, decided_reason, decided_by, decided_at FROM chat_pending_approvals \
                     WHERE expires_at > ?1 AND (expires_at, approval_id) > (?2, ?3) \
                     ORDER BY expires_at, approval_id LIMIT ?4",
                )?;
                let rows = select.query_map(params![now_us, i64::MIN, "", 201], |row| {
                    row.get::<_, String>(0)?;
                    row.get::<_, String>(3)
                })?;
                rows.count_ok()
            })
            .await?
        } else {
            let page: Vec<PendingApproval> =
                store.list_pending(SystemTime::now(), None, 201).await?;
            page.len()
        };
    }
    println!("listed {listed} approvals in {lists} pages");
    Ok(())
}

/// Counting rows while surfacing the first error.
trait CountOk {
    fn count_ok(self) -> tower_chat_persistence::store::sqlite::rusqlite::Result<usize>;
}

impl<I: Iterator<Item = tower_chat_persistence::store::sqlite::rusqlite::Result<String>>> CountOk
    for I
{
    fn count_ok(self) -> tower_chat_persistence::store::sqlite::rusqlite::Result<usize> {
        let mut n = 0;
        for row in self {
            row?;
            n += 1;
        }
        Ok(n)
    }
}
