//! What the guardrail's pattern checks cost on a streamed answer: per text delta for each built-in check and for a
//! five-check policy, the scan of 10 KB / 100 KB / 1 MB answers (linear time), and how much text each holds back.
//!
//! ```sh
//! cargo bench -p tower-chat-guardrail --bench scan                 # criterion timings
//! GUARDRAIL_HOLDBACK=1 target/release/deps/scan-* --bench          # held-back bytes per check (a table)
//! # instructions, by callgrind: the slope between two delta counts removes start-up and exit
//! GUARDRAIL_COUNT=policy GUARDRAIL_DELTAS=2000 valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!     target/release/deps/scan-* --bench
//! GUARDRAIL_COUNT=policy GUARDRAIL_BYTES=1000000 valgrind --tool=callgrind ...   # a whole answer of that size
//! ```
//! Variants: `none` (deltas copied, no check), `secrets`, `personal_data`, `deny_list`, `pattern`,
//! `output_length`, `policy` (all five).
//!
//! A body of near misses — `AB12 ` repeated, every word an IBAN candidate that fails mod-97, the costliest text
//! for `personal_data` — scanned whole at two sizes, with the layer's default work budget and without one:
//! ```sh
//! GUARDRAIL_NEAR_MISSES=400000|3800000 [GUARDRAIL_BUDGET=none|<n>] <binary> --bench    # CPU, candidates
//! GUARDRAIL_NEAR_MISSES=400000 valgrind --tool=callgrind --callgrind-out-file=/dev/null <binary> --bench
//! ```

use std::hint::black_box;

use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};
use tower_chat_guardrail::bench_support::{self, OutputScanner};
use tower_chat_guardrail::Check;

/// A typical answer: prose with numbers, an email and a phone number.
const PARAGRAPH: &str =
    "The quarterly report shows revenue of 4.2 million, up 12% from last year. \
Contact the finance team at finance-team@example.com or call +1 415 555 0100 for details. \
Operating costs rose by 3% while the headcount stayed at 214 people across 6 offices. \
The board will review the plan on 14 March; questions go to the usual channel. ";

fn checks(variant: &str) -> Vec<Check> {
    let deny = || Check::deny_list("topics", ["project zeus", "red team", "layoffs"]).unwrap();
    let pattern = || {
        Check::pattern("ticket", r"TCK-[0-9]{4,8}")
            .unwrap()
            .redact()
    };
    match variant {
        "none" => Vec::new(),
        "secrets" => vec![Check::secrets()],
        "personal_data" => vec![Check::personal_data()],
        "deny_list" => vec![deny()],
        "pattern" => vec![pattern()],
        "output_length" => vec![Check::output_length(usize::MAX / 2)],
        "policy" => vec![
            Check::secrets(),
            Check::personal_data(),
            deny(),
            pattern(),
            Check::output_length(usize::MAX / 2),
        ],
        other => panic!("unknown variant {other}"),
    }
}

const VARIANTS: [&str; 7] = [
    "none",
    "secrets",
    "personal_data",
    "deny_list",
    "pattern",
    "output_length",
    "policy",
];

/// The paragraph as a model streams it: a token per delta, the space before a word in its delta (` report`), so
/// a delta usually ends inside a word.
fn tokens() -> impl Iterator<Item = &'static str> + Clone {
    let starts: Vec<usize> = std::iter::once(0)
        .chain(PARAGRAPH.match_indices(' ').map(|(at, _)| at))
        .chain(std::iter::once(PARAGRAPH.len()))
        .collect();
    let pieces: Vec<&'static str> = starts
        .windows(2)
        .map(|w| &PARAGRAPH[w[0]..w[1]])
        .filter(|piece| !piece.is_empty())
        .collect();
    pieces.into_iter()
}

/// `bytes` of answer text in token-sized deltas.
fn deltas(bytes: usize) -> Vec<&'static str> {
    tokens()
        .cycle()
        .scan(0, |total, token| {
            (*total < bytes).then(|| {
                *total += token.len();
                token
            })
        })
        .collect()
}

/// Scan `deltas` as one answer with `checks` (built once: compiling the patterns is a cost of building the layer,
/// not of a call); the bytes let through (so nothing is optimised away).
fn scan(checks: &[Check], deltas: &[&str]) -> usize {
    let mut scanner = OutputScanner::new(checks.to_vec());
    let mut out = 0;
    for delta in deltas {
        out += scanner.push(black_box(delta)).0;
    }
    out + scanner.finish().0
}

fn per_delta(c: &mut Criterion) {
    let text = deltas(4096);
    let mut group = c.benchmark_group("guardrail_per_delta");
    group.throughput(Throughput::Elements(text.len() as u64));
    for variant in VARIANTS {
        let checks = checks(variant);
        group.bench_function(variant, |b| b.iter(|| scan(&checks, &text)));
    }
    group.finish();
}

fn linear(c: &mut Criterion) {
    let mut group = c.benchmark_group("guardrail_answer_size");
    group.sample_size(10);
    let checks = checks("policy");
    for bytes in [10_000, 100_000, 1_000_000] {
        let text = deltas(bytes);
        group.throughput(Throughput::Bytes(bytes as u64));
        group.bench_with_input(BenchmarkId::new("policy", bytes), &text, |b, text| {
            b.iter(|| scan(&checks, text))
        });
    }
    group.finish();
}

/// How much text each variant holds back after each delta of the typical answer, and how many deltas the first
/// text waits for.
fn holdback_table() {
    let text = deltas(4096);
    println!("| check | mean held (bytes) | max held (bytes) | deltas before the first text |");
    println!("|---|---:|---:|---:|");
    for variant in VARIANTS {
        let mut scanner = OutputScanner::new(checks(variant));
        let (mut sum, mut max, mut first) = (0, 0, None);
        for (i, delta) in text.iter().enumerate() {
            let released = scanner.push(delta).0;
            if released > 0 && first.is_none() {
                first = Some(i);
            }
            sum += scanner.held();
            max = max.max(scanner.held());
        }
        println!(
            "| {variant} | {:.1} | {max} | {} |",
            sum as f64 / text.len() as f64,
            first.map_or("never".into(), |f| f.to_string())
        );
    }
}

/// `personal_data` over `bytes` of near misses, whole, under `budget` candidates: the candidates examined, where
/// the text was cut (if it was) and the CPU time of the scan, printed as a table row.
fn near_misses(bytes: usize, budget: usize) {
    let text = "AB12 ".repeat(bytes / 5);
    let start = std::time::Instant::now();
    let (scanned, examined) =
        bench_support::scan_budgeted(vec![Check::personal_data()], black_box(&text), budget);
    let elapsed = start.elapsed();
    let cut = scanned.block.map_or("whole text".to_owned(), |block| {
        format!("cut at byte {}", block.start)
    });
    let shown_budget = if budget == usize::MAX {
        "none".to_owned()
    } else {
        budget.to_string()
    };
    println!(
        "| {} | {shown_budget} | {examined} | {cut} | {:.1} ms | {:.1} ns |",
        text.len(),
        elapsed.as_secs_f64() * 1e3,
        elapsed.as_secs_f64() * 1e9 / text.len() as f64
    );
}

criterion_group!(benches, per_delta, linear);

fn main() {
    if let Ok(bytes) = std::env::var("GUARDRAIL_NEAR_MISSES") {
        let budget = match std::env::var("GUARDRAIL_BUDGET").as_deref() {
            Ok("none") => usize::MAX,
            Ok(n) => n.parse().expect("GUARDRAIL_BUDGET"),
            Err(_) => bench_support::DEFAULT,
        };
        near_misses(bytes.parse().expect("GUARDRAIL_NEAR_MISSES"), budget);
        return;
    }
    if std::env::var_os("GUARDRAIL_HOLDBACK").is_some() {
        holdback_table();
        return;
    }
    if let Ok(variant) = std::env::var("GUARDRAIL_COUNT") {
        let text = match std::env::var("GUARDRAIL_BYTES") {
            Ok(bytes) => deltas(bytes.parse().expect("GUARDRAIL_BYTES")),
            Err(_) => {
                let count: usize = std::env::var("GUARDRAIL_DELTAS")
                    .map_or(1000, |n| n.parse().expect("GUARDRAIL_DELTAS"));
                tokens().cycle().take(count).collect()
            }
        };
        black_box(scan(&checks(&variant), &text));
        return;
    }
    benches();
    criterion::Criterion::default()
        .configure_from_args()
        .final_summary();
}
