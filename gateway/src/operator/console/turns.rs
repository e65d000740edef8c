//! A conversation's turns on its timeline: the calls grouped by turn, each turn's one-line summary (number, time,
//! prompt, calls, latency, tokens), prompts repeated word for word, and the index a long conversation gets.

use maud::{html, Markup};
use tower_chat::Message;
use tower_chat_persistence::CallRecord;

use super::format::{count, millis, utc};

/// The calls grouped by turn: a turn begins with a first round (round index 0); a resumed turn's rounds (a
/// paused turn continued after its approval) stay in the turn they continue.
pub(super) fn turns(calls: &[CallRecord]) -> impl Iterator<Item = &[CallRecord]> {
    let mut rest = calls;
    std::iter::from_fn(move || {
        let (_, later) = rest.split_first()?;
        let len = 1 + later.iter().take_while(|c| c.round_index > 0).count();
        let (turn, after) = rest.split_at(len);
        rest = after;
        Some(turn)
    })
}

/// The prompt a turn answers: the last user message its first call sent, whitespace collapsed.
fn prompt(turn: &[CallRecord]) -> Option<String> {
    let first = turn.first()?;
    let text = first.request.messages.iter().rev().find_map(|m| match m {
        Message::User { content } => Some(content.joined_text()),
        _ => None,
    })?;
    Some(text.split_whitespace().collect::<Vec<_>>().join(" "))
}

/// The first `max` characters of `text`, with an ellipsis when it was longer.
fn clipped(text: &str, max: usize) -> String {
    let mut chars = text.chars();
    let head: String = chars.by_ref().take(max).collect();
    if chars.next().is_some() {
        format!("{head}…")
    } else {
        head
    }
}

/// What the timeline says of each turn before it is opened: its number, when, its prompt, and the earlier turn
/// whose prompt it repeats word for word.
pub(super) struct TurnLine {
    pub(super) number: usize,
    started: String,
    prompt: String,
    pub(super) repeats: Option<usize>,
}

/// The turns' lines, repeated prompts found: a client retrying the same question is what an operator looks
/// for in a long conversation.
pub(super) fn turn_lines(turns: &[&[CallRecord]]) -> Vec<TurnLine> {
    let mut first_seen: std::collections::HashMap<String, usize> = Default::default();
    turns
        .iter()
        .enumerate()
        .map(|(i, turn)| {
            let number = i + 1;
            let prompt = prompt(turn).unwrap_or_default();
            let repeats = if prompt.is_empty() {
                None
            } else {
                let first = *first_seen.entry(prompt.clone()).or_insert(number);
                (first != number).then_some(first)
            };
            TurnLine {
                number,
                started: turn.first().map(|c| utc(c.started_at)).unwrap_or_default(),
                prompt,
                repeats,
            }
        })
        .collect()
}

/// A turn's one-line summary (its `<details>`'s `<summary>`): number, prompt, repetition, how many model calls
/// it made, their summed latency and tokens.
pub(super) fn turn_summary(turn: &[CallRecord], line: &TurnLine) -> Markup {
    let (Some(first), Some(last)) = (turn.first(), turn.last()) else {
        return html! {};
    };
    let (input, output) = turn.iter().fold((0, 0), |(i, o), c| {
        (i + c.usage().input_tokens, o + c.usage().output_tokens)
    });
    let calls = turn.len();
    let took = millis(
        last.ended_at
            .duration_since(first.started_at)
            .unwrap_or_default(),
    );
    html! {
        summary {
            h3 class="turn" {
                span class="turn-number" { "Turn " (line.number) }
                " · " (line.started)
                @if !line.prompt.is_empty() {
                    " · " q class="prompt" { (clipped(&line.prompt, 80)) }
                }
                @if let Some(earlier) = line.repeats {
                    " " span class="repeat" data-repeats=(earlier) { "repeats turn " (earlier) }
                }
                " · " (count(calls as u64, "model call", "model calls"))
                " · " (took) " · " (input) " input and " (output) " output tokens"
            }
        }
    }
}

/// Turns shown open when a conversation has at most this many; a longer one shows its last turn open and the
/// others as their summaries, with an index to jump to any of them.
pub(super) const OPEN_TURNS: usize = 3;

/// The index of a long conversation's turns: a link to each, by number (each turn's summary gives its prompt).
pub(super) fn turn_index(lines: &[TurnLine]) -> Markup {
    html! {
        nav class="turn-index" aria-label="Turns" {
            h2 { "Turns" }
            ol {
                @for line in lines {
                    li class=[line.repeats.map(|_| "repeat")] {
                        a href=(format!("#turn-{}", line.number)) { (line.number) }
                    }
                }
            }
        }
    }
}
