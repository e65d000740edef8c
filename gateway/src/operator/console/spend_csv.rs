//! The spend page's table as CSV (`GET /console/spend.csv`, same query): one line per caller × model with
//! the period, the counts, the tokens and the cost in dollars (exact: nine decimals), an attachment named
//! after the period. Fields are quoted the RFC 4180 way when they hold a comma, a quote or a line break, and a
//! text field a spreadsheet would run as a formula (`=`, `+`, `-`, `@`, tab, carriage return first) is
//! prefixed with `'`: model names come from upstream answers.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::{header, HeaderValue, StatusCode};
use tower_chat::Cost;
use tower_chat_persistence::SpendRow;

use super::extract::PageQuery;
use super::layout::error_page;
use super::spend::{records, rows, SpendParams};
use super::spend_range::{date, Period};
use super::state::ConsoleState;

/// The header line.
const HEADER: &str = "from,until,caller,model,calls,refused,errors,input_tokens,output_tokens,\
    cached_input_tokens,cost_usd,unpriced_calls";

/// `GET /console/spend.csv?range=…` or `?from=…&until=…`.
pub(crate) async fn csv(
    State(state): State<ConsoleState>,
    PageQuery(params): PageQuery<SpendParams>,
) -> Response {
    let (store, period) = match (records(&state), params.period()) {
        (Ok(store), Ok(period)) => (store, period),
        (Err(refused), _) | (_, Err(refused)) => return *refused,
    };
    match rows(store, period).await {
        Ok(rows) => attachment(period, &document(period, &rows)),
        Err(error) => {
            tracing::error!(%error, "console: cannot read the spend rollup");
            error_page(
                StatusCode::SERVICE_UNAVAILABLE,
                "The call records cannot be read right now.",
            )
        }
    }
}

fn attachment(period: Period, body: &str) -> Response {
    let mut response = (StatusCode::OK, body.to_owned()).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/csv; charset=utf-8"),
    );
    // The name is made of dates only: nothing to escape.
    let name = format!(
        "attachment; filename=\"spend-{}-to-{}.csv\"",
        date(period.from),
        date(period.last())
    );
    if let Ok(value) = HeaderValue::from_str(&name) {
        headers.insert(header::CONTENT_DISPOSITION, value);
    }
    response
}

/// The whole CSV document (CRLF line ends, as RFC 4180 has them).
pub(crate) fn document(period: Period, rows: &[SpendRow]) -> String {
    let (from, until) = (date(period.from), date(period.last()));
    let mut out = String::with_capacity(64 * (rows.len() + 1));
    out.push_str(HEADER);
    out.push_str("\r\n");
    for row in rows {
        let fields = [
            from.clone(),
            until.clone(),
            text(row.caller.as_ref().map_or("", |c| c.as_str())),
            text(row.model.as_deref().unwrap_or("")),
            row.calls.to_string(),
            row.refused_calls.to_string(),
            row.error_calls.to_string(),
            row.input_tokens.to_string(),
            row.output_tokens.to_string(),
            row.cached_input_tokens.to_string(),
            usd(row.cost),
            row.unpriced_calls.to_string(),
        ];
        out.push_str(&fields.join(","));
        out.push_str("\r\n");
    }
    out
}

/// A cost in dollars with every nano-dollar: `1.000018000`.
fn usd(cost: Cost) -> String {
    let nanos = cost.as_nanos();
    format!("{}.{:09}", nanos / 1_000_000_000, nanos % 1_000_000_000)
}

/// A text field: neutralised if a spreadsheet would read it as a formula, quoted if it needs to be.
fn text(value: &str) -> String {
    let value = if value.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        format!("'{value}")
    } else {
        value.to_owned()
    };
    if value.contains([',', '"', '\r', '\n']) {
        format!("\"{}\"", value.replace('"', "\"\""))
    } else {
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_quoted_and_formulas_neutralised() {
        assert_eq!(text("alice"), "alice");
        assert_eq!(text("a,b"), "\"a,b\"");
        assert_eq!(text("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(text("two\nlines"), "\"two\nlines\"");
        assert_eq!(text("=HYPERLINK(\"x\")"), "\"'=HYPERLINK(\"\"x\"\")\"");
        assert_eq!(text("-1"), "'-1");
        assert_eq!(usd(Cost::from_nanos(1_000_018_000)), "1.000018000");
        assert_eq!(usd(Cost::from_nanos(7)), "0.000000007");
    }
}
