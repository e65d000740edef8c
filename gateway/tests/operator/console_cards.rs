//! The console's approval cards over plain HTTP: each card shows the user's request and the model's text before
//! the call, every argument as a labelled field with its size, and for `write_file` whether the target exists and
//! what the write changes, read through the files sandbox (a path outside it is refused and never read); decided
//! calls move to their own section, the pending count is in the title and the navigation, and a decision comes
//! back as a banner naming the tool, the target and the conversation.

use crate::common;

use std::path::Path;

use common::{console_login, post, send, write_as_asked, Harness, WRITE_ARGUMENTS};
use serde_json::json;

const OPS_KEY: &str = "sk-ops-carol-0123456789";
const ALICE: (&str, &str) = ("authorization", "Bearer sk-alice");
const FORM: (&str, &str) = ("content-type", "application/x-www-form-urlencoded");
const SAME: (&str, &str) = ("sec-fetch-site", "same-origin");

/// What sits beside the files root: a write must never show it.
const SECRET: &str = "TOP-SECRET-BESIDE-THE-ROOT";

pub(crate) async fn gateway(dir: &Path, database_url: Option<String>) -> Harness {
    std::fs::write(dir.join("clients"), "alice:sk-alice\n").unwrap();
    std::fs::write(dir.join("operators"), format!("carol:{OPS_KEY}\n")).unwrap();
    let (clients, operators) = (dir.join("clients"), dir.join("operators"));
    Harness::start(write_as_asked, move |c| {
        c.api_keys_file = Some(clients);
        c.operator_keys_file = Some(operators);
        c.database_url = database_url;
    })
    .await
}

/// A write of alice's waiting for approval.
pub(crate) struct Paused {
    pub(crate) id: String,
    pub(crate) conversation: String,
    /// The conversation as alice resends it once an operator decided: ending with the approval notice.
    pub(crate) resend: serde_json::Value,
}

/// Alice asks for a write with `arguments` in `conversation`; the call pauses.
pub(crate) async fn pause_write(gw: &Harness, name: &str, arguments: serde_json::Value) -> Paused {
    // Unique per run: a PostgreSQL database outlives the test.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let conversation = &format!("{name}-{nanos}");
    let headers = [ALICE, ("x-conversation-id", conversation)];
    let body = json!({"model": "test-model", "messages": [
        {"role": "user", "content": format!("Please write it.\n{WRITE_ARGUMENTS} {arguments}")}
    ]});
    let answer = post(&gw.url("/v1/chat/completions"), body.to_string(), &headers).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let answer = answer.json();
    assert_eq!(answer["tower_chat"]["finish_reason"], "awaiting_approval");
    let mut resend = body;
    resend["messages"]
        .as_array_mut()
        .unwrap()
        .push(json!({"role": "assistant", "content": answer["choices"][0]["message"]["content"]}));
    Paused {
        id: answer["tower_chat"]["approval_requests"][0]["id"]
            .as_str()
            .unwrap()
            .to_owned(),
        conversation: conversation.to_owned(),
        resend,
    }
}

/// Carol denies `id` from the console, as its form posts without a script: where the console sends her.
async fn deny(gw: &Harness, cookie: &str, csrf: &str, id: &str) -> String {
    let decided = send(
        "POST",
        &gw.url(&format!("/console/approvals/{id}/decision")),
        &[FORM, SAME, ("cookie", cookie)],
        &format!("csrf={csrf}&decision=deny&reason=not+now"),
    )
    .await;
    assert_eq!(decided.status, 303, "{}", decided.body);
    decided.headers["location"].to_str().unwrap().to_owned()
}

/// The `<tr>` of approval `id` in `page`.
fn row<'a>(page: &'a str, id: &str) -> &'a str {
    let start = page
        .find(&format!("<tr data-id=\"{id}\""))
        .unwrap_or_else(|| panic!("no row of {id}: {page}"));
    let end = page[start..].find("</tr>").unwrap() + start;
    &page[start..end]
}

/// The number in the element with `id` (`<span id="pending-count">4</span>`).
fn count(page: &str, id: &str) -> usize {
    let marker = format!("id=\"{id}\">");
    let at = page
        .find(&marker)
        .unwrap_or_else(|| panic!("no #{id}: {page}"))
        + marker.len();
    page[at..at + page[at..].find('<').unwrap()]
        .parse()
        .unwrap()
}

/// The part of `page` from the element with `id` to the end of its table.
fn table<'a>(page: &'a str, id: &str) -> &'a str {
    let start = page
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no #{id}: {page}"));
    let end = page[start..].find("</table>").unwrap() + start;
    &page[start..end]
}

async fn cards_on(database_url: Option<String>) {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), database_url).await;
    std::fs::create_dir_all(gw.root().join("notes")).unwrap();
    std::fs::write(
        gw.root().join("notes/plan.txt"),
        "line one\nline two\nline three\n",
    )
    .unwrap();
    std::fs::write(gw.files.path().join("secret.txt"), SECRET).unwrap();
    std::fs::write(gw.root().join("big.txt"), "x\n".repeat(200 * 1024)).unwrap();

    let new_content = "line one\nline 2\nline three\nline four ✓\n";
    let changes = pause_write(
        &gw,
        "changes",
        json!({"path": "notes/plan.txt", "content": new_content}),
    )
    .await;
    let creates = pause_write(
        &gw,
        "creates",
        json!({"path": "notes/new.txt", "content": "fresh"}),
    )
    .await;
    let outside = pause_write(
        &gw,
        "outside",
        json!({"path": "../secret.txt", "content": "overwritten"}),
    )
    .await;
    let large = pause_write(
        &gw,
        "large",
        json!({"path": "big.txt", "content": "small now"}),
    )
    .await;
    // The file is untouched while the calls wait.
    assert_eq!(
        std::fs::read_to_string(gw.files.path().join("secret.txt")).unwrap(),
        SECRET
    );

    let cookie = console_login(&gw, OPS_KEY).await;
    let inbox = send("GET", &gw.url("/console"), &[("cookie", &cookie)], "").await;
    assert_eq!(inbox.status, 200, "{}", inbox.body);
    let page = &inbox.body;
    // A PostgreSQL database may hold other tests' approvals too: counted, at least these four.
    let waiting = count(page, "pending-count");
    assert!(waiting >= 4, "{page}");
    assert!(
        page.contains(&format!(
            "<title>({waiting}) Approvals · tower-chat console</title>"
        )),
        "{page}"
    );
    assert!(
        page.contains(&format!(
            "<span class=\"count\" id=\"nav-pending-count\">({waiting})</span>"
        )),
        "{page}"
    );

    // Context: the user's request and the model's text before the call, real newlines.
    let card = row(page, &changes.id);
    assert!(
        card.contains("User's request") && card.contains("Please write it.\nARGUMENTS:"),
        "{card}"
    );
    assert!(
        card.contains("Model, before the call")
            && card.contains("I will write the file as you asked.\nHere is the call:"),
        "{card}"
    );
    // Arguments as fields: strings as text (real newlines, escaped), with their size.
    assert!(
        card.contains("<div class=\"field\" data-name=\"content\"><dt>content</dt>"),
        "{card}"
    );
    assert!(
        card.contains(&format!("<pre class=\"text\">{new_content}</pre>")),
        "{card}"
    );
    assert!(card.contains("39 chars · 41 bytes"), "{card}");
    assert!(card.contains("14 chars · 14 bytes"), "{card}");
    let fields = &card[card.find("class=\"arguments\"").unwrap()..];
    assert!(!fields.contains("\\n"), "no escaped newlines: {fields}");
    // The write's target exists: a line diff against it.
    assert!(card.contains("data-state=\"changes\""), "{card}");
    assert!(card.contains("<del>- line two\n</del>"), "{card}");
    assert!(card.contains("<ins>+ line 2\n</ins>"), "{card}");
    assert!(card.contains("<ins>+ line four ✓\n</ins>"), "{card}");
    assert!(
        card.contains("<span class=\"same\">  line one\n</span>"),
        "{card}"
    );

    // When it paused and the id a decision names.
    assert!(card.contains("<span class=\"paused-at\">20"), "{card}");
    assert!(
        card.contains(&format!(
            "<code class=\"approval-id\">{}</code>",
            changes.id
        )),
        "{card}"
    );

    let card = row(page, &creates.id);
    assert!(card.contains("data-state=\"creates\""), "{card}");
    assert!(card.contains("Creates a new file"), "{card}");

    let card = row(page, &outside.id);
    assert!(card.contains("data-state=\"refused\""), "{card}");
    assert!(card.contains("Nothing was read"), "{card}");
    // A refused path offers Deny only; a path the sandbox takes offers both.
    assert!(!card.contains("value=\"approve\""), "{card}");
    assert!(card.contains("value=\"deny\""), "{card}");
    assert!(
        row(page, &creates.id).contains("value=\"approve\""),
        "{page}"
    );
    assert!(
        !page.contains(SECRET),
        "a path outside the root is never read"
    );

    let card = row(page, &large.id);
    assert!(card.contains("data-state=\"too-large\""), "{card}");
    assert!(card.contains("diff too large"), "{card}");
    assert!(card.contains("409600 bytes"), "{card}");

    // The live refresh's JSON carries the context too.
    let api = send(
        "GET",
        &gw.url("/console/api/approvals"),
        &[("cookie", &cookie)],
        "",
    )
    .await
    .json();
    let listed = api["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == changes.id.as_str())
        .unwrap()
        .clone();
    assert_eq!(
        listed["context"]["model_text"],
        "I will write the file as you asked.\nHere is the call:"
    );

    // Deny one without a script: a banner names the tool, the target and the conversation.
    let csrf = {
        let marker = "name=\"csrf-token\" content=\"";
        let at = page.find(marker).unwrap() + marker.len();
        page[at..at + 64].to_owned()
    };
    let location = deny(&gw, &cookie, &csrf, &changes.id).await;
    let after = send("GET", &gw.url(&location), &[("cookie", &cookie)], "").await;
    let page = &after.body;
    let banner = &page[page.find("id=\"decided\"").expect(page)..];
    let banner = &banner[..banner.find("</p>").unwrap()];
    assert!(banner.contains("Denied"), "{banner}");
    assert!(
        banner.contains("<code class=\"decided-tool\">write_file</code>"),
        "{banner}"
    );
    assert!(
        banner.contains("<code class=\"decided-target\">notes/plan.txt</code>"),
        "{banner}"
    );
    assert!(
        banner.contains(&format!(
            "href=\"/console/conversation?id=alice%2F{}\"",
            changes.conversation
        )),
        "{banner}"
    );
    // The denied call waits for its client in its own section, not under Pending; the count follows.
    assert!(
        !table(page, "approvals").contains(&changes.id),
        "not pending any more"
    );
    assert!(
        table(page, "decided-approvals").contains(&format!("data-id=\"{}\"", changes.id)),
        "{page}"
    );
    assert!(
        row(page, &changes.id).contains("waiting for the client to resume"),
        "{page}"
    );
    // Who decided, when and why.
    let card = row(page, &changes.id);
    assert!(card.contains("by operator:carol at 20"), "{card}");
    assert!(
        card.contains("<q class=\"decided-reason\">not now</q>"),
        "{card}"
    );
    assert_eq!(count(page, "pending-count"), waiting - 1, "{page}");
    assert!(
        page.contains(&format!("<title>({}) Approvals", waiting - 1)),
        "{page}"
    );
    assert!(count(page, "decided-count") >= 1, "{page}");

    // The count is in the navigation of every page.
    let conversations = send(
        "GET",
        &gw.url("/console/conversations"),
        &[("cookie", &cookie)],
        "",
    )
    .await;
    assert!(
        conversations.body.contains(&format!(
            "<span class=\"count\" id=\"nav-pending-count\">({})</span>",
            waiting - 1
        )),
        "{}",
        conversations.body
    );

    // Every call denied, each client resumes and its approval is gone (a shared database keeps nothing behind).
    for paused in [&creates, &outside, &large] {
        deny(&gw, &cookie, &csrf, &paused.id).await;
    }
    for paused in [&changes, &creates, &outside, &large] {
        let headers = [ALICE, ("x-conversation-id", paused.conversation.as_str())];
        let resumed = post(
            &gw.url("/v1/chat/completions"),
            paused.resend.to_string(),
            &headers,
        )
        .await;
        assert_eq!(resumed.status, 200, "{}", resumed.body);
    }
    let page = send("GET", &gw.url("/console"), &[("cookie", &cookie)], "")
        .await
        .body;
    for paused in [&changes, &creates, &outside, &large] {
        assert!(!page.contains(&paused.id), "{page}");
    }
    assert!(!gw.root().join("notes/new.txt").exists());
    assert_eq!(
        std::fs::read_to_string(gw.files.path().join("secret.txt")).unwrap(),
        SECRET
    );
}

#[tokio::test]
async fn approval_cards_on_sqlite() {
    cards_on(None).await;
}

#[tokio::test]
async fn approval_cards_on_postgresql() {
    let Some(url) = tower_chat::test_server::service_url("DATABASE_URL") else {
        return;
    };
    cards_on(Some(url)).await;
}

/// The banner shows what its query says as text only: markup in it stays inert, and an unknown decision word
/// shows no banner.
#[tokio::test]
async fn the_decision_banner_is_escaped_text() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), None).await;
    let cookie = console_login(&gw, OPS_KEY).await;
    let hostile = "%3Cscript%3Ealert(1)%3C%2Fscript%3E";
    let page = send(
        "GET",
        &gw.url(&format!(
            "/console?done=approved&id=apr_x&tool={hostile}&target={hostile}&conversation=%22%3E%3Cimg"
        )),
        &[("cookie", &cookie)],
        "",
    )
    .await
    .body;
    assert!(page.contains("id=\"decided\""), "{page}");
    assert!(!page.contains("<script>alert(1)"), "{page}");
    assert!(
        page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{page}"
    );
    assert!(!page.contains("\"><img"), "{page}");
    let page = send(
        "GET",
        &gw.url("/console?done=%3Cb%3E&id=apr_x"),
        &[("cookie", &cookie)],
        "",
    )
    .await
    .body;
    assert!(!page.contains("id=\"decided\""), "{page}");
}

/// The `<tr>` of the call log whose timeline link names `conversation` (alice's).
pub(crate) fn call_row<'a>(page: &'a str, conversation: &str) -> &'a str {
    let link = format!("/console/conversation?id=alice%2F{conversation}#call-");
    let at = page
        .find(&link)
        .unwrap_or_else(|| panic!("no call of {conversation}: {page}"));
    let start = page[..at].rfind("<tr ").unwrap();
    let end = page[at..].find("</tr>").unwrap() + at;
    &page[start..end]
}

/// The outcome fact of the (one) call on the timeline of alice's `conversation`.
async fn timeline_outcome(gw: &Harness, cookie: &str, conversation: &str) -> String {
    let page = send(
        "GET",
        &gw.url(&format!("/console/conversation?id=alice%2F{conversation}")),
        &[("cookie", cookie)],
        "",
    )
    .await
    .body;
    let marker = "<dt>outcome</dt><dd class=\"fact\">";
    let at = page.find(marker).unwrap_or_else(|| panic!("{page}")) + marker.len();
    page[at..at + page[at..].find("</dd>").unwrap()].to_owned()
}

/// A call whose turn paused reads "awaiting approval" in the call log and on its timeline while the approval
/// waits, and the decision (who, why) once an operator took it: never "completed".
async fn paused_calls_on(database_url: Option<String>) {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), database_url).await;
    let paused = pause_write(
        &gw,
        "paused-log",
        json!({"path": "notes/later.txt", "content": "later"}),
    )
    .await;
    let cookie = console_login(&gw, OPS_KEY).await;
    let calls = send("GET", &gw.url("/console/calls"), &[("cookie", &cookie)], "")
        .await
        .body;
    let call = call_row(&calls, &paused.conversation);
    assert!(call.contains("data-status=\"awaiting_approval\""), "{call}");
    assert!(
        call.contains("<td class=\"outcome\" data-label=\"Outcome\">awaiting approval</td>"),
        "{call}"
    );
    assert_eq!(
        timeline_outcome(&gw, &cookie, &paused.conversation).await,
        "awaiting approval"
    );

    let inbox = send("GET", &gw.url("/console"), &[("cookie", &cookie)], "")
        .await
        .body;
    let csrf = {
        let marker = "name=\"csrf-token\" content=\"";
        let at = inbox.find(marker).unwrap() + marker.len();
        inbox[at..at + 64].to_owned()
    };
    deny(&gw, &cookie, &csrf, &paused.id).await;
    let calls = send("GET", &gw.url("/console/calls"), &[("cookie", &cookie)], "")
        .await
        .body;
    let decided = "paused for approval, denied by operator:carol: not now";
    let call = call_row(&calls, &paused.conversation);
    assert!(call.contains("data-status=\"approval_decided\""), "{call}");
    assert!(call.contains(decided), "{call}");
    assert_eq!(
        timeline_outcome(&gw, &cookie, &paused.conversation).await,
        decided
    );

    // Once the client resumed, the decision is read from the audit log: the paused call still says it.
    let headers = [ALICE, ("x-conversation-id", paused.conversation.as_str())];
    let resumed = post(
        &gw.url("/v1/chat/completions"),
        paused.resend.to_string(),
        &headers,
    )
    .await;
    assert_eq!(resumed.status, 200, "{}", resumed.body);
    let calls = send("GET", &gw.url("/console/calls"), &[("cookie", &cookie)], "")
        .await
        .body;
    let first = &calls[calls
        .rfind(&format!("alice%2F{}#call-", paused.conversation))
        .unwrap()..];
    let first = &first[..first.find("</tr>").unwrap()];
    assert!(first.contains(decided), "{calls}");
}

#[tokio::test]
async fn a_paused_call_awaits_approval_then_reads_its_decision_on_sqlite() {
    paused_calls_on(None).await;
}

#[tokio::test]
async fn a_paused_call_awaits_approval_then_reads_its_decision_on_postgresql() {
    let Some(url) = tower_chat::test_server::service_url("DATABASE_URL") else {
        return;
    };
    paused_calls_on(Some(url)).await;
}
