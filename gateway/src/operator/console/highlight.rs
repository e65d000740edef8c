//! Where a word search matched: the message of a found call that holds the search's words, a snippet of it with
//! the matching words marked (the call log), and the same marks in the timeline's message the snippet links to.
//!
//! The store's full-text index says which calls match, not where (SQLite's index keeps no text, PostgreSQL's
//! keeps lexemes): the match is found again here, in the call's messages, the way the index reads them: words
//! are runs of letters and digits, and a search word matches the words that begin with it, case-insensitively.

use maud::{html, Markup};
use tower_chat::Message;
use tower_chat_persistence::CallRecord;

/// Characters of a snippet before its first marked word.
const BEFORE: usize = 60;
/// Characters of a snippet in all.
const SNIPPET_CHARS: usize = 180;

/// A search's words as prefixes to match, lowercased.
pub(crate) fn prefixes(search: &str) -> Vec<String> {
    tower_chat_persistence::search_words(search)
        .map(str::to_lowercase)
        .collect()
}

/// The words of `text` with their byte ranges.
fn words(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut start = None;
    let mut out = Vec::new();
    for (at, c) in text.char_indices().chain([(text.len(), ' ')]) {
        match (c.is_alphanumeric(), start) {
            (true, None) => start = Some(at),
            (false, Some(from)) => {
                out.push((from, &text[from..at]));
                start = None;
            }
            _ => {}
        }
    }
    out.into_iter()
}

/// Which of `prefixes` the word begins with, if any.
fn matches(word: &str, prefixes: &[String]) -> Option<usize> {
    let word = word.to_lowercase();
    prefixes.iter().position(|p| word.starts_with(p.as_str()))
}

/// `text` with every word that begins with one of `prefixes` in a `<mark>`.
pub(crate) fn marked(text: &str, prefixes: &[String]) -> Markup {
    if prefixes.is_empty() {
        return html! { (text) };
    }
    let mut pieces: Vec<(&str, bool)> = Vec::new();
    let mut done = 0;
    for (at, word) in words(text) {
        if matches(word, prefixes).is_some() {
            pieces.push((&text[done..at], false));
            pieces.push((word, true));
            done = at + word.len();
        }
    }
    pieces.push((&text[done..], false));
    html! {
        @for (piece, hit) in pieces {
            @if hit { mark { (piece) } } @else { (piece) }
        }
    }
}

/// A message's text as the index reads it.
fn message_text(message: &Message) -> std::borrow::Cow<'_, str> {
    match message {
        Message::System { content } | Message::User { content } => content.joined_text(),
        Message::Tool(tool) => tool.content.joined_text(),
        Message::Assistant(answer) => std::borrow::Cow::Borrowed(answer.content.as_str()),
    }
}

/// Where a found call matched: the index of the message in its history (request, then response messages) and a
/// snippet of it with the matching words marked.
#[derive(Debug)]
pub(crate) struct Hit {
    pub(crate) index: usize,
    pub(crate) snippet: Markup,
}

/// The message of `record` that matches most of `prefixes` (the first of those), among the messages the index
/// holds for it: those it sent after its history's last answer, and those it produced.
pub(crate) fn hit(record: &CallRecord, prefixes: &[String]) -> Option<Hit> {
    if prefixes.is_empty() {
        return None;
    }
    let request = record.request.messages.as_slice();
    let new_input = request
        .iter()
        .rposition(|m| matches!(m, Message::Assistant(_)))
        .map_or(0, |last| last + 1);
    let candidates = request.iter().enumerate().skip(new_input).chain(
        record
            .response
            .messages
            .iter()
            .enumerate()
            .map(|(i, m)| (request.len() + i, m)),
    );
    let mut best: Option<(usize, usize, std::borrow::Cow<'_, str>)> = None;
    for (index, message) in candidates {
        let text = message_text(message);
        let mut found = vec![false; prefixes.len()];
        for (_, word) in words(&text) {
            if let Some(p) = matches(word, prefixes) {
                found[p] = true;
            }
        }
        let score = found.iter().filter(|f| **f).count();
        if score > 0 && best.as_ref().is_none_or(|(s, _, _)| score > *s) {
            best = Some((score, index, text));
        }
    }
    let (_, index, text) = best?;
    Some(Hit {
        index,
        snippet: snippet(&text, prefixes),
    })
}

/// Up to [`SNIPPET_CHARS`] characters of `text` around its first matching word, marked, with an ellipsis where
/// it was cut; whitespace collapsed.
fn snippet(text: &str, prefixes: &[String]) -> Markup {
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let first = words(&text)
        .find(|(_, w)| matches(w, prefixes).is_some())
        .map_or(0, |(at, _)| at);
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let first_char = chars.iter().position(|(at, _)| *at >= first).unwrap_or(0);
    let start = first_char.saturating_sub(BEFORE);
    let end = (start + SNIPPET_CHARS).min(chars.len());
    let byte = |i: usize| chars.get(i).map_or(text.len(), |(at, _)| *at);
    let window = &text[byte(start)..byte(end)];
    html! {
        @if start > 0 { "…" }
        (marked(window, prefixes))
        @if end < chars.len() { "…" }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_beginning_with_a_search_word_are_marked_and_others_are_not() {
        let words = prefixes("zanzib, WARM");
        assert_eq!(words, ["zanzib", "warm"]);
        assert_eq!(
            marked("Is Zanzibar warm? Not lukewarm <b>.", &words).into_string(),
            "Is <mark>Zanzibar</mark> <mark>warm</mark>? Not lukewarm &lt;b&gt;."
        );
        assert_eq!(
            marked("a <tag>", &[]).into_string(),
            "a &lt;tag&gt;",
            "escaped without a search"
        );
    }

    #[test]
    fn a_snippet_is_cut_around_the_first_match() {
        let text = format!(
            "{} Zanzibar is warm {}",
            "lead ".repeat(40),
            "tail ".repeat(60)
        );
        let shown = snippet(&text, &prefixes("zanzibar")).into_string();
        assert!(shown.starts_with('…') && shown.ends_with('…'), "{shown}");
        assert!(shown.contains("<mark>Zanzibar</mark> is warm"), "{shown}");
        let short = snippet("only  Zanzibar\nhere", &prefixes("zan")).into_string();
        assert_eq!(short, "only <mark>Zanzibar</mark> here");
    }
}
