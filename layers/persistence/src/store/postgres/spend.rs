//! The PostgreSQL side of the spend rollup: its query.

use futures_util::future::BoxFuture;

use super::{pg_error, PostgresStore};
use crate::spend::{SpendRollupQuery, SpendRow};
use crate::store::rollup::{query_sql, row_from};
use crate::store::StoreError;

impl PostgresStore {
    pub(super) fn spend_rollup_rows<'a>(
        &'a self,
        query: &'a SpendRollupQuery,
    ) -> BoxFuture<'a, Result<Vec<SpendRow>, StoreError>> {
        Box::pin(async move {
            let failed = || pg_error("cannot sum the spend rollup");
            let client = self.client().await?;
            let statement = client
                .prepare_cached(&query_sql(["$1", "$2", "$3", "$4", "$5", "$6", "$7", "$8"]))
                .await
                .map_err(failed())?;
            let rows = client
                .query(
                    &statement,
                    &[
                        &query.from.days_since_epoch(),
                        &query.until.days_since_epoch(),
                        &query.caller.as_ref().map(|c| c.as_str()),
                        &query.by_day,
                        &query.by_caller,
                        &query.by_team,
                        &query.by_model,
                        &query.team.as_deref(),
                    ],
                )
                .await
                .map_err(failed())?;
            rows.iter()
                .map(|row| {
                    let mut sums = [0i64; 8];
                    for (i, sum) in sums.iter_mut().enumerate() {
                        *sum = row.try_get(4 + i)?;
                    }
                    Ok(row_from(
                        row.try_get(0)?,
                        [row.try_get(1)?, row.try_get(2)?, row.try_get(3)?],
                        sums,
                    ))
                })
                .collect::<Result<Vec<_>, tokio_postgres::Error>>()
                .map_err(failed())
        })
    }
}
