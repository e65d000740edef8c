//! [`PolicyScreen`]: the policy's scanned output checks as an [`AnswerScreen`], handed to the recorders inside the
//! layer (in a [`tower_chat::GuardedCall`]) so that they keep of an answer what the client was let see.
//!
//! It decides as the answer's guard does (`stream.rs`): invisible characters removed, the same scanner holding
//! back only what a match may still be completing, a block ending the text with the same notice. A recorder
//! sees each piece before the guard outside it, and hands its text here before keeping it, so a withheld span
//! is never part of what it keeps. Whole-text checks (moderation, a schema, a check of your own) cannot be
//! applied here: they need the answer complete and may call a service.

use std::sync::Arc;

use tower_chat::{AnswerScreen, GuardrailStage, ScreenFactory, Screened};

use crate::invisible::strip;
use crate::policy::{verdict_of_hit, Policy};
use crate::scan::{Budget, Step, StreamScanner};

/// One text of an answer under the policy's scanned output checks.
#[derive(Debug)]
pub(crate) struct PolicyScreen {
    policy: Arc<Policy>,
    scanner: StreamScanner,
    /// Whether any text was let through: a block notice after text starts on a new paragraph, as the guard's.
    sent: bool,
    withheld: bool,
}

impl PolicyScreen {
    /// The factory of screens for `policy`, when it checks the answer's text with scanned checks.
    pub(crate) fn factory(policy: &Arc<Policy>) -> Option<ScreenFactory> {
        if policy.output.scan.is_empty() {
            return None;
        }
        let policy = policy.clone();
        Some(Arc::new(move || {
            Box::new(PolicyScreen {
                scanner: StreamScanner::new(
                    policy.output.scan.clone(),
                    Budget::new(policy.max_candidates),
                ),
                policy: policy.clone(),
                sent: false,
                withheld: false,
            }) as Box<dyn AnswerScreen>
        }))
    }

    fn screened(&mut self, step: Step) -> Screened {
        let verdicts = step
            .hits
            .iter()
            .map(|hit| verdict_of_hit(hit, GuardrailStage::Output, "output", 0))
            .collect();
        let mut text = step.text;
        let withheld = step.block.map(|block| {
            self.withheld = true;
            let notice = self.policy.block_notice(&block.name);
            if self.sent || !text.is_empty() {
                text.push_str("\n\n");
            }
            text.push_str(&notice);
            block.name.to_string()
        });
        self.sent |= !text.is_empty();
        Screened {
            text,
            verdicts,
            withheld,
        }
    }
}

impl AnswerScreen for PolicyScreen {
    fn push(&mut self, piece: &str) -> Screened {
        if self.withheld {
            return Screened::default();
        }
        let step = self.scanner.push(&strip(piece));
        self.screened(step)
    }

    fn finish(&mut self) -> Screened {
        if self.withheld {
            return Screened::default();
        }
        let step = self.scanner.finish();
        self.screened(step)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::Check;
    use crate::policy::DEFAULT_MAX_CANDIDATES;

    fn policy() -> Arc<Policy> {
        Arc::new(Policy::new(
            vec![Check::secrets(), Check::personal_data()],
            "[withheld: {check}]".into(),
            DEFAULT_MAX_CANDIDATES,
        ))
    }

    fn run(pieces: &[&str], finish: bool) -> (String, Vec<String>, Option<String>) {
        let mut screen = PolicyScreen::factory(&policy()).unwrap()();
        let mut all = Screened::default();
        let mut steps: Vec<_> = pieces.iter().map(|piece| screen.push(piece)).collect();
        if finish {
            steps.push(screen.finish());
        }
        for step in steps {
            all.text.push_str(&step.text);
            all.verdicts.extend(step.verdicts);
            all.withheld = all.withheld.or(step.withheld);
        }
        let details = all
            .verdicts
            .iter()
            .map(|v| format!("{}:{}", v.action, v.detail.as_deref().unwrap_or("")))
            .collect();
        (all.text, details, all.withheld)
    }

    #[test]
    fn a_redaction_is_kept_redacted_and_a_block_keeps_only_the_text_before_it() {
        let (text, verdicts, withheld) = run(&["mail ann@exam", "ple.net now"], true);
        assert_eq!(text, "mail [REDACTED:email] now");
        assert_eq!(verdicts, ["redact:email"]);
        assert_eq!(withheld, None);

        let (text, verdicts, withheld) =
            run(&["the key is AKIAIOSF", "ODNN7EXAMPLE and more"], true);
        assert_eq!(text, "the key is \n\n[withheld: secrets]");
        assert_eq!(verdicts, ["block:aws_access_key"]);
        assert_eq!(withheld.as_deref(), Some("secrets"));
    }

    #[test]
    fn what_is_held_back_when_the_text_is_cut_is_not_let_through() {
        // The client's stream was dropped here: the start of a key it never saw is not kept either.
        let (text, _, withheld) = run(&["the key is AKIAIOSF"], false);
        assert!(!text.contains("AKIA"), "{text}");
        assert_eq!(withheld, None);
    }
}
