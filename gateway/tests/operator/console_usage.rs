//! The console's usage page over plain HTTP, on calls seeded into the gateway's records (`common::usage`):
//! every chart and both breakdown tables carry the seeded numbers, the latency axis turns logarithmic for the
//! outlier, time ticks fall on round times. The same page in Chromium at desktop and phone widths is checked
//! in `console_pages.rs`.

use crate::common;

use common::{console_login, send, usage, Harness};
use serde_json::json;
use tower_chat::test_server::Reply;

const OPS_KEY: &str = "sk-ops-carol-0123456789";

/// The usage page over seeded calls (errors, a latency outlier, two models and callers): every chart, the
/// breakdown per model and per caller with their numbers, the latency axis logarithmic for the outlier, and
/// time ticks on round times; "model calls", never "requests".
#[tokio::test]
async fn the_usage_page_charts_and_breaks_down_calls_errors_cost_and_an_outlier() {
    let dir = tempfile::tempdir().unwrap();
    let operators = dir.path().join("operators");
    std::fs::write(&operators, format!("carol:{OPS_KEY}\n")).unwrap();
    let gw = Harness::start(
        |_, _| Reply::openai_text("ok"),
        move |c| c.operator_keys_file = Some(operators),
    )
    .await;
    let body = json!({"model": "test-model", "messages": [{"role": "user", "content": "hi"}]});
    let answer = gw.chat(&body).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    usage::seed(&gw).await;
    let cookie = console_login(&gw, OPS_KEY).await;
    let page = send(
        "GET",
        &gw.url("/console/usage?range=1h&by=model"),
        &[("cookie", &cookie)],
        "",
    )
    .await;
    assert_eq!(page.status, 200, "{}", page.body);
    let html = page.body;
    // The gateway's own call and the thirteen seeded ones.
    assert!(html.contains("14 model calls from"), "{html}");
    for chart in ["calls", "errors", "error-rate", "tokens", "cost", "latency"] {
        assert!(
            html.contains(&format!(
                "<figure class=\"chart\" id=\"{chart}\" data-scale=\""
            )),
            "no {chart} chart"
        );
    }
    for title in [
        "Model calls by model",
        "Model calls and errors (failed or interrupted)",
        "Error rate (errors ÷ model calls)",
        "Tokens (input + output) by model",
        "Cost by model",
        "Latency percentiles (p50, p90, p99)",
    ] {
        assert!(html.contains(title), "`{title}` missing");
    }
    assert!(
        !html.to_lowercase().contains("request"),
        "counts are model calls: {html}"
    );
    let row = |table: &str, name: &str, label: &str, cells: &[(&str, &str)]| {
        let at = html.find(&format!("id=\"{table}\"")).expect(table);
        let start = at
            + html[at..]
                .find(&format!("data-label=\"{label}\">{name}</th>"))
                .unwrap_or_else(|| panic!("{name} in {table}"));
        let end = start + html[start..].find("</tr>").unwrap();
        let row = &html[start..end];
        for (heading, value) in cells {
            assert!(
                row.contains(&format!("data-label=\"{heading}\">{value}</td>")),
                "{table} {name}: {heading} is not {value}: {row}"
            );
        }
    };
    row(
        "usage-by-model",
        "model-a",
        "model",
        &[
            ("model calls", "11"),
            ("errors", "0"),
            ("error rate", "0.0 %"),
            ("input tokens", "110"),
            ("output tokens", "44"),
            ("cost", "$0.000011"),
            ("p50", "150 ms"),
            ("p90", "190 ms"),
            ("p99", "60.00 s"),
            ("p50 first token", "75 ms"),
        ],
    );
    row(
        "usage-by-model",
        "model-b",
        "model",
        &[
            ("model calls", "2"),
            ("errors", "2"),
            ("error rate", "100.0 %"),
            ("cost", "—"),
            ("p50", "400 ms"),
            ("p90", "500 ms"),
        ],
    );
    row(
        "usage-by-caller",
        "bob",
        "caller",
        &[
            ("model calls", "2"),
            ("errors", "2"),
            ("error rate", "100.0 %"),
        ],
    );
    row(
        "usage-by-caller",
        "alice",
        "caller",
        &[("model calls", "11"), ("errors", "0")],
    );
    row(
        "usage-by-model",
        "all",
        "model",
        &[
            ("model calls", "14"),
            ("errors", "2"),
            ("error rate", "14.3 %"),
        ],
    );

    // Latency: the typical p90 of all calls is 500 ms and the slowest p99 60 s, so the axis is logarithmic,
    // in decades from 100 ms to 100 s, and nothing is clipped.
    let latency = &html[html.find("id=\"latency\"").unwrap()..];
    let latency = &latency[..latency.find("</figure>").unwrap()];
    assert!(latency.contains("data-scale=\"log\""), "{latency}");
    assert!(
        latency.contains("(logarithmic scale)</figcaption>"),
        "{latency}"
    );
    assert!(
        latency.contains("the largest value (60 s) is more than 10 × the typical p90 (500 ms)"),
        "{latency}"
    );
    // The floor is the decade under the fastest bucket's p50 (the gateway's own call: a few milliseconds).
    let y_labels: Vec<&str> = latency
        .split("class=\"axis y-label\"")
        .skip(1)
        .map(|rest| {
            let text = &rest[rest.find('>').unwrap() + 1..];
            &text[..text.find('<').unwrap()]
        })
        .collect();
    assert!(
        y_labels.ends_with(&["100 ms", "1 s", "10 s", "100 s"]),
        "{y_labels:?}"
    );
    assert!(
        y_labels
            .iter()
            .all(|l| ["1 ", "10 ", "100 ", "0.1 ", "0.01 "]
                .iter()
                .any(|d| l.starts_with(d))),
        "decades only: {y_labels:?}"
    );
    assert!(!latency.contains("clip"), "{latency}");
    assert!(latency.contains("class=\"band b0\"") && latency.contains("class=\"band b1\""));
    // Errors and their rate per minute, and the cost, in the charts' tables.
    let rate = &html[html.find("id=\"error-rate\"").unwrap()..];
    assert!(rate[..rate.find("</figure>").unwrap()].contains(">100 %</td>"));
    let cost = &html[html.find("id=\"cost\"").unwrap()..];
    assert!(cost[..cost.find("</figure>").unwrap()].contains(">$0.000011</td>"));
    // Time ticks: the hour's on round ten minutes (a phone's on quarters), midnight as its date.
    for tick in tick_labels(&html) {
        if let Some((_, minutes)) = tick.split_once(':') {
            let minutes: u32 = minutes.parse().unwrap();
            assert!(minutes.is_multiple_of(5), "{tick} is not a round time");
        }
    }
    // A day: every three hours (six on a phone); a week: one date a day.
    for (range, round) in [("24h", 3), ("7d", 24)] {
        let page = send(
            "GET",
            &gw.url(&format!("/console/usage?range={range}&by=caller")),
            &[("cookie", &cookie)],
            "",
        )
        .await;
        assert_eq!(page.status, 200, "{}", page.body);
        assert!(page.body.contains("14 model calls from"), "{range}");
        let ticks = tick_labels(&page.body);
        assert!(ticks.len() >= 6, "{range}: {ticks:?}");
        for tick in &ticks {
            match tick.split_once(':') {
                Some((hours, minutes)) => {
                    assert_eq!(minutes, "00", "{range}: {tick}");
                    assert!(
                        hours.parse::<u32>().unwrap().is_multiple_of(round),
                        "{range}: {tick}"
                    );
                }
                None => assert!(tick.split_once(' ').is_some(), "{range}: {tick} is a date"),
            }
        }
    }
}

/// The time labels of every chart on a page.
fn tick_labels(html: &str) -> Vec<String> {
    html.match_indices("class=\"axis tick")
        .map(|(at, _)| {
            let label = &html[at..];
            let label = &label[label.find('>').unwrap() + 1..];
            label[..label.find('<').unwrap()].to_owned()
        })
        .collect()
}
