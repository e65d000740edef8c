//! Usage aggregates: the recorded calls of a period summed in the database, per time bucket, per model and per
//! caller, with latency percentiles ([`crate::Store::usage`]). What a usage dashboard draws, without reading
//! every call.

use std::time::{Duration, SystemTime};

use tower_chat::{CallerIdentity, Cost};

/// Which calls [`crate::Store::usage`] sums and how it groups them: the final calls (not in flight) started in
/// `[since, until)`, per `bucket` of time from `since` when set, per model and/or per caller when asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsageQuery {
    /// Calls started at or after this instant.
    pub since: SystemTime,
    /// Calls started before this instant.
    pub until: SystemTime,
    /// Group by time: bucket `n` holds the calls started in `[since + n·bucket, since + (n+1)·bucket)`.
    pub bucket: Option<Duration>,
    /// Group by model.
    pub by_model: bool,
    /// Group by caller.
    pub by_caller: bool,
    /// Only this caller's calls.
    pub caller: Option<CallerIdentity>,
}

impl UsageQuery {
    /// Every final call started in `[since, until)`, as one group.
    pub fn between(since: SystemTime, until: SystemTime) -> Self {
        UsageQuery {
            since,
            until,
            bucket: None,
            by_model: false,
            by_caller: false,
            caller: None,
        }
    }

    /// One group per `bucket` of time from `since`.
    pub fn per_bucket(mut self, bucket: Duration) -> Self {
        self.bucket = Some(bucket);
        self
    }

    /// One group per model.
    pub fn by_model(mut self) -> Self {
        self.by_model = true;
        self
    }

    /// One group per caller.
    pub fn by_caller(mut self) -> Self {
        self.by_caller = true;
        self
    }

    /// Only `caller`'s calls.
    pub fn caller(mut self, caller: impl Into<CallerIdentity>) -> Self {
        self.caller = Some(caller.into());
        self
    }

    /// The bucket in microseconds, refused when it is shorter than one (the database would divide by zero).
    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    pub(crate) fn bucket_micros(&self) -> Result<Option<i64>, crate::StoreError> {
        match self.bucket {
            None => Ok(None),
            Some(bucket) => match i64::try_from(bucket.as_micros()) {
                Ok(micros) if micros > 0 => Ok(Some(micros)),
                _ => Err(crate::StoreError::new(format!(
                    "a usage bucket must be between 1 µs and {} years long, not {bucket:?}",
                    i64::MAX / 31_557_600_000_000
                ))),
            },
        }
    }
}

/// Latency percentiles of a group's calls (nearest rank: the p-th percentile is the smallest latency that at
/// least p % of the calls are at or under).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LatencyPercentiles {
    /// Median.
    pub p50: Duration,
    /// 90th percentile.
    pub p90: Duration,
    /// 99th percentile.
    pub p99: Duration,
}

/// The calls of one group of a [`UsageQuery`]: a time bucket, a model and a caller (each only when the query
/// groups by it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsageAggregate {
    /// The time bucket's index from [`UsageQuery::since`]; `None` when the query is not per bucket.
    pub bucket: Option<u64>,
    /// The model; `None` when the query is not by model, or for calls that name none.
    pub model: Option<String>,
    /// The caller; `None` when the query is not by caller, or for calls without one.
    pub caller: Option<CallerIdentity>,
    /// Calls.
    pub calls: u64,
    /// Calls that went wrong: they failed, or their upstream broke off (`failed`, `interrupted`). Calls a layer
    /// refused before sending them are counted apart ([`UsageAggregate::refused_calls`]).
    pub failed_calls: u64,
    /// Calls a layer refused before they reached any provider (a limit, a content policy): `failed` records
    /// without their request ([`crate::RecordedRequest::omitted`]); not counted in `failed_calls`.
    pub refused_calls: u64,
    /// Answers a content policy cut short (`blocked`): not counted as errors.
    pub blocked_calls: u64,
    /// Calls the client stopped (`cancelled`): not counted as errors.
    pub cancelled_calls: u64,
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// The recorded cost of the priced calls.
    pub cost: Cost,
    /// Calls without a recorded cost (no price for their model).
    pub unpriced_calls: u64,
    /// Calls a response cache answered ([`crate::CallRecord::from_response_cache`]).
    pub cached_calls: u64,
    /// The input tokens of those calls (what the replay saved).
    pub cached_input_tokens: u64,
    /// The output tokens of those calls.
    pub cached_output_tokens: u64,
    /// Latency (start to end) percentiles.
    pub latency: LatencyPercentiles,
    /// The median time to the first content event, over the calls that had one.
    pub time_to_first_token_p50: Option<Duration>,
}

impl UsageAggregate {
    /// The share of calls that went wrong, from 0 to 1.
    pub fn error_rate(&self) -> f64 {
        if self.calls == 0 {
            0.0
        } else {
            self.failed_calls as f64 / self.calls as f64
        }
    }
}

/// The aggregate of [`crate::Store::usage`] over `chat_calls` with the dialect's placeholders for since, until,
/// bucket (microseconds, NULL: no buckets), caller filter, by model and by caller (booleans), and its expression
/// for whether the response cache answered a call. Percentiles are nearest rank, counted with window
/// functions (SQLite has no percentile aggregate): rank ⌈p·n/100⌉ is `(p·n + 99) / 100` in integers.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn usage_sql(p: [&str; 6], from_response_cache: &str) -> String {
    let [since, until, bucket, caller, by_model, by_caller] = p;
    let percentile = |column: &str, rank: &str, n: &str, p: u32| {
        format!("MIN(CASE WHEN {column} IS NOT NULL AND {rank} >= ({p} * {n} + 99) / 100 THEN {column} END)")
    };
    let groups = "PARTITION BY bucket_index, group_model, group_caller";
    format!(
        "WITH grouped AS (SELECT \
           CASE WHEN CAST({bucket} AS BIGINT) IS NULL THEN NULL \
                ELSE (started_at - {since}) / CAST({bucket} AS BIGINT) END AS bucket_index, \
           CASE WHEN {by_model} THEN model END AS group_model, \
           CASE WHEN {by_caller} THEN caller END AS group_caller, \
           ended_at - started_at AS latency, first_token_at - started_at AS ttft, \
           CASE WHEN status = 'failed' AND omitted_messages IS NOT NULL THEN 1 ELSE 0 END AS refused, \
           CASE WHEN status IN ('failed', 'interrupted') AND omitted_messages IS NULL THEN 1 ELSE 0 END \
             AS went_wrong, \
           CASE WHEN status = 'blocked' THEN 1 ELSE 0 END AS blocked, \
           CASE WHEN status = 'cancelled' THEN 1 ELSE 0 END AS stopped, \
           CASE WHEN {from_response_cache} THEN 1 ELSE 0 END AS replayed, \
           input_tokens, output_tokens, cost_nanos \
         FROM chat_calls WHERE status <> 'in_flight' AND started_at >= {since} AND started_at < {until} \
           AND (CAST({caller} AS TEXT) IS NULL OR caller = {caller})), \
         ranked AS (SELECT grouped.*, \
           ROW_NUMBER() OVER ({groups} ORDER BY latency) AS latency_rank, \
           COUNT(*) OVER ({groups}) AS latency_n, \
           ROW_NUMBER() OVER ({groups}, ttft IS NULL ORDER BY ttft) AS ttft_rank, \
           COUNT(ttft) OVER ({groups}) AS ttft_n \
         FROM grouped) \
         SELECT bucket_index, group_model, group_caller, COUNT(*), \
           CAST(SUM(went_wrong) AS BIGINT), CAST(SUM(stopped) AS BIGINT), \
           CAST(SUM(input_tokens) AS BIGINT), CAST(SUM(output_tokens) AS BIGINT), \
           CAST(COALESCE(SUM(cost_nanos), 0) AS BIGINT), COUNT(*) - COUNT(cost_nanos), \
           CAST(SUM(replayed) AS BIGINT), \
           CAST(SUM(refused) AS BIGINT), CAST(SUM(blocked) AS BIGINT), \
           CAST(SUM(CASE WHEN replayed = 1 THEN input_tokens ELSE 0 END) AS BIGINT), \
           CAST(SUM(CASE WHEN replayed = 1 THEN output_tokens ELSE 0 END) AS BIGINT), \
           {}, {}, {}, {} \
         FROM ranked GROUP BY bucket_index, group_model, group_caller \
         ORDER BY bucket_index, group_model, group_caller",
        percentile("latency", "latency_rank", "latency_n", 50),
        percentile("latency", "latency_rank", "latency_n", 90),
        percentile("latency", "latency_rank", "latency_n", 99),
        percentile("ttft", "ttft_rank", "ttft_n", 50),
    )
}

/// One row of [`usage_sql`]: the group's keys, then its twelve sums, then four percentiles (microseconds).
/// How many sums a row of [`usage_sql`] has, after the three group keys; the percentiles follow them.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) const USAGE_SUMS: usize = 12;

#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) struct UsageRow {
    pub(crate) bucket: Option<i64>,
    pub(crate) model: Option<String>,
    pub(crate) caller: Option<String>,
    pub(crate) sums: [i64; USAGE_SUMS],
    pub(crate) percentiles: [Option<i64>; 4],
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
impl UsageRow {
    pub(crate) fn into_aggregate(self) -> UsageAggregate {
        let count = |v: i64| u64::try_from(v).unwrap_or(0);
        let micros = |v: Option<i64>| Duration::from_micros(v.map_or(0, count));
        let [calls, failed, cancelled, input, output, cost, unpriced, cached, refused, blocked, cached_input, cached_output] =
            self.sums;
        let [p50, p90, p99, ttft] = self.percentiles;
        UsageAggregate {
            bucket: self.bucket.map(count),
            model: self.model,
            caller: self.caller.map(CallerIdentity::new),
            calls: count(calls),
            failed_calls: count(failed),
            refused_calls: count(refused),
            blocked_calls: count(blocked),
            cancelled_calls: count(cancelled),
            input_tokens: count(input),
            output_tokens: count(output),
            cost: Cost::from_nanos(count(cost)),
            unpriced_calls: count(unpriced),
            cached_calls: count(cached),
            cached_input_tokens: count(cached_input),
            cached_output_tokens: count(cached_output),
            latency: LatencyPercentiles {
                p50: micros(p50),
                p90: micros(p90),
                p99: micros(p99),
            },
            time_to_first_token_p50: ttft.map(|t| Duration::from_micros(count(t))),
        }
    }
}
