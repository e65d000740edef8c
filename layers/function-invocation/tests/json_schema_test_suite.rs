//! The official JSON-Schema-Test-Suite (drafts 7 and 2020-12, every required keyword file; vendored in
//! `tests/data/json-schema-test-suite`) against `schema::Schema`.
//!
//! Every case either passes or is listed in `tests/data/known_failures.txt` with its reason, and the list stays
//! true: the test fails when an unlisted case fails, when a listed case passes, when a case fails otherwise than
//! listed (refused at compile vs. a wrong answer), or when an entry names no case.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::Value;
use tower_chat_function_invocation::schema::Schema;

const SUITE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/data/json-schema-test-suite"
);
const KNOWN_FAILURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/known_failures.txt");

/// The suite's folder per draft, and the `$schema` a group's schema is read under when it names none (the
/// suite leaves the draft to the runner; the validator reads no `$schema` as 2020-12).
const DRAFTS: [(&str, &str); 2] = [
    ("draft7", "http://json-schema.org/draft-07/schema#"),
    (
        "draft2020-12",
        "https://json-schema.org/draft/2020-12/schema",
    ),
];

/// How a case failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Failure {
    /// The schema did not compile (a keyword or reference the validator does not support).
    Refused,
    /// The schema compiled and the answer was wrong.
    Wrong,
}

impl Failure {
    fn parse(text: &str) -> Option<Failure> {
        match text {
            "refused" => Some(Failure::Refused),
            "wrong" => Some(Failure::Wrong),
            _ => None,
        }
    }
}

/// `draft/file.json`, group description, case description.
type CaseKey = (String, String, String);

/// One entry of the list: a case, or (case `*`) every case of a group.
struct Listed {
    line: usize,
    key: CaseKey,
    failure: Failure,
    matched: bool,
}

fn known_failures() -> Vec<Listed> {
    let text = std::fs::read_to_string(KNOWN_FAILURES).expect("the known failures file");
    let mut listed = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line_number = index + 1;
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split(" | ").map(str::trim).collect();
        let [file, group, case, failure, reason] = fields[..] else {
            panic!("known_failures.txt:{line_number}: expected `file | group | case | refused|wrong | reason`");
        };
        let failure = Failure::parse(failure).unwrap_or_else(|| {
            panic!("known_failures.txt:{line_number}: `{failure}` is neither `refused` nor `wrong`")
        });
        assert!(
            !reason.is_empty(),
            "known_failures.txt:{line_number}: every entry gives its reason"
        );
        listed.push(Listed {
            line: line_number,
            key: (file.to_owned(), group.to_owned(), case.to_owned()),
            failure,
            matched: false,
        });
    }
    listed
}

fn suite_files(draft: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(Path::new(SUITE).join(draft))
        .expect("the vendored suite")
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
}

/// Every case of the suite: its key, and how it failed (`None`: it passed).
fn run_suite() -> Vec<(CaseKey, Option<Failure>)> {
    let mut outcomes = Vec::new();
    for (draft, dialect) in DRAFTS {
        for path in suite_files(draft) {
            let file = format!(
                "{draft}/{}",
                path.file_name().unwrap().to_str().expect("a UTF-8 name")
            );
            let text = std::fs::read_to_string(&path).expect("a suite file");
            let groups: Vec<Value> = serde_json::from_str(&text).expect("a JSON suite file");
            for group in groups {
                let description = group["description"].as_str().expect("a group description");
                let mut schema = group["schema"].clone();
                if let Value::Object(map) = &mut schema {
                    map.entry("$schema").or_insert_with(|| Value::from(dialect));
                }
                let compiled = Schema::compile(&schema);
                for case in group["tests"].as_array().expect("a group's tests") {
                    let key = (
                        file.clone(),
                        description.to_owned(),
                        case["description"]
                            .as_str()
                            .expect("a case description")
                            .to_owned(),
                    );
                    let expected = case["valid"].as_bool().expect("a case's `valid`");
                    let outcome = match &compiled {
                        Err(_) => Some(Failure::Refused),
                        Ok(schema) => {
                            let data = &case["data"];
                            let valid = schema.is_valid(data);
                            // The collecting walk must agree with the quiet one.
                            assert_eq!(
                                schema.validate(data).is_ok(),
                                valid,
                                "{key:?}: `validate` and `is_valid` disagree"
                            );
                            (valid != expected).then_some(Failure::Wrong)
                        }
                    };
                    outcomes.push((key, outcome));
                }
            }
        }
    }
    outcomes
}

#[test]
fn official_suite_passes_except_listed_cases() {
    let mut listed = known_failures();
    let outcomes = run_suite();
    let mut problems = String::new();
    // Per draft: (cases, passed, listed).
    let mut counts: BTreeMap<&str, (usize, usize, usize)> = BTreeMap::new();
    for ((file, group, case), outcome) in &outcomes {
        let draft = DRAFTS
            .iter()
            .map(|(draft, _)| *draft)
            .find(|draft| file.starts_with(&format!("{draft}/")))
            .expect("a known draft");
        let count = counts.entry(draft).or_default();
        count.0 += 1;
        let entry = listed.iter_mut().find(|l| {
            l.key.0 == *file && l.key.1 == *group && (l.key.2 == *case || l.key.2 == "*")
        });
        match (outcome, entry) {
            (None, None) => count.1 += 1,
            (Some(failure), Some(entry)) if *failure == entry.failure => {
                entry.matched = true;
                count.2 += 1;
            }
            (Some(failure), Some(entry)) => {
                entry.matched = true;
                let _ = writeln!(
                    problems,
                    "{file} | {group} | {case}: {failure:?}, listed (line {}) as {:?}",
                    entry.line, entry.failure
                );
            }
            (Some(failure), None) => {
                let _ = writeln!(
                    problems,
                    "{file} | {group} | {case}: {failure:?}, not listed"
                );
            }
            (None, Some(entry)) => {
                entry.matched = true;
                let _ = writeln!(
                    problems,
                    "{file} | {group} | {case}: passes, but line {} lists it: remove it from the list",
                    entry.line
                );
            }
        }
    }
    for entry in listed.iter().filter(|l| !l.matched) {
        let _ = writeln!(
            problems,
            "known_failures.txt:{}: {:?} names no case of the suite",
            entry.line, entry.key
        );
    }
    for (draft, (cases, passed, failing)) in &counts {
        println!("{draft}: {cases} cases, {passed} pass, {failing} listed");
    }
    assert!(
        problems.is_empty(),
        "the suite and the list disagree:\n{problems}"
    );
    assert_eq!(counts.len(), DRAFTS.len(), "every draft's files were found");
}
