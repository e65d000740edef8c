//! Every console page in headless Chromium at a desktop width (1,400 px) and a phone's (400 px): no page
//! scrolls sideways, every action (approve, deny, log out) is on screen, and `axe-core` finds no serious or
//! critical accessibility violation. The inbox's cards show the user's request, the model's text, the arguments
//! as fields and what a write changes; a decision made in the page comes back as a banner and moves its call to
//! the decided section, and the pending count in the title and the navigation follows the live refresh. The usage
//! page's charts fill their frame with text of 11 px or more, time and y-axis labels that neither overlap nor stick
//! out, and every point inside its plot; one slow call among fast ones turns the latency axis logarithmic.
//! The inbox says when it last heard from the gateway and when it cannot reach
//! it, and a decision that cannot reach the gateway is shown as failed and stays in its form. Needs Chromium, chromedriver and `npm ci --prefix gateway/tests/axe`;
//! without them it skips with a message, unless `CI` is set (then it fails).

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::webdriver::{axe_core, Driver, ELEMENT_KEY};
use common::{post, usage, write_as_asked, Harness, WRITE_ARGUMENTS};
use serde_json::json;

const OPS_KEY: &str = "sk-ops-carol-0123456789";
const ALICE: (&str, &str) = ("authorization", "Bearer sk-alice");

async fn gateway(dir: &Path) -> Harness {
    std::fs::write(dir.join("clients"), "alice:sk-alice\n").unwrap();
    std::fs::write(dir.join("operators"), format!("carol:{OPS_KEY}\n")).unwrap();
    let (clients, operators) = (dir.join("clients"), dir.join("operators"));
    Harness::start(write_as_asked, move |c| {
        c.api_keys_file = Some(clients);
        c.operator_keys_file = Some(operators);
    })
    .await
}

/// A call of alice's paused for approval, so the inbox, the conversations and a timeline have content: a write
/// of `content` to `path`.
async fn pause_a_call(gw: &Harness, conversation: &str, path: &str, content: &str) {
    let headers = [ALICE, ("x-conversation-id", conversation)];
    let arguments = json!({"path": path, "content": content});
    let body = json!({"model": "test-model", "messages": [
        {"role": "user", "content": format!("Write the plan to {path} please.\n{WRITE_ARGUMENTS} {arguments}")}
    ]});
    let answer = post(&gw.url("/v1/chat/completions"), body.to_string(), &headers).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(
        answer.json()["tower_chat"]["finish_reason"],
        "awaiting_approval"
    );
}

async fn log_in(browser: &Driver, base: &str) {
    browser.go(&format!("{base}/console/login")).await;
    let key = browser.find("#key", Duration::from_secs(5)).await;
    browser.type_into(&key, OPS_KEY).await;
    browser
        .click(&browser.find("#login", Duration::from_secs(5)).await)
        .await;
    browser
        .find("#approvals tbody tr[data-id]", Duration::from_secs(10))
        .await;
}

/// What is wrong with the page now: sideways scrolling, actions off screen, accessibility violations.
pub(crate) async fn problems(browser: &Driver, axe: &str, page: &str) -> Vec<String> {
    let mut found = Vec::new();
    if browser.scrolls_sideways().await {
        found.push(format!("{page}: scrolls sideways"));
    }
    for action in browser
        .off_screen("button, a.button, form.logout button, nav a")
        .await
    {
        found.push(format!("{page}: `{action}` is off screen"));
    }
    for violation in browser.axe_violations(axe).await {
        found.push(format!("{page}: {violation}"));
    }
    found
}

/// What makes the usage page's charts hard to read: a chart narrower than its frame, text rendered under
/// 11 px, time labels that overlap or stick out of the chart, more time labels than a phone's set, y-axis labels
/// that overlap each other or stick out of the chart, a point drawn outside the plot (above its top grid line or
/// below its bottom one).
const CHART_PROBLEMS: &str = r#"
const problems = [];
for (const figure of document.querySelectorAll('figure.chart')) {
  const svg = figure.querySelector('svg');
  const style = getComputedStyle(figure);
  const frame = figure.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
  const box = svg.getBoundingClientRect();
  if (Math.abs(box.width - frame) > 1) problems.push(`${figure.id}: ${box.width} px wide in a ${frame} px frame`);
  const ticks = [];
  for (const text of svg.querySelectorAll('text')) {
    if (getComputedStyle(text).display === 'none' || text.getClientRects().length === 0) continue;
    const size = parseFloat(getComputedStyle(text).fontSize) * text.getScreenCTM().a;
    if (size < 11) problems.push(`${figure.id}: "${text.textContent}" at ${size.toFixed(1)} px`);
    if (text.classList.contains('tick')) ticks.push([text.textContent, text.getBoundingClientRect()]);
  }
  const yLabels = [...svg.querySelectorAll('text.y-label')].map((t) => [t.textContent, t.getBoundingClientRect()]);
  if (yLabels.length < 2) problems.push(`${figure.id}: ${yLabels.length} y-axis labels`);
  yLabels.sort((a, b) => b[1].top - a[1].top);
  for (let i = 1; i < yLabels.length; i++) {
    if (yLabels[i][1].bottom > yLabels[i - 1][1].top) problems.push(`${figure.id}: ${yLabels[i - 1][0]} and ${yLabels[i][0]} overlap`);
  }
  for (const [label, r] of yLabels) {
    if (r.left < box.left - 0.5 || r.right > box.right + 0.5 || r.top < box.top - 0.5 || r.bottom > box.bottom + 0.5) {
      problems.push(`${figure.id}: y-axis label ${label} sticks out`);
    }
  }
  const grid = [...svg.querySelectorAll('line.grid')].map((l) => l.getBoundingClientRect().top);
  const [plotTop, plotBottom] = [Math.min(...grid), Math.max(...grid)];
  for (const point of svg.querySelectorAll('circle')) {
    const r = point.getBoundingClientRect();
    const middle = (r.top + r.bottom) / 2;
    if (middle < plotTop - 1 || middle > plotBottom + 1) problems.push(`${figure.id}: a point at ${middle.toFixed(1)} outside the plot ${plotTop.toFixed(1)}–${plotBottom.toFixed(1)}`);
  }
  ticks.sort((a, b) => a[1].left - b[1].left);
  for (let i = 1; i < ticks.length; i++) {
    if (ticks[i][1].left < ticks[i - 1][1].right + 4) problems.push(`${figure.id}: ${ticks[i - 1][0]} and ${ticks[i][0]} overlap`);
  }
  for (const [label, r] of ticks) {
    if (r.left < box.left - 0.5 || r.right > box.right + 0.5) problems.push(`${figure.id}: ${label} sticks out`);
  }
  if (ticks.length === 0 || (window.innerWidth <= 700 && ticks.length > 4)) problems.push(`${figure.id}: ${ticks.length} time labels`);
}
return problems;
"#;

async fn every_page_at(width: u32) {
    let Some(axe) = axe_core() else {
        return;
    };
    let Some(browser) = Driver::start_sized(&format!("pages-{width}"), width, 900).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path()).await;
    std::fs::create_dir_all(gw.root().join("notes")).unwrap();
    let plan: String = (1..=40)
        .map(|i| format!("step {i}: do the thing\n"))
        .collect();
    std::fs::write(gw.root().join("notes/plan.txt"), &plan).unwrap();
    let revised = plan.replace(
        "step 7: do the thing",
        &format!("step 7: {}", "revised ".repeat(30)),
    );
    pause_a_call(&gw, "plan-1", "notes/plan.txt", &revised).await;
    let long_name = format!("notes/{}.txt", "a-long-file-name-".repeat(8));
    pause_a_call(&gw, "plan-2", &long_name, &"word ".repeat(200)).await;
    pause_a_call(&gw, "plan-3", "../outside.txt", "nope").await;
    usage::seed(&gw).await;
    let base = format!("http://{}", gw.addr);

    let mut found = Vec::new();
    browser.go(&format!("{base}/console/login")).await;
    browser.find("#key", Duration::from_secs(5)).await;
    found.extend(problems(&browser, &axe, "login").await);
    log_in(&browser, &base).await;
    let rows = browser.find_all("#approvals tr[data-id]").await;
    assert_eq!(rows.len(), 3);
    assert_eq!(
        browser
            .find_all("#approvals tr[data-id] td[data-label]")
            .await
            .len(),
        3 * 10,
        "each field of an approval names itself (the label a phone's card shows)"
    );
    assert!(browser
        .execute("return document.title;", vec![])
        .await
        .as_str()
        .unwrap()
        .starts_with("(3) Approvals"));
    for (selector, says) in [
        (".said.user", "Write the plan to notes/plan.txt please."),
        (".said.model", "I will write the file as you asked."),
        (
            ".write-preview[data-state=changes] del",
            "- step 7: do the thing",
        ),
        (".write-preview[data-state=creates]", "Creates a new file"),
        (".write-preview[data-state=refused]", "Nothing was read"),
        (
            "#approvals tr[data-id]:nth-child(2) .field[data-name=content] summary",
            "Show all (1000 chars · 1000 bytes)",
        ),
        ("dl.fields .field[data-name=content] .size", "chars"),
    ] {
        let element = browser.find(selector, Duration::from_secs(5)).await;
        let text = browser.text(&element).await;
        assert!(text.contains(says), "{selector}: {text}");
    }
    browser.screenshot("inbox").await;
    found.extend(problems(&browser, &axe, "inbox").await);

    // Deny the new file's write in the page: the banner names it, and it waits for its client in its own section.
    let deny = browser
        .find(
            "#approvals tr[data-id]:nth-child(2) button.deny",
            Duration::from_secs(5),
        )
        .await;
    browser.click(&deny).await;
    let banner = browser.find("#decided", Duration::from_secs(10)).await;
    let said = browser.text(&banner).await;
    assert!(
        said.starts_with(&format!(
            "Denied write_file on {long_name} in conversation alice/plan-2"
        )),
        "{said}"
    );
    browser
        .find(
            "#decided-approvals tr[data-id][data-status=denied]",
            Duration::from_secs(5),
        )
        .await;
    assert_eq!(browser.find_all("#approvals tr[data-id]").await.len(), 2);
    assert!(browser
        .execute("return document.title;", vec![])
        .await
        .as_str()
        .unwrap()
        .starts_with("(2) Approvals"));
    browser.screenshot("inbox-decided").await;
    found.extend(problems(&browser, &axe, "inbox after a decision").await);

    // A call paused while the page is open appears without a reload, and the counts follow.
    pause_a_call(&gw, "plan-4", "notes/later.txt", "later").await;
    browser.find("#pending-count", Duration::from_secs(1)).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let title = browser.execute("return document.title;", vec![]).await;
        let nav = browser
            .text(
                &browser
                    .find("#nav-pending-count", Duration::from_secs(1))
                    .await,
            )
            .await;
        if title.as_str().unwrap().starts_with("(3) Approvals") && nav == "(3)" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{title} / {nav}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(browser.find_all("#approvals tr[data-id]").await.len(), 3);
    browser
        .find(
            ".write-preview[data-state=creates] code",
            Duration::from_secs(1),
        )
        .await;

    found.extend(call_log_at(&browser, &axe, &gw, &base).await);

    browser.go(&format!("{base}/console/conversations")).await;
    let link = browser
        .find("#conversations a.conversation", Duration::from_secs(5))
        .await;
    let timeline = browser.attribute(&link, "href").await.unwrap();
    browser.screenshot("conversations").await;
    found.extend(problems(&browser, &axe, "conversations").await);

    browser.go(&format!("{base}{timeline}")).await;
    browser.find("section.call", Duration::from_secs(5)).await;
    browser.screenshot("timeline").await;
    found.extend(problems(&browser, &axe, "timeline").await);

    for by in ["model", "caller"] {
        browser
            .go(&format!("{base}/console/usage?range=1h&by={by}"))
            .await;
        browser
            .find(&format!("#usage-by-{by}"), Duration::from_secs(5))
            .await;
        browser.screenshot(&format!("usage-by-{by}")).await;
        found.extend(problems(&browser, &axe, &format!("usage by {by}")).await);
        let charts = browser.execute(CHART_PROBLEMS, vec![]).await;
        found.extend(
            charts
                .as_array()
                .expect("a list of problems")
                .iter()
                .map(|p| format!("usage by {by}: {}", p.as_str().unwrap_or_default())),
        );
        assert_eq!(
            browser.find_all("figure.chart").await.len(),
            6,
            "calls, errors, error rate, tokens, cost, latency"
        );
        browser
            .execute(
                "document.getElementById('latency').scrollIntoView();",
                vec![],
            )
            .await;
        browser.screenshot(&format!("usage-latency-by-{by}")).await;
        // One 60 s call among calls of 100–500 ms: a logarithmic axis, every point inside the plot (checked
        // with the other charts above), none on a line above it.
        assert_eq!(
            browser.find_all("#latency[data-scale=log]").await.len(),
            1,
            "the 60 s outlier turns the latency axis logarithmic"
        );
        assert_eq!(
            browser.find_all("#latency svg circle").await.len(),
            browser
                .execute(
                    "return Number(document.querySelector('#latency svg').dataset.points);",
                    vec![],
                )
                .await
                .as_u64()
                .unwrap() as usize,
            "every point is drawn"
        );
    }

    // The console's own error pages: a range it does not know (400) and a page that does not exist (404).
    for (path, status) in [
        ("/console/usage?range=2w", "usage?range=2w (400)"),
        ("/console/no-such-page", "a missing page (404)"),
    ] {
        browser.go(&format!("{base}{path}")).await;
        browser.find("main", Duration::from_secs(5)).await;
        found.extend(problems(&browser, &axe, status).await);
    }

    assert!(found.is_empty(), "at {width} px:\n{}", found.join("\n"));

    // The check can fail: an image without a text alternative is reported.
    browser
        .execute(
            "document.querySelector('main').appendChild(document.createElement('img'));",
            vec![],
        )
        .await;
    let caught = browser.axe_violations(&axe).await;
    assert!(
        caught.iter().any(|v| v.starts_with("image-alt")),
        "{caught:?}"
    );
}

/// The call log: filtered through its form (a phone reaches every field and button), then a call made while it
/// is open appears on top without a reload; checked for fit and accessibility with the new row in place.
async fn call_log_at(browser: &Driver, axe: &str, gw: &Harness, base: &str) -> Vec<String> {
    let mut found = Vec::new();
    browser
        .go(&format!("{base}/console/calls?status=cancelled"))
        .await;
    browser
        .find("#no-calls:not(.hidden)", Duration::from_secs(5))
        .await;
    found.extend(problems(browser, axe, "call log, filtered to nothing").await);
    // The form: choose "any" outcome again, search the paused call's words, apply.
    browser
        .execute(
            "document.querySelector('#call-filters select[name=status]').value = '';",
            vec![],
        )
        .await;
    let search = browser
        .find("#call-filters input[name=q]", Duration::from_secs(5))
        .await;
    browser.type_into(&search, "plan notes").await;
    browser
        .click(
            &browser
                .find("#call-filters button[type=submit]", Duration::from_secs(5))
                .await,
        )
        .await;
    browser
        .find("#calls tbody tr[data-call-id]", Duration::from_secs(5))
        .await;
    assert!(
        browser.url().await.contains("q=plan+notes"),
        "{}",
        browser.url().await
    );

    browser.go(&format!("{base}/console/calls")).await;
    let before = browser
        .find_all("#calls tbody tr[data-call-id]")
        .await
        .len();
    assert!(before >= 1, "the paused call is listed");
    assert_eq!(
        browser
            .find_all("#calls tbody tr[data-call-id] td[data-label]")
            .await
            .len(),
        9 * before,
        "each cell names itself (the label a phone's card shows)"
    );
    // A mark on the page's window: it survives only if the page is not reloaded.
    browser
        .execute("window.stillTheSamePage = true;", vec![])
        .await;
    pause_a_call(gw, "plan-live", "notes/live.txt", "live").await;
    let arrived = browser
        .find(
            "#calls tbody tr[data-call-id]:first-child a[href*='plan-live']",
            Duration::from_secs(10),
        )
        .await;
    assert!(browser.text(&arrived).await.len() >= 19, "the call's time");
    assert_eq!(
        browser
            .find_all("#calls tbody tr[data-call-id]")
            .await
            .len(),
        before + 1
    );
    assert_eq!(
        browser
            .execute("return window.stillTheSamePage === true;", vec![])
            .await,
        true,
        "the new call came without a reload"
    );
    browser.screenshot("calls").await;
    found.extend(problems(browser, axe, "call log").await);
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_fits_a_desktop_and_passes_axe() {
    every_page_at(1400).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_fits_a_narrow_window_and_passes_axe() {
    every_page_at(800).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_fits_a_phone_and_passes_axe() {
    every_page_at(400).await;
}

/// One 30 s call among twenty of 200 ms: the latency chart turns logarithmic, draws every point inside its plot
/// and keeps its y-axis labels apart and inside the chart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_slow_call_among_fast_ones_gives_a_logarithmic_latency_chart_with_every_point_in_its_plot(
) {
    let Some(browser) = Driver::start_sized("latency-log", 1400, 900).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path()).await;
    pause_a_call(&gw, "plan-1", "notes/plan.txt", "plan").await;
    let mut latencies = vec![200; 20];
    latencies.push(30_000);
    usage::seed_latencies(&gw, &latencies).await;
    let base = format!("http://{}", gw.addr);
    log_in(&browser, &base).await;
    browser.go(&format!("{base}/console/usage?range=1h")).await;
    browser
        .find("#latency[data-scale=log]", Duration::from_secs(5))
        .await;
    browser
        .execute(
            "document.getElementById('latency').scrollIntoView();",
            vec![],
        )
        .await;
    browser.screenshot("usage-latency-log").await;
    let charts = browser.execute(CHART_PROBLEMS, vec![]).await;
    assert_eq!(charts, json!([]), "chart problems");
    let drawn = browser.find_all("#latency svg circle").await.len();
    // p50, p90 and p99 of the seeded minute and of the paused call's.
    assert_eq!(drawn, 6);
    let labels = browser
        .execute(
            "return [...document.querySelectorAll('#latency text.y-label')].map((t) => t.textContent);",
            vec![],
        )
        .await;
    let labels: Vec<&str> = labels
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    assert!(
        labels.ends_with(&["100 ms", "1 s", "10 s", "100 s"]),
        "{labels:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inbox_says_when_the_gateway_is_unreachable_and_keeps_a_failed_decision() {
    let Some(browser) = Driver::start("liveness").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut gw = gateway(dir.path()).await;
    pause_a_call(&gw, "plan-2", "notes/plan.txt", "line one\nline two\n").await;
    let base = format!("http://{}", gw.addr);
    log_in(&browser, &base).await;
    let liveness = browser
        .find("#liveness[data-state=live]", Duration::from_secs(5))
        .await;
    assert!(browser.text(&liveness).await.starts_with("Updated "));

    gw.shutdown();
    gw.server.take().unwrap().await.unwrap().unwrap();
    let down = browser
        .find("#liveness[data-state=unreachable]", Duration::from_secs(10))
        .await;
    assert!(
        browser.text(&down).await.contains("Gateway unreachable"),
        "{}",
        browser.text(&down).await
    );
    browser.screenshot("unreachable").await;

    // Deciding now fails visibly, and the operator's reason is still in the form.
    let reason = browser
        .find(
            "#approvals tr[data-id] input[name=reason]",
            Duration::from_secs(5),
        )
        .await;
    browser.type_into(&reason, "looks fine").await;
    let approve = browser
        .find(
            "#approvals tr[data-id] button.approve",
            Duration::from_secs(5),
        )
        .await;
    browser.click(&approve).await;
    let failed = browser
        .find("#decision-error:not(.hidden)", Duration::from_secs(10))
        .await;
    assert!(
        browser
            .text(&failed)
            .await
            .contains("did not reach the gateway"),
        "{}",
        browser.text(&failed).await
    );
    assert!(
        browser.url().await.ends_with("/console"),
        "{}",
        browser.url().await
    );
    let reason = browser
        .find(
            "#approvals tr[data-id] input[name=reason]",
            Duration::from_secs(1),
        )
        .await;
    let kept = browser
        .execute(
            "return arguments[0].value;",
            vec![json!({ELEMENT_KEY: reason})],
        )
        .await;
    assert_eq!(kept, "looks fine");
}
