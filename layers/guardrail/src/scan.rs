//! Scanning text that arrives in pieces, with the same verdicts and the same redacted text as scanning it whole.
//!
//! Every built-in check is a [`Finder`]: a search for the leftmost match at or after a position, whose matches are
//! at most [`Finder::max_len`] bytes long and made only of the bytes [`Finder::may_contain`] admits. Those two
//! facts bound what a stream must hold back: a match that is not finished yet must reach the end of the text
//! received so far, so it starts within `max_len` bytes of that end *and* inside the trailing run of admissible
//! bytes. Everything before that point is decided — its matches are final, whatever comes next — and the scanner
//! emits it (redacted); the rest waits for the next piece. For most text the trailing run is the last partial word,
//! so a stream holds back a few bytes, not `max_len`.
//!
//! Why by hand: the `regex` crate searches a whole haystack and has no resumable search over pieces; its
//! lower-level automata could be fed piece by piece, but the finders also validate candidates (Luhn, mod-97) and
//! need the same hold-back rule, which this module states once for all of them.
//!
//! Block verdicts end the text: the earliest-starting block span wins (ties: the check listed first), and the
//! text is cut at its start once every check has decided up to there, so the cut does not depend on how the text
//! was split either.

use std::fmt;
use std::sync::Arc;

use tower_chat::{GuardrailAction, TextSpan};

/// A match: byte offsets in the haystack searched, and what kind of thing it is (`email`, `openai_key`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Found {
    pub(crate) start: usize,
    pub(crate) end: usize,
    pub(crate) kind: &'static str,
}

/// A search stopped because it examined as many candidates as it was allowed: `at` is the start (in the
/// haystack) of the first candidate it did not examine; the text before it holds no match of the finder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Exhausted {
    pub(crate) at: usize,
}

/// A search for matches of bounded length over a bounded set of bytes (see the module docs).
pub(crate) trait Finder: Send + Sync + fmt::Debug {
    /// The most bytes a match spans.
    fn max_len(&self) -> usize;
    /// Whether a match may contain `byte`.
    fn may_contain(&self, byte: u8) -> bool;
    /// The leftmost match starting at or after `from` in `haystack`, whose first byte is at offset `base` of the
    /// whole text. Text before `from` is context (look-behind of `\b`), never part of a match. Each candidate
    /// examined (a pattern match a validator then looks at) takes one from `allowance`; with none left before a
    /// match is found, the search stops with [`Exhausted`].
    fn find(
        &self,
        haystack: &str,
        from: usize,
        base: usize,
        allowance: &mut usize,
    ) -> Result<Option<Found>, Exhausted>;
    /// Whether a match may start in one text segment and end in the next (answer text on both sides of a tool
    /// call). A length counts each segment on its own.
    fn spans_segments(&self) -> bool {
        true
    }
}

/// The verdict detail of a check that ran out of its work budget ([`Budget`]).
pub(crate) const OVER_BUDGET: &str = "max_candidates";

/// How many candidate matches each rule of a stage may examine over one request (every text it carries) or one
/// answer (every segment, tool call and result). Past it the rule blocks where its search stood: a text the
/// check could not finish examining does not go on (failing closed), and the work per request stays bounded
/// whatever the text — each candidate costs at most its pattern's longest match to validate.
#[derive(Clone, Debug)]
pub(crate) struct Budget {
    limit: usize,
    spent: Vec<usize>,
}

impl Default for Budget {
    fn default() -> Self {
        Budget::new(usize::MAX)
    }
}

impl Budget {
    pub(crate) fn new(limit: usize) -> Self {
        Budget {
            limit,
            spent: Vec::new(),
        }
    }

    fn left(&self, rule: usize) -> usize {
        self.limit
            .saturating_sub(self.spent.get(rule).copied().unwrap_or(0))
    }

    fn spend(&mut self, rule: usize, count: usize) {
        if self.spent.len() <= rule {
            self.spent.resize(rule + 1, 0);
        }
        self.spent[rule] += count;
    }

    /// Candidates examined so far, over every rule.
    pub(crate) fn spent(&self) -> usize {
        self.spent.iter().sum()
    }
}

/// One check's finders with its name and action, as the scanner runs them.
#[derive(Clone, Debug)]
pub(crate) struct ScanRule {
    pub(crate) name: Arc<str>,
    pub(crate) action: GuardrailAction,
    pub(crate) finders: Vec<Arc<dyn Finder>>,
}

/// A finished match of one rule, in offsets of the whole text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Hit {
    /// The rule's position in the policy (its priority on ties).
    pub(crate) rule: usize,
    pub(crate) name: Arc<str>,
    pub(crate) action: GuardrailAction,
    pub(crate) span: TextSpan,
    pub(crate) kind: &'static str,
}

/// What one step of the scanner lets through.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Step {
    /// Text that may go on (redacted); empty when nothing was decided.
    pub(crate) text: String,
    /// Every hit decided in this step, in text order.
    pub(crate) hits: Vec<Hit>,
    /// The hit that ends the text, if a block was decided; `text` stops before its span.
    pub(crate) block: Option<Hit>,
}

#[derive(Debug)]
struct FinderState {
    rule: usize,
    finder: Arc<dyn Finder>,
    /// Every match starting before this offset (of the whole text) is known.
    decided: usize,
    /// The rule's budget ran out: this finder searches no more.
    exhausted: bool,
}

/// A scanner over one text delivered in pieces.
#[derive(Debug)]
pub(crate) struct StreamScanner {
    rules: Arc<[ScanRule]>,
    finders: Vec<FinderState>,
    /// The text from `buf_base` on: context before the undecided part, then the undecided part.
    buf: String,
    buf_base: usize,
    /// Text before this offset went on (or was dropped with a block).
    emitted: usize,
    hits: Vec<Hit>,
    /// A block was decided: nothing more goes on.
    blocked: bool,
    /// The text at the start of `buf` that an earlier segment already judged and let through: matches that
    /// end in it are not reported again; those that run on past it are.
    carried: usize,
    budget: Budget,
    /// Where a check ran out of its budget: the text is cut there, so no finder searches past it.
    stop_at: Option<usize>,
}

/// Look-behind kept before the undecided text: one UTF-8 character is all `\b` looks at.
const CONTEXT: usize = 4;

impl StreamScanner {
    pub(crate) fn new(rules: Arc<[ScanRule]>, budget: Budget) -> Self {
        StreamScanner::continuing(rules, "", budget)
    }

    /// A scanner of a new segment that goes on from `carried`, the end of the previous one (already let
    /// through), so a match split between the two is found; the offsets of its hits count from `carried`'s start.
    pub(crate) fn continuing(rules: Arc<[ScanRule]>, carried: &str, budget: Budget) -> Self {
        let finders = rules
            .iter()
            .enumerate()
            .flat_map(|(rule, r)| {
                r.finders.iter().map(move |finder| FinderState {
                    rule,
                    finder: finder.clone(),
                    decided: if finder.spans_segments() {
                        0
                    } else {
                        carried.len()
                    },
                    exhausted: false,
                })
            })
            .collect();
        StreamScanner {
            rules,
            finders,
            buf: carried.to_owned(),
            buf_base: 0,
            emitted: carried.len(),
            hits: Vec::new(),
            blocked: false,
            carried: carried.len(),
            budget,
            stop_at: None,
        }
    }

    /// The budget, with what this scanner spent, for the next scanner of the same request or answer.
    pub(crate) fn take_budget(&mut self) -> Budget {
        std::mem::take(&mut self.budget)
    }

    /// Bytes received but not let through yet.
    pub(crate) fn held(&self) -> usize {
        self.buf_base + self.buf.len() - self.emitted
    }

    /// Add the next piece; returns what is now decided.
    pub(crate) fn push(&mut self, piece: &str) -> Step {
        if self.blocked {
            return Step::default();
        }
        self.buf.push_str(piece);
        self.advance(false)
    }

    /// The text is complete: decide the rest.
    pub(crate) fn finish(&mut self) -> Step {
        if self.blocked {
            return Step::default();
        }
        self.advance(true)
    }

    /// Scan a whole text at once, spending from `budget`.
    pub(crate) fn scan_whole(rules: Arc<[ScanRule]>, text: &str, budget: &mut Budget) -> Step {
        let mut scanner = StreamScanner::new(rules, std::mem::take(budget));
        scanner.buf.push_str(text);
        let step = scanner.advance(true);
        *budget = scanner.take_budget();
        step
    }

    fn advance(&mut self, last: bool) -> Step {
        let end = self.buf_base + self.buf.len();
        for state in &mut self.finders {
            let hold_from = if last {
                end
            } else {
                self.buf_base + hold_start(&self.buf, &*state.finder)
            }
            .min(self.stop_at.unwrap_or(usize::MAX));
            // A finder that counts each segment on its own (a length) sees the text from the segment's start.
            let (skip, origin) = if state.finder.spans_segments() {
                (0, 0)
            } else {
                (self.carried.saturating_sub(self.buf_base), self.carried)
            };
            let haystack = &self.buf[skip..];
            let start = self.buf_base + skip;
            while state.decided < hold_from {
                if state.exhausted {
                    state.decided = hold_from;
                    break;
                }
                let from = state.decided - start;
                let mut allowance = self.budget.left(state.rule);
                let before = allowance;
                let found = state
                    .finder
                    .find(haystack, from, start - origin, &mut allowance);
                self.budget.spend(state.rule, before - allowance);
                let rule = &self.rules[state.rule];
                match found {
                    Ok(Some(found)) if start + found.start < hold_from => {
                        let span = TextSpan {
                            start: start + found.start,
                            end: start + found.end,
                        };
                        // A match that ends in the carried text was reported with the segment before.
                        if span.end > self.carried {
                            self.hits.push(Hit {
                                rule: state.rule,
                                name: rule.name.clone(),
                                action: rule.action,
                                span,
                                kind: found.kind,
                            });
                        }
                        // Matches do not overlap within one finder; an empty match moves one character on.
                        state.decided = if found.end > found.start {
                            span.end
                        } else {
                            span.start + next_char_len(haystack, found.start)
                        };
                    }
                    Ok(_) => state.decided = hold_from,
                    Err(Exhausted { at }) => {
                        // Out of budget: what this finder did not examine does not go on, whatever the action.
                        let at = start + at;
                        self.hits.push(Hit {
                            rule: state.rule,
                            name: rule.name.clone(),
                            action: GuardrailAction::Block,
                            span: TextSpan { start: at, end: at },
                            kind: OVER_BUDGET,
                        });
                        state.exhausted = true;
                        state.decided = hold_from.min(at);
                        self.stop_at = Some(self.stop_at.map_or(at, |stop| stop.min(at)));
                    }
                }
            }
        }
        let decided = self.finders.iter().map(|f| f.decided).min().unwrap_or(end);
        let step = self.release(decided);
        self.trim();
        step
    }

    /// Let through the text before `decided` that no unfinished redaction crosses, or cut at a decided block.
    fn release(&mut self, decided: usize) -> Step {
        self.hits
            .sort_by_key(|hit| (hit.span.start, hit.rule, hit.span.end));
        // The earliest block is decided once every finder knows its matches up to its start (a match of a check
        // listed earlier could still start at the same offset until then).
        // A cut for an exhausted budget is decided once every finder reached it (none searches past it).
        let block = self
            .hits
            .iter()
            .find(|hit| hit.action == GuardrailAction::Block)
            .filter(|hit| {
                hit.span.start < decided || (hit.kind == OVER_BUDGET && hit.span.start <= decided)
            })
            .cloned();
        let mut to = match &block {
            Some(hit) => hit.span.start,
            None => decided,
        };
        // A redaction that crosses the cut moves the cut to its start (and so does any it overlaps).
        loop {
            let crossing = self
                .hits
                .iter()
                .filter(|hit| hit.action == GuardrailAction::Redact)
                .filter(|hit| hit.span.start < to && hit.span.end > to)
                .map(|hit| hit.span.start)
                .min();
            match crossing {
                Some(start) => to = start,
                None => break,
            }
        }
        let to = to.max(self.emitted);
        let taken: Vec<Hit> = {
            let (before, after): (Vec<Hit>, Vec<Hit>) = std::mem::take(&mut self.hits)
                .into_iter()
                .partition(|hit| hit.span.start < to);
            self.hits = after;
            before
        };
        let text = self.redacted(self.emitted, to, &taken);
        self.emitted = to;
        let mut hits = taken;
        if let Some(block) = &block {
            self.blocked = true;
            self.hits.clear();
            if !hits.contains(block) {
                hits.push(block.clone());
            }
        }
        Step { text, hits, block }
    }

    /// The text of `[from, to)` with every redaction span in it replaced by its label (overlapping spans merged
    /// under the first one's label).
    fn redacted(&self, from: usize, to: usize, hits: &[Hit]) -> String {
        let text = &self.buf[from - self.buf_base..to - self.buf_base];
        let mut out = String::with_capacity(text.len());
        let mut at = from;
        let mut redactions = hits
            .iter()
            .filter(|hit| hit.action == GuardrailAction::Redact)
            .peekable();
        while let Some(hit) = redactions.next() {
            let (start, mut stop) = (hit.span.start.max(at), hit.span.end);
            while let Some(next) = redactions.peek() {
                if next.span.start < stop {
                    stop = stop.max(next.span.end);
                    redactions.next();
                } else {
                    break;
                }
            }
            if stop <= at {
                continue;
            }
            out.push_str(&self.buf[at - self.buf_base..start - self.buf_base]);
            out.push_str("[REDACTED:");
            out.push_str(label(hit));
            out.push(']');
            at = stop;
        }
        out.push_str(&self.buf[at - self.buf_base..to - self.buf_base]);
        out
    }

    /// Drop text nobody needs any more, keeping a little look-behind before the undecided part.
    fn trim(&mut self) {
        let keep = self
            .finders
            .iter()
            .map(|f| f.decided)
            .min()
            .unwrap_or(self.emitted)
            .min(self.emitted)
            .saturating_sub(CONTEXT)
            .max(self.buf_base);
        let mut cut = keep - self.buf_base;
        while !self.buf.is_char_boundary(cut) {
            cut -= 1;
        }
        if cut > 0 {
            self.buf.drain(..cut);
            self.buf_base += cut;
        }
    }
}

/// What a redaction writes: the kind of thing found, else the check's name.
pub(crate) fn label(hit: &Hit) -> &str {
    if hit.kind.is_empty() {
        &hit.name
    } else {
        hit.kind
    }
}

/// Where an unfinished match of `finder` could start in `buf`: within `max_len` of the end, inside the trailing
/// run of bytes a match may contain; rounded down to a character boundary.
fn hold_start(buf: &str, finder: &dyn Finder) -> usize {
    let bytes = buf.as_bytes();
    let floor = bytes.len().saturating_sub(finder.max_len());
    let mut start = bytes.len();
    while start > floor && finder.may_contain(bytes[start - 1]) {
        start -= 1;
    }
    while !buf.is_char_boundary(start) {
        start -= 1;
    }
    start
}

fn next_char_len(buf: &str, at: usize) -> usize {
    buf[at..].chars().next().map_or(1, char::len_utf8)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::Check;
    use crate::policy::Policy;

    fn personal_data() -> Arc<[ScanRule]> {
        Policy::new(vec![Check::personal_data()], Arc::from(""), 0)
            .request
            .scan
            .clone()
    }

    #[test]
    fn the_candidates_examined_stop_at_the_budget_and_the_text_is_cut_where_the_search_stood() {
        // Every `AB12` starts an IBAN candidate that fails mod-97.
        let text = "AB12 ".repeat(2_000);
        let mut budget = Budget::new(500);
        let step = StreamScanner::scan_whole(personal_data(), &text, &mut budget);
        assert_eq!(budget.spent(), 500, "one rule, every candidate counted");
        let block = step.block.expect("blocked past the budget");
        assert_eq!(
            (block.kind, block.action),
            (OVER_BUDGET, GuardrailAction::Block)
        );
        // Cut at the first candidate not examined: 500 words of five bytes were.
        assert_eq!(block.span.start, 500 * 5);
        assert_eq!(step.text, text[..block.span.start]);

        // Within the budget the same shape passes whole, and the count is what it examined.
        let mut budget = Budget::new(usize::MAX);
        let step = StreamScanner::scan_whole(personal_data(), &text[..500], &mut budget);
        assert!(step.block.is_none());
        assert!(budget.spent() <= 100, "{}", budget.spent());
    }
}
