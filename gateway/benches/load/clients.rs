//! The load mode's clients: `wrk` (`--latency`: p50, p99, requests per second) and `h2load` (HTTP/1.1 beside
//! HTTP/2: requests per second, mean and slowest request), each run against the upstream directly and then
//! through the gateway, one Markdown table row per load.

use std::process::Command;

use crate::{request_body, ANSWER_WORDS};

/// p50, p99 (ms) and requests per second, from `wrk --latency`.
#[derive(Clone, Copy)]
struct Figures {
    p50: f64,
    p99: f64,
    rps: f64,
}

fn milliseconds(value: &str) -> f64 {
    let (number, factor) = if let Some(n) = value.strip_suffix("us") {
        (n, 0.001)
    } else if let Some(n) = value.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = value.strip_suffix('s') {
        (n, 1000.0)
    } else {
        (value, 1.0)
    };
    number.parse::<f64>().unwrap_or(f64::NAN) * factor
}

fn wrk(url: &str, body_file: &str, connections: usize, seconds: u64) -> Figures {
    let output = Command::new("wrk")
        .args(["-t1", "--latency", "--timeout", "10s"])
        .arg(format!("-c{connections}"))
        .arg(format!("-d{seconds}s"))
        .args(["-s", body_file, url])
        .output()
        .expect("wrk runs");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "wrk failed: {text}");
    assert!(
        !text.contains("Non-2xx"),
        "some answers were not 2xx: {text}"
    );
    let mut figures = Figures {
        p50: f64::NAN,
        p99: f64::NAN,
        rps: f64::NAN,
    };
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.as_slice() {
            ["50%", value] => figures.p50 = milliseconds(value),
            ["99%", value] => figures.p99 = milliseconds(value),
            ["Requests/sec:", value] => figures.rps = value.parse().unwrap_or(f64::NAN),
            _ => {}
        }
    }
    figures
}

/// A `wrk` script sending one chat request.
fn script(dir: &std::path::Path, stream: bool) -> String {
    let body = request_body(stream);
    let lua = format!(
        "wrk.method = \"POST\"\nwrk.headers[\"Content-Type\"] = \"application/json\"\nwrk.body = '{body}'\n"
    );
    let path = dir.join(if stream { "stream.lua" } else { "plain.lua" });
    std::fs::write(&path, lua).unwrap();
    path.to_string_lossy().into_owned()
}

pub(crate) fn run_wrk(
    direct: &str,
    through: &str,
    dir: &std::path::Path,
    seconds: u64,
    concurrencies: &[usize],
) {
    println!(
        "wrk -t1 --latency, {seconds} s each, 127.0.0.1; upstream: {ANSWER_WORDS}-word answer (23 SSE chunks streamed)"
    );
    println!();
    println!("| load | direct p50 / p99 ms | gateway p50 / p99 ms | added p50 / p99 ms | direct req/s | gateway req/s | gateway / direct |");
    println!("| --- | --- | --- | --- | ---: | ---: | ---: |");
    for &connections in concurrencies {
        for stream in [false, true] {
            let body = script(dir, stream);
            let d = wrk(direct, &body, connections, seconds);
            let g = wrk(through, &body, connections, seconds);
            println!(
                "| c={connections}, {} | {:.3} / {:.3} | {:.3} / {:.3} | {:+.3} / {:+.3} | {:.0} | {:.0} | {:.1} % |",
                if stream { "streamed" } else { "non-streamed" },
                d.p50,
                d.p99,
                g.p50,
                g.p99,
                g.p50 - d.p50,
                g.p99 - d.p99,
                d.rps,
                g.rps,
                100.0 * g.rps / d.rps
            );
        }
    }
}

/// Requests per second, mean and slowest request (ms), from `h2load`.
#[derive(Clone, Copy)]
struct H2loadFigures {
    rps: f64,
    mean: f64,
    max: f64,
}

fn h2load(
    url: &str,
    body_file: &str,
    connections: usize,
    seconds: u64,
    http1: bool,
) -> H2loadFigures {
    let mut command = Command::new("h2load");
    command
        .args(["-t1", "-m1", "-H", "content-type: application/json"])
        .arg(format!("-c{connections}"))
        .arg(format!("-D{seconds}"))
        .args(["--warm-up-time", "1", "-d", body_file]);
    if http1 {
        command.arg("--h1");
    }
    let output = command.arg(url).output().expect("h2load runs");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "h2load failed: {text}");
    let mut figures = H2loadFigures {
        rps: f64::NAN,
        mean: f64::NAN,
        max: f64::NAN,
    };
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.as_slice() {
            ["finished", "in", _, rps, "req/s,", ..] => {
                figures.rps = rps.parse().unwrap_or(f64::NAN)
            }
            ["status", "codes:", _, "2xx,", _, "3xx,", client, "4xx,", server, "5xx"] => assert!(
                *client == "0" && *server == "0",
                "some answers were not 2xx: {text}"
            ),
            ["time", "for", "request:", _min, max, mean, ..] => {
                figures.max = milliseconds(max);
                figures.mean = milliseconds(mean);
            }
            _ => {}
        }
    }
    figures
}

pub(crate) fn run_h2load(
    direct: &str,
    through: &str,
    dir: &std::path::Path,
    seconds: u64,
    concurrencies: &[usize],
) {
    println!(
        "h2load -t1 -m1, {seconds} s each after 1 s of warm-up, 127.0.0.1; upstream over HTTP/1.1: {ANSWER_WORDS}-word answer (23 SSE chunks streamed)"
    );
    println!();
    println!("| load | direct HTTP/1.1 req/s, mean / max ms | gateway HTTP/1.1 | gateway HTTP/2 | HTTP/2 / HTTP/1.1 req/s |");
    println!("| --- | --- | --- | --- | ---: |");
    for &connections in concurrencies {
        for stream in [false, true] {
            let body = dir.join(if stream { "stream.json" } else { "plain.json" });
            std::fs::write(&body, request_body(stream)).unwrap();
            let body = body.to_string_lossy().into_owned();
            let d = h2load(direct, &body, connections, seconds, true);
            let h1 = h2load(through, &body, connections, seconds, true);
            let h2 = h2load(through, &body, connections, seconds, false);
            let cell = |f: H2loadFigures| format!("{:.0}, {:.3} / {:.2}", f.rps, f.mean, f.max);
            println!(
                "| c={connections}, {} | {} | {} | {} | {:.2} |",
                if stream { "streamed" } else { "non-streamed" },
                cell(d),
                cell(h1),
                cell(h2),
                h2.rps / h1.rps
            );
        }
    }
}
