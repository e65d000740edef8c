//! The SQLite side of the spend rollup: its query.

use futures_util::future::BoxFuture;
use rusqlite::params;

use super::SqliteStore;
use crate::spend::{SpendRollupQuery, SpendRow};
use crate::store::rollup::{query_sql, row_from};
use crate::store::StoreError;

impl SqliteStore {
    pub(super) fn spend_rollup_rows<'a>(
        &'a self,
        query: &'a SpendRollupQuery,
    ) -> BoxFuture<'a, Result<Vec<SpendRow>, StoreError>> {
        let q = query.clone();
        Box::pin(async move {
            self.read_on_thread("cannot sum the spend rollup", move |conn| {
                let mut statement = conn
                    .prepare_cached(&query_sql(["?1", "?2", "?3", "?4", "?5", "?6", "?7", "?8"]))?;
                let rows = statement.query_map(
                    params![
                        q.from.days_since_epoch(),
                        q.until.days_since_epoch(),
                        q.caller.as_ref().map(|c| c.as_str()),
                        q.by_day,
                        q.by_caller,
                        q.by_team,
                        q.by_model,
                        q.team.as_deref(),
                    ],
                    |row| {
                        let mut sums = [0i64; 8];
                        for (i, sum) in sums.iter_mut().enumerate() {
                            *sum = row.get(4 + i)?;
                        }
                        Ok(row_from(
                            row.get(0)?,
                            [row.get(1)?, row.get(2)?, row.get(3)?],
                            sums,
                        ))
                    },
                )?;
                rows.collect::<rusqlite::Result<Vec<_>>>()
            })
            .await
        })
    }
}
