//! The console's spend page and its CSV, on SQLite and on PostgreSQL: cost and tokens per caller × model for
//! presets and dates (calls seeded on days around today), totals, each key's budget and how much of it the
//! limits layer counts as used, the CSV of the same table (quoting, a formula-looking model name neutralised,
//! `Content-Disposition`), a malformed date refused by name. Then the page in Chromium at 1,400 and 400 px: no
//! sideways scrolling, no serious axe-core violation, a preset and the date form lead to the periods they
//! name. PostgreSQL runs share one database: every caller name here is unique to the run, and only those rows
//! are looked at.

use crate::common;

use std::time::{Duration, SystemTime};

use common::webdriver::{axe_core, Driver};
use common::{console_login, post, send, Harness};
use serde_json::json;
use tower_chat::test_server::{RecordedRequest, Reply};
use tower_chat::{CallerIdentity, Cost};
use tower_chat_gateway::config_file::ConfigFile;
use tower_chat_persistence::{CallId, CallOutcome, PostgresStore, Store, UtcDay};

const OPS_KEY: &str = "sk-ops-carol-0123456789";

/// 600,000 input and 3 output tokens at $1 per million each: $0.600003 a call.
fn expensive(_request: &RecordedRequest, _index: usize) -> Reply {
    Reply::openai_stream(&[
        json!({"id": "chatcmpl-1", "model": "test-model", "choices": [{"index": 0, "delta": {"role": "assistant", "content": "ok"}}]}),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        json!({"choices": [], "usage": {"prompt_tokens": 600000, "completion_tokens": 3, "total_tokens": 600003}}),
    ])
}

struct Run {
    gw: Harness,
    store: std::sync::Arc<dyn Store>,
    alice: String,
    odd: String,
    today: UtcDay,
    _dir: tempfile::TempDir,
}

/// A gateway whose caller `alice-<run>` has a $0.50 daily and a $20 monthly budget and made one $0.600003 call;
/// then calls written straight into its records: alice's `model-a` today (3) and 8 days ago (2), and a caller
/// whose name needs quoting in CSV calling a model named like a formula, yesterday.
async fn start(database_url: Option<String>) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let run = uuid::Uuid::new_v4().simple().to_string();
    let alice = format!("alice-{}", &run[..12]);
    std::fs::write(dir.path().join("clients"), format!("{alice}:sk-{run}\n")).unwrap();
    std::fs::write(dir.path().join("operators"), format!("carol:{OPS_KEY}\n")).unwrap();
    let limits = format!(
        "[limits.keys.\"{alice}\"]\ncost_per_day_usd = 0.5\ncost_per_month_usd = 20.0\n\n\
         [limits.prices.\"test-model\"]\ninput = 1.0\noutput = 1.0\n"
    );
    let file = ConfigFile::parse(&limits, "gateway.toml").unwrap();
    let (clients, operators) = (dir.path().join("clients"), dir.path().join("operators"));
    let url = database_url.clone();
    let gw = Harness::start(expensive, move |c| {
        c.file = file;
        c.api_keys_file = Some(clients);
        c.operator_keys_file = Some(operators);
        c.database_url = url;
    })
    .await;
    let body = json!({"model": "test-model", "max_tokens": 10,
        "messages": [{"role": "user", "content": "the report"}]});
    let answer = post(
        &gw.url("/v1/chat/completions"),
        body.to_string(),
        &[("authorization", &format!("Bearer sk-{run}"))],
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let store: std::sync::Arc<dyn Store> = match &database_url {
        Some(url) => std::sync::Arc::new(PostgresStore::connect(url.clone()).await.unwrap()),
        None => std::sync::Arc::new(gw.records().await),
    };
    let now = SystemTime::now();
    let today = UtcDay::of(now);
    let mine = store
        .call_summaries(&tower_chat_persistence::CallQuery {
            caller: Some(CallerIdentity::new(alice.as_str())),
            ..tower_chat_persistence::CallQuery::between(
                now - Duration::from_secs(600),
                now + Duration::from_secs(60),
            )
        })
        .await
        .unwrap();
    assert_eq!(mine.len(), 1, "{mine:?}");
    let template = store.call(&mine[0].call_id).await.unwrap().unwrap();
    let odd = format!("o'brien, \"ops\" {}", &run[..12]);
    let mut records = Vec::new();
    for (caller, model, day, n) in [
        (alice.as_str(), "model-a", today, 3),
        (alice.as_str(), "model-a", today.plus(-8), 2),
        (odd.as_str(), "=cmd()", today.plus(-1), 1),
    ] {
        for _ in 0..n {
            let mut r = template.clone();
            r.call_id = CallId::generate();
            r.caller = Some(CallerIdentity::new(caller));
            r.model = Some(model.to_owned());
            r.started_at = day.start() + Duration::from_secs(3600);
            r.ended_at = r.started_at + Duration::from_millis(200);
            r.first_token_at = None;
            r.outcome = CallOutcome::Completed;
            r.response.usage.input_tokens = 100;
            r.response.usage.output_tokens = 10;
            r.response.usage.cached_input_tokens = Some(40);
            r.cost = Some(Cost::from_nanos(2_000));
            records.push(r);
        }
    }
    store.write_calls(&records).await.unwrap();
    Run {
        gw,
        store,
        alice,
        odd,
        today,
        _dir: dir,
    }
}

fn date(day: UtcDay) -> String {
    let secs = day
        .start()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    // Howard Hinnant's civil_from_days, computed here apart from the console's own.
    let days = (secs / 86_400) as i64 + 719_468;
    let era = days.div_euclid(146_097);
    let doe = days.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    format!("{:04}-{m:02}-{d:02}", yoe + era * 400 + i64::from(m <= 2))
}

/// The `<tr>` of the spend table whose caller and model cells are `caller` and `model`, or `None`.
fn row<'a>(html: &'a str, caller: &str, model: &str) -> Option<&'a str> {
    let caller = caller.replace('"', "&quot;");
    let table = &html[html.find("id=\"spend\"")?..];
    let table = &table[..table.find("</table>")?];
    table.split("<tr").find(|tr| {
        tr.contains(&format!("data-label=\"caller\">{caller}</th>"))
            && tr.contains(&format!("data-label=\"model\">{model}</td>"))
    })
}

fn cell(row: &str, label: &str) -> String {
    let marker = format!("data-label=\"{label}\">");
    let at = row
        .find(&marker)
        .unwrap_or_else(|| panic!("no {label} in {row}"))
        + marker.len();
    row[at..at + row[at..].find('<').unwrap()].to_owned()
}

async fn page_and_csv_on(database_url: Option<String>) {
    let run = start(database_url).await;
    let cookie = console_login(&run.gw, OPS_KEY).await;
    let get = |path: String| {
        let (url, cookie) = (run.gw.url(&path), cookie.clone());
        async move { send("GET", &url, &[("cookie", &cookie)], "").await }
    };
    let alice = run.alice.as_str();

    // Today: the gateway's call and the three seeded ones; nothing of the other days.
    let today = get("/console/spend?range=today".into()).await;
    assert_eq!(today.status, 200, "{}", today.body);
    let html = &today.body;
    let real = row(html, alice, "test-model").expect("the gateway's own call");
    assert_eq!(cell(real, "model calls"), "1");
    assert_eq!(cell(real, "input tokens"), "600000");
    assert_eq!(cell(real, "cost"), "$0.600003");
    let seeded = row(html, alice, "model-a").expect("today's model-a calls");
    for (label, value) in [
        ("model calls", "3"),
        ("input tokens", "300"),
        ("output tokens", "30"),
        ("cached input tokens", "120"),
        ("cost", "$0.000006"),
    ] {
        assert_eq!(cell(seeded, label), value, "{label}");
    }
    assert!(
        row(html, &run.odd, "=cmd()").is_none(),
        "yesterday's call is not today's"
    );
    assert!(html.contains(&format!("From {} to {}", date(run.today), date(run.today))));
    assert!(
        html.contains("href=\"/console/spend.csv?range=today\""),
        "{html}"
    );

    // The budgets: the limits layer's counters for today and this month.
    let budgets = &html[html.find("id=\"budgets\"").expect("a budget table")..];
    let mine: Vec<&str> = budgets
        .split("<tr")
        .filter(|tr| tr.contains(&format!(">{alice}</th>")))
        .collect();
    assert_eq!(mine.len(), 2, "{budgets}");
    assert_eq!(cell(mine[0], "budget"), "$0.50 per day");
    assert_eq!(cell(mine[0], "used"), "$0.600003");
    assert_eq!(cell(mine[0], "used of the budget"), "120.0 %");
    assert!(mine[0].contains("class=\"exhausted\""));
    assert_eq!(cell(mine[1], "budget"), "$20.00 per month");
    assert_eq!(cell(mine[1], "used of the budget"), "3.0 %");

    // Seven days hold yesterday's call, not the one eight days ago; dates from 8 days ago to yesterday hold
    // those two and not today's.
    let week = get("/console/spend?range=7d".into()).await;
    assert_eq!(
        cell(row(&week.body, alice, "model-a").unwrap(), "model calls"),
        "3"
    );
    assert!(row(&week.body, &run.odd, "=cmd()").is_some());
    let span = format!(
        "from={}&until={}",
        date(run.today.plus(-8)),
        date(run.today.plus(-1))
    );
    let dates = get(format!("/console/spend?{span}")).await;
    assert_eq!(dates.status, 200, "{}", dates.body);
    assert_eq!(
        cell(row(&dates.body, alice, "model-a").unwrap(), "model calls"),
        "2"
    );
    assert!(row(&dates.body, alice, "test-model").is_none());
    assert!(row(&dates.body, &run.odd, "=cmd()").is_some());

    // The same table as CSV.
    let csv = get(format!("/console/spend.csv?{span}")).await;
    assert_eq!(csv.status, 200, "{}", csv.body);
    assert_eq!(csv.headers["content-type"], "text/csv; charset=utf-8");
    assert_eq!(
        csv.headers["content-disposition"],
        format!(
            "attachment; filename=\"spend-{}-to-{}.csv\"",
            date(run.today.plus(-8)),
            date(run.today.plus(-1))
        )
        .as_str()
    );
    let lines: Vec<&str> = csv.body.split("\r\n").collect();
    assert_eq!(
        lines[0],
        "from,until,caller,model,calls,refused,errors,input_tokens,output_tokens,cached_input_tokens,cost_usd,unpriced_calls"
    );
    let (from, until) = (date(run.today.plus(-8)), date(run.today.plus(-1)));
    let quoted = format!("\"{}\"", run.odd.replace('"', "\"\""));
    assert!(
        lines.contains(
            &format!("{from},{until},{alice},model-a,2,0,0,200,20,80,0.000004000,0").as_str()
        ),
        "{}",
        csv.body
    );
    assert!(
        lines.contains(
            &format!("{from},{until},{quoted},'=cmd(),1,0,0,100,10,40,0.000002000,0").as_str()
        ),
        "{}",
        csv.body
    );
    assert_eq!(lines.last(), Some(&""), "every line ends with CRLF");

    // A malformed date is refused, named.
    let bad = get("/console/spend?from=2026-02-30".into()).await;
    assert_eq!(bad.status, 400);
    assert!(
        bad.body.contains("`2026-02-30` is not a date"),
        "{}",
        bad.body
    );
    let bad_csv = get("/console/spend.csv?range=fortnight".into()).await;
    assert_eq!(bad_csv.status, 400);
    assert!(bad_csv.body.contains("Unknown range `fortnight`"));
    drop(run.store);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spend_page_and_csv_on_sqlite() {
    page_and_csv_on(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spend_page_and_csv_on_postgresql() {
    let Some(url) = tower_chat::test_server::service_url("DATABASE_URL") else {
        return;
    };
    page_and_csv_on(Some(url)).await;
}

async fn in_chromium_at(width: u32) {
    let Some(axe) = axe_core() else {
        return;
    };
    let Some(browser) = Driver::start_sized(&format!("spend-{width}"), width, 900).await else {
        return;
    };
    let run = start(None).await;
    let base = format!("http://{}", run.gw.addr);
    log_in(&browser, &base).await;
    browser.go(&format!("{base}/console/spend")).await;
    browser.find("#spend", Duration::from_secs(5)).await;
    let mut found = Vec::new();
    if browser.scrolls_sideways().await {
        found.push(format!("spend at {width}: scrolls sideways"));
    }
    for violation in browser.axe_violations(&axe).await {
        found.push(format!("spend at {width}: {violation}"));
    }
    assert!(found.is_empty(), "{found:#?}");
    // The current month by default, its preset marked.
    let current = browser
        .find("p.choices a.current", Duration::from_secs(5))
        .await;
    assert_eq!(browser.text(&current).await, "This month");
    // A preset link.
    let last_week = browser
        .find_containing("p.choices a", "Last week", Duration::from_secs(5))
        .await;
    browser.click(&last_week).await;
    browser
        .find_containing("p.choices a.current", "Last week", Duration::from_secs(5))
        .await;
    // The date form: from eight days ago until yesterday.
    browser
        .go(&format!("{base}/console/spend?range=today"))
        .await;
    let set = |id: &str, day: UtcDay| {
        let script = format!(
            "document.querySelector('input[name={id}]').value = '{}';",
            date(day)
        );
        let browser = &browser;
        async move { browser.execute(&script, vec![]).await }
    };
    set("from", run.today.plus(-8)).await;
    set("until", run.today.plus(-1)).await;
    let show = browser
        .find_containing("form.period button", "Show", Duration::from_secs(5))
        .await;
    browser.click(&show).await;
    let summary = browser
        .find_containing(
            "#spend-summary",
            &format!(
                "From {} to {}",
                date(run.today.plus(-8)),
                date(run.today.plus(-1))
            ),
            Duration::from_secs(5),
        )
        .await;
    let link = browser.find("#spend-csv", Duration::from_secs(5)).await;
    assert_eq!(
        browser.attribute(&link, "href").await.as_deref(),
        Some(
            format!(
                "/console/spend.csv?from={}&until={}",
                date(run.today.plus(-8)),
                date(run.today.plus(-1))
            )
            .as_str()
        )
    );
    assert!(!browser.text(&summary).await.is_empty());
    let cells = browser.find_all("#spend tbody th[data-label=caller]").await;
    let mut names = Vec::new();
    for cell in cells {
        names.push(browser.text(&cell).await);
    }
    assert!(names.contains(&run.alice), "{names:?}");
    assert!(names.contains(&run.odd), "{names:?}");
}

async fn log_in(browser: &Driver, base: &str) {
    browser.go(&format!("{base}/console/login")).await;
    let key = browser.find("#key", Duration::from_secs(5)).await;
    browser.type_into(&key, OPS_KEY).await;
    browser
        .click(&browser.find("#login", Duration::from_secs(5)).await)
        .await;
    browser.find("nav", Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spend_page_in_chromium_at_desktop_width() {
    in_chromium_at(1400).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spend_page_in_chromium_at_phone_width() {
    in_chromium_at(400).await;
}
