//! One pending approval as an operator decides it: what led to the call (the user's request, the model's text
//! before it), each argument as a labelled field (strings as text with their size), and for `write_file` what
//! the write would change, read through the sandbox the tool writes through.

use std::time::SystemTime;

use maud::{html, Markup};
use serde_json::Value;
use similar::{ChangeTag, TextDiff};

use tower_chat_persistence::{CallLogQuery, Store};

use super::format::{span, url_encode, utc};
use crate::operator::Listed;
use crate::stack::tools::{Existing, Sandbox};

/// A link to a conversation's timeline.
pub(crate) fn conversation_link(conversation: &str) -> Markup {
    let href = format!("/console/conversation?id={}", url_encode(conversation));
    html! { a href=(href) class="conversation" { (conversation) } }
}

/// The wall clock (ages and "… ago").
pub(crate) fn now() -> SystemTime {
    SystemTime::now()
}

/// The tool whose calls get a preview of the file they would write.
pub(crate) const WRITE_FILE: &str = "write_file";

/// The largest file (and new content) diffed, in bytes: beyond it the card says the diff is too large.
pub(crate) const MAX_DIFF_BYTES: u64 = 256 * 1024;

/// The most diff lines shown (changed lines and their context); more is "too large" to read on a card anyway.
pub(crate) const MAX_DIFF_LINES: usize = 600;

/// How long the line diff may take before it settles for a coarser (still correct) answer.
const DIFF_DEADLINE: std::time::Duration = std::time::Duration::from_millis(200);

/// Characters of a long text shown before the rest is folded away.
const SHOWN_CHARS: usize = 400;

/// Unchanged lines kept around each change of a diff.
const DIFF_CONTEXT_LINES: usize = 3;

/// What a `write_file` call would do to its target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum WritePreview {
    /// This gateway serves no files directory: the call cannot be previewed here.
    NoFiles,
    /// `path` or `content` is not a string: the tool would refuse the call.
    BadArguments,
    /// The sandbox refuses the path (outside the files directory, a symlink, not a regular file…): nothing
    /// was read. The sandbox's own message.
    Refused(String),
    /// Nothing is there: the write creates the file.
    Creates,
    /// The file holds exactly the new content already.
    Unchanged,
    /// The file exists; the lines the write changes (with context).
    Changes(Vec<DiffLine>),
    /// The file, the new content or the diff is larger than a card shows (the file's size when known).
    TooLarge(Option<u64>),
    /// The file exists but is not UTF-8 text.
    NotText,
}

/// One line of a diff as shown: a hunk header, or a line kept, removed or added.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum DiffLine {
    /// `@@ -a,b +c,d @@`: where the next lines are.
    Hunk(String),
    /// A line both versions have.
    Same(String),
    /// A line only the file has now.
    Removed(String),
    /// A line only the new content has.
    Added(String),
}

/// An approval with what its card shows beyond the listing.
#[derive(Debug)]
pub(crate) struct Card<'a> {
    pub(crate) listed: &'a Listed,
    /// For `write_file` calls only.
    pub(crate) write: Option<WritePreview>,
    /// The model whose answer made the call, from the call records.
    pub(crate) model: Option<String>,
}

/// The model of the call that paused `listed`'s turn: the conversation's latest recorded call that asked for
/// tools and started before the pause (the approval store keeps no model; the call records do).
async fn paused_model(records: &dyn Store, listed: &Listed) -> Option<String> {
    let conversation = &listed.paused.conversation;
    let query = CallLogQuery {
        search: Some(conversation.as_str().to_owned()),
        until: Some(listed.paused.paused_at + std::time::Duration::from_millis(1)),
        limit: Some(20),
        ..CallLogQuery::default()
    };
    let page = records.call_log(&query).await.ok()?;
    page.entries
        .into_iter()
        .map(|e| e.summary)
        .find(|c| &c.conversation_id == conversation && c.asked_for_tools)
        .and_then(|c| c.model)
}

/// The cards of `listed`, previews read through `files` (the sandbox `write_file` writes through), models read
/// from `records`.
pub(crate) async fn cards<'a>(
    files: Option<&Sandbox>,
    records: Option<&dyn Store>,
    listed: &'a [Listed],
) -> Vec<Card<'a>> {
    let mut cards = Vec::with_capacity(listed.len());
    for entry in listed {
        let notice = &entry.paused.notice;
        let write = if notice.tool == WRITE_FILE {
            Some(write_preview(files, &notice.arguments).await)
        } else {
            None
        };
        let model = match records {
            Some(records) => paused_model(records, entry).await,
            None => None,
        };
        cards.push(Card {
            listed: entry,
            write,
            model,
        });
    }
    cards
}

/// What a `write_file` call with `arguments` would change, read through `files`.
pub(crate) async fn write_preview(files: Option<&Sandbox>, arguments: &Value) -> WritePreview {
    let Some(files) = files else {
        return WritePreview::NoFiles;
    };
    let (Some(path), Some(content)) = (
        arguments.get("path").and_then(Value::as_str),
        arguments.get("content").and_then(Value::as_str),
    ) else {
        return WritePreview::BadArguments;
    };
    match files.existing(path, MAX_DIFF_BYTES).await {
        Err(refusal) => WritePreview::Refused(refusal.message().to_owned()),
        Ok(Existing::Absent) => WritePreview::Creates,
        Ok(Existing::NotText) => WritePreview::NotText,
        Ok(Existing::TooLarge(size)) => WritePreview::TooLarge(Some(size)),
        Ok(Existing::Text(old)) if old == content => WritePreview::Unchanged,
        Ok(Existing::Text(old)) => {
            if content.len() as u64 > MAX_DIFF_BYTES {
                return WritePreview::TooLarge(Some(old.len() as u64));
            }
            let size = old.len() as u64;
            let content = content.to_owned();
            // A line diff of two 256 KiB texts is CPU work: off the async workers.
            tokio::task::spawn_blocking(move || line_diff(&old, &content))
                .await
                .ok()
                .flatten()
                .map_or(WritePreview::TooLarge(Some(size)), WritePreview::Changes)
        }
    }
}

/// The changed lines of `old` → `new` with [`DIFF_CONTEXT_LINES`] of context, in hunks; `None` when that is more
/// than [`MAX_DIFF_LINES`].
pub(crate) fn line_diff(old: &str, new: &str) -> Option<Vec<DiffLine>> {
    let diff = TextDiff::configure()
        .timeout(DIFF_DEADLINE)
        .diff_lines(old, new);
    let mut lines = Vec::new();
    for group in diff.grouped_ops(DIFF_CONTEXT_LINES) {
        let (Some(first), Some(last)) = (group.first(), group.last()) else {
            continue;
        };
        let (old_range, new_range) = (
            first.old_range().start..last.old_range().end,
            first.new_range().start..last.new_range().end,
        );
        lines.push(DiffLine::Hunk(format!(
            "@@ -{},{} +{},{} @@",
            old_range.start + 1,
            old_range.len(),
            new_range.start + 1,
            new_range.len()
        )));
        for op in &group {
            for change in diff.iter_changes(op) {
                let text = change.value().trim_end_matches(['\n', '\r']).to_owned();
                lines.push(match change.tag() {
                    ChangeTag::Equal => DiffLine::Same(text),
                    ChangeTag::Delete => DiffLine::Removed(text),
                    ChangeTag::Insert => DiffLine::Added(text),
                });
                if lines.len() > MAX_DIFF_LINES {
                    return None;
                }
            }
        }
    }
    Some(lines)
}

/// What a call acts on, for naming it in one line: its `path`, `url` or `file`, else its first string argument.
pub(crate) fn target(arguments: &Value) -> Option<String> {
    let object = arguments.as_object()?;
    let text = ["path", "url", "file"]
        .iter()
        .find_map(|key| object.get(*key).and_then(Value::as_str))
        .or_else(|| object.values().find_map(Value::as_str))?;
    Some(cut(text, 200))
}

/// At most `max` characters of `text`, with `…` when cut.
fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

/// `12 chars · 14 bytes`.
fn size(text: &str) -> String {
    let chars = text.chars().count();
    let bytes = text.len();
    format!(
        "{chars} {} · {bytes} {}",
        if chars == 1 { "char" } else { "chars" },
        if bytes == 1 { "byte" } else { "bytes" }
    )
}

/// Text as written: a short single line inline, anything else in a `<pre>`; past [`SHOWN_CHARS`] the start,
/// with the whole text behind a `<details>`.
fn text_block(text: &str) -> Markup {
    let long = text.chars().count() > SHOWN_CHARS;
    html! {
        @if long {
            pre class="text" { (cut(text, SHOWN_CHARS)) }
            details class="all-text" {
                summary { "Show all (" (size(text)) ")" }
                pre class="text" { (text) }
            }
        } @else if text.contains('\n') {
            pre class="text" { (text) }
        } @else {
            span class="text" { (text) }
        }
    }
}

/// One argument's value: a string as text with its size, anything else as compact JSON.
fn value_field(value: &Value) -> Markup {
    html! {
        @match value {
            Value::String(text) => {
                (text_block(text))
                span class="size" { (size(text)) }
            }
            other => code class="json" { (other.to_string()) }
        }
    }
}

/// Each top-level argument a labelled row. Arguments that are not a JSON object (text the model sent that does
/// not parse) are shown as they came.
pub(crate) fn argument_fields(arguments: &Value) -> Markup {
    html! {
        @match arguments {
            Value::Object(fields) if !fields.is_empty() => {
                dl class="fields" {
                    @for (name, value) in fields {
                        div class="field" data-name=(name) {
                            dt { (name) }
                            dd { (value_field(value)) }
                        }
                    }
                }
            }
            Value::Object(_) => span class="waiting" { "(no arguments)" },
            Value::String(raw) => {
                p class="hint" { "Not a JSON object; as the model sent it:" }
                (value_field(&Value::String(raw.clone())))
            }
            other => code class="json" { (other.to_string()) },
        }
    }
}

/// The user's request and the model's text before the call.
fn context(listed: &Listed) -> Markup {
    let context = &listed.paused.context;
    html! {
        @if let Some(user) = &context.user_message {
            div class="said user" {
                span class="label" { "User's request" }
                (text_block(user))
            }
        }
        @if let Some(model) = &context.model_text {
            div class="said model" {
                span class="label" { "Model, before the call" }
                (text_block(model))
            }
        }
        @if context.user_message.is_none() && context.model_text.is_none() {
            span class="waiting" { "(not kept)" }
        }
    }
}

/// What a `write_file` call would do, as its card says it.
fn write_preview_markup(path: Option<&str>, preview: &WritePreview) -> Markup {
    let path = path.unwrap_or("");
    html! {
        div class="write-preview" data-state=(preview_state(preview)) {
            @match preview {
                WritePreview::NoFiles => p { "This gateway serves no files directory: the write cannot run here." },
                WritePreview::BadArguments => p { "`path` and `content` must be strings: the tool refuses this call." },
                WritePreview::Refused(message) => p class="refused" {
                    strong { "Refused path." } " Nothing was read: " (message)
                },
                WritePreview::Creates => p class="creates" { "Creates a new file: " code { (path) } " does not exist." },
                WritePreview::Unchanged => p { code { (path) } " exists and already holds exactly this content." },
                WritePreview::NotText => p { code { (path) } " exists and is not UTF-8 text: the write replaces it whole." },
                WritePreview::TooLarge(size) => p class="too-large" {
                    code { (path) } " exists"
                    @if let Some(size) = size { " (" (size) " bytes)" }
                    ": diff too large to show (over " (MAX_DIFF_BYTES / 1024) " KiB or " (MAX_DIFF_LINES) " lines)."
                },
                WritePreview::Changes(lines) => {
                    p { code { (path) } " exists; the write changes it:" }
                    pre class="diff" {
                        @for line in lines {
                            @match line {
                                DiffLine::Hunk(text) => span class="hunk" { (text) "\n" },
                                DiffLine::Same(text) => span class="same" { "  " (text) "\n" },
                                DiffLine::Removed(text) => del { "- " (text) "\n" },
                                DiffLine::Added(text) => ins { "+ " (text) "\n" },
                            }
                        }
                    }
                },
            }
        }
    }
}

/// A stable name of a preview's kind (what scripts and tests look for).
fn preview_state(preview: &WritePreview) -> &'static str {
    match preview {
        WritePreview::NoFiles => "no-files",
        WritePreview::BadArguments => "bad-arguments",
        WritePreview::Refused(_) => "refused",
        WritePreview::Creates => "creates",
        WritePreview::Unchanged => "unchanged",
        WritePreview::Changes(_) => "changes",
        WritePreview::TooLarge(_) => "too-large",
        WritePreview::NotText => "not-text",
    }
}

/// One row of an approvals table; `console.js` moves in the rows the server renders, never builds its own.
pub(crate) fn approval_row(card: &Card<'_>, csrf: &str) -> Markup {
    let listed = card.listed;
    let p = &listed.paused;
    let id = p.notice.id.as_str();
    let age = now().duration_since(p.paused_at).unwrap_or_default();
    html! {
        tr data-id=(id) data-status=(listed.status) {
            td class="tool" data-label="Tool (model)" {
                (p.notice.tool)
                p class="model" { (card.model.as_deref().unwrap_or("model not recorded")) }
            }
            td class="context" data-label="Context" { (context(listed)) }
            td class="arguments" data-label="Arguments" {
                (argument_fields(&p.notice.arguments))
                @if let Some(preview) = &card.write {
                    (write_preview_markup(p.notice.arguments.get("path").and_then(Value::as_str), preview))
                }
            }
            td class="reason" data-label="Policy's reason" { (p.notice.reason.as_deref().unwrap_or("—")) }
            td class="caller" data-label="Caller" { (p.caller.as_ref().map_or("(no key)", |c| c.as_str())) }
            td data-label="Conversation" { (conversation_link(p.conversation.as_str())) }
            td class="paused" data-label="Paused at (approval id)" {
                span class="paused-at" { (utc(p.paused_at)) " UTC" }
                br;
                code class="approval-id" { (id) }
            }
            td class="age" data-label="Age" { (span(age)) }
            td class="expires" data-label="Expires in" { (span(p.expires_in)) }
            td class="status" data-label="Status" {
                (listed.status)
                @if let Some(d) = &listed.decision {
                    p class="decided-by" {
                        "by " (d.approver) " at " (utc(d.decided_at)) " UTC"
                        @if let Some(reason) = d.reason.as_deref().filter(|r| !r.trim().is_empty()) {
                            ": " q class="decided-reason" { (reason) }
                        }
                    }
                }
            }
            td class="actions" {
                @if listed.status == "pending" {
                    form method="post" action=(format!("/console/approvals/{}/decision", url_encode(id))) class="decide" {
                        input type="hidden" name="csrf" value=(csrf);
                        input type="text" name="reason" placeholder="reason" maxlength="4096" aria-label="reason";
                        // The sandbox refuses the path: approving would only run a call the tool refuses.
                        @if let Some(WritePreview::Refused(_)) = &card.write {
                            span class="refused-path" { "Path refused: deny only" }
                        } @else {
                            button type="submit" name="decision" value="approve" class="approve" { "Approve" }
                        }
                        button type="submit" name="decision" value="deny" class="deny" { "Deny" }
                    }
                } @else {
                    span class="waiting" { "waiting for the client to resume" }
                }
            }
        }
    }
}

/// Where an approvals table sits: its element ids when a script keeps it current, and what it says when empty.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TableIds {
    pub(crate) table: Option<&'static str>,
    pub(crate) empty: Option<&'static str>,
    pub(crate) empty_text: &'static str,
}

/// An approvals table of `cards`.
pub(crate) fn approvals_table(cards: &[Card<'_>], csrf: &str, ids: TableIds) -> Markup {
    html! {
        p id=[ids.empty] class=(if cards.is_empty() { "empty" } else { "empty hidden" }) { (ids.empty_text) }
        table id=[ids.table] class=(if cards.is_empty() { "approvals hidden" } else { "approvals" }) {
            thead {
                tr {
                    th { "Tool (model)" } th { "Context" } th { "Arguments" } th { "Policy's reason" } th { "Caller" }
                    th { "Conversation" } th { "Paused at (approval id)" } th { "Age" } th { "Expires in" } th { "Status" } th { "Decision" }
                }
            }
            tbody {
                @for card in cards { (approval_row(card, csrf)) }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_line_diff_shows_changes_in_hunks_with_context() {
        let old = "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\n";
        let new = "a\nb\nc\nd\nE\nf\ng\nh\ni\nj\nk\n";
        let lines = line_diff(old, new).unwrap();
        assert_eq!(lines[0], DiffLine::Hunk("@@ -2,9 +2,10 @@".into()));
        assert!(lines.contains(&DiffLine::Removed("e".into())));
        assert!(lines.contains(&DiffLine::Added("E".into())));
        assert!(lines.contains(&DiffLine::Added("k".into())));
        assert!(
            !lines.contains(&DiffLine::Same("a".into())),
            "beyond the context"
        );
    }

    #[test]
    fn a_diff_longer_than_a_card_shows_is_too_large() {
        let old: String = (0..MAX_DIFF_LINES).map(|i| format!("old {i}\n")).collect();
        let new: String = (0..MAX_DIFF_LINES).map(|i| format!("new {i}\n")).collect();
        assert_eq!(line_diff(&old, &new), None);
        assert!(line_diff(&old[..60], &new[..60]).is_some());
    }

    #[test]
    fn the_target_is_the_path_url_or_first_string() {
        assert_eq!(
            target(&json!({"content": "x", "path": "a.txt"})).as_deref(),
            Some("a.txt")
        );
        assert_eq!(
            target(&json!({"n": 1, "url": "https://e.test/"})).as_deref(),
            Some("https://e.test/")
        );
        assert_eq!(
            target(&json!({"n": 1, "query": "weather"})).as_deref(),
            Some("weather")
        );
        assert_eq!(target(&json!({"n": 1})), None);
        assert_eq!(target(&json!("raw")), None);
        let long = "é".repeat(300);
        assert_eq!(
            target(&json!({ "path": long })).unwrap().chars().count(),
            201
        );
    }

    #[test]
    fn strings_are_text_with_their_size_and_other_values_compact_json() {
        let page = argument_fields(&json!({
            "content": "line one\nline <two>\n",
            "path": "é.txt",
            "mode": {"append": true},
        }))
        .into_string();
        assert!(
            page.contains("<pre class=\"text\">line one\nline &lt;two&gt;\n</pre>"),
            "{page}"
        );
        assert!(page.contains("20 chars · 20 bytes"), "{page}");
        assert!(page.contains("5 chars · 6 bytes"), "{page}");
        assert!(
            page.contains("<code class=\"json\">{&quot;append&quot;:true}</code>"),
            "{page}"
        );
        let long = "x".repeat(SHOWN_CHARS + 1);
        let folded = argument_fields(&json!({ "content": long })).into_string();
        assert!(folded.contains("<details"), "{folded}");
    }
}
