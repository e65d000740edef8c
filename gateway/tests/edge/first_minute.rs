//! A newcomer's first minute, as the README tells it: the gateway program started with `--demo` (no provider,
//! no key) answers the official Python clients on every format, says what it serves in one start-up block,
//! creates the `--files` folder it was given, points `/console` at the flag that turns it on, and writes plain
//! log lines to a pipe. A command line it cannot use is refused as a command-line error, exit code 2.

use crate::common;

use std::io::BufRead as _;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The gateway program, started with `args`, its log lines (stdout, a pipe) read on a thread.
struct Program {
    child: tower_chat_testkit::ProcessGroup,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Program {
    fn start(args: &[&std::ffi::OsStr]) -> Self {
        Self::start_with(args, &[])
    }

    /// [`Program::start`] with these environment variables set.
    fn start_with(args: &[&std::ffi::OsStr], env: &[(&str, &std::ffi::OsStr)]) -> Self {
        let mut child = tower_chat_testkit::ProcessGroup::spawn(
            Command::new(env!("CARGO_BIN_EXE_tower-chat-gateway"))
                .args(args)
                .envs(env.iter().copied())
                .env("RUST_LOG", "info")
                // Colours must be off because stdout is a pipe, not because the environment asks.
                .env_remove("NO_COLOR")
                .env_remove("OPENAI_API_KEY")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped()),
        )
        .expect("start the gateway program");
        let stdout = child.stdout.take().unwrap();
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        Program {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Read log lines until one contains `needle`; panics with what was read if the program ends first.
    fn wait_for(&mut self, needle: &str) -> String {
        loop {
            match self.lines.recv_timeout(Duration::from_secs(60)) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.contains(needle) {
                        return line;
                    }
                }
                Err(_) => panic!("no `{needle}` in the log:\n{}", self.seen.join("\n")),
            }
        }
    }

    /// The next `n` log lines.
    fn next_lines(&mut self, n: usize) -> Vec<String> {
        (0..n)
            .map(|_| {
                let line = self
                    .lines
                    .recv_timeout(Duration::from_secs(10))
                    .expect("a log line");
                self.seen.push(line.clone());
                line
            })
            .collect()
    }

    /// Stop the program (SIGKILL) and return every log line it wrote.
    fn stop(mut self) -> Vec<String> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.seen.extend(self.lines.iter());
        self.seen
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_demo_gateway_answers_the_official_clients_with_no_key() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("gateway.db");
    let sandbox = dir.path().join("sandbox");
    let mut program = Program::start(&[
        "--demo".as_ref(),
        "--listen".as_ref(),
        "127.0.0.1:0".as_ref(),
        "--db".as_ref(),
        db.as_os_str(),
        "--files".as_ref(),
        sandbox.as_os_str(),
    ]);
    let first = program.wait_for("gateway listening on http://");
    let summary = program.next_lines(5).join("\n");
    let url = first
        .split("listening on ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .expect("the listen URL")
        .to_owned();
    assert!(
        first.contains("upstream: demo (scripted, in-process"),
        "{first}"
    );
    assert!(summary.contains("client auth off"), "{summary}");
    assert!(
        summary.contains("console     off: needs --operator-keys-file PATH"),
        "{summary}"
    );
    assert!(
        summary.contains(&format!(
            "files       {} (created at start",
            sandbox.display()
        )),
        "{summary}"
    );
    assert!(
        summary.contains(&format!("store       SQLite {}", db.display())),
        "{summary}"
    );
    assert!(sandbox.is_dir(), "the --files folder is created");

    // Plain HTTP first, as `curl` would: no key, a short deterministic answer.
    let answer = common::post(
        &format!("{url}/v1/chat/completions"),
        r#"{"model": "any", "messages": [{"role": "user", "content": "add 20 and 22"}]}"#,
        &[],
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(
        answer.json()["choices"][0]["message"]["content"],
        "The tool answered: 42. (demo upstream)"
    );

    // Without operator keys the console says which flag serves it, instead of the API's JSON 404.
    for path in ["/console", "/console/login"] {
        let console = common::get(&format!("{url}{path}")).await;
        assert_eq!(console.status, 404, "{path}");
        assert!(
            console.body.contains("--operator-keys-file"),
            "{path}: {}",
            console.body
        );
    }

    let clients = ["openai", "anthropic"].map(|package| {
        common::python_keys(
            "a_demo_gateway_answers_the_official_clients_with_no_key",
            package,
        )
    });
    if clients.iter().all(Option::is_some) {
        common::run_python(
            "demo_client.py",
            std::slice::from_ref(&url),
            &[
                "ok chat completions text",
                "ok chat completions streamed tool round",
                "ok responses text",
                "ok responses tool round",
                "ok messages text",
                "ok messages streamed tool round",
            ],
        )
        .await;
    }

    let log = program.stop().join("\n");
    assert!(
        !log.contains('\u{1b}'),
        "colour codes in a log written to a pipe:\n{log}"
    );
}

/// Run the program to its end; its exit code and stderr.
fn refused(args: &[&std::ffi::OsStr]) -> (Option<i32>, String) {
    let output = tower_chat_testkit::ProcessGroup::output(
        Command::new(env!("CARGO_BIN_EXE_tower-chat-gateway"))
            .args(args)
            .env_remove("OPENAI_API_KEY"),
    )
    .expect("run the gateway program");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn an_unusable_command_line_is_a_cli_error_with_exit_code_2() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("gateway.db");
    let file = dir.path().join("notes.txt");
    std::fs::write(&file, "not a folder").unwrap();

    let (code, stderr) = refused(&[
        "--demo".as_ref(),
        "--db".as_ref(),
        db.as_os_str(),
        "--files".as_ref(),
        file.as_os_str(),
    ]);
    assert_eq!(code, Some(2), "{stderr}");
    assert_eq!(
        stderr.trim(),
        format!("error: --files {}: not a folder", file.display())
    );

    let (code, stderr) = refused(&[
        "--demo".as_ref(),
        "--upstream".as_ref(),
        "http://x".as_ref(),
    ]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("`--demo` and `--upstream` exclude each other"),
        "{stderr}"
    );

    // Errors found while building the gateway are start-up errors too, printed without an HTTP error kind.
    let (code, stderr) = refused(&[
        "--upstream".as_ref(),
        "not a url".as_ref(),
        "--no-upstream-key".as_ref(),
        "--db".as_ref(),
        db.as_os_str(),
    ]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert!(!stderr.contains("invalid_request"), "{stderr}");

    let (code, stderr) = refused(&[
        "--upstream".as_ref(),
        "https://api.openai.com/v1".as_ref(),
        "--db".as_ref(),
        db.as_os_str(),
    ]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("OPENAI_API_KEY"), "{stderr}");
}

#[test]
fn a_bad_flag_is_a_usage_error_that_names_the_flag_it_meant() {
    let (code, stderr) = refused(&["--lisen".as_ref(), "127.0.0.1:0".as_ref()]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert!(stderr.contains("'--lisen'"), "{stderr}");
    assert!(stderr.contains("'--listen'"), "a suggestion: {stderr}");
    assert!(!stderr.contains("invalid_request"), "{stderr}");
    let (code, stderr) = refused(&["--max-rounds".as_ref(), "zero".as_ref()]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--max-rounds"), "{stderr}");
    assert!(stderr.contains("positive integer"), "{stderr}");
    let (code, stderr) = refused(&["--help".as_ref()]);
    assert_eq!(code, Some(0), "{stderr}");
}

/// The store line of the start-up block of a demo gateway started with `args` and `env`.
fn store_line(args: &[&std::ffi::OsStr], env: &[(&str, &std::ffi::OsStr)]) -> String {
    let mut program = Program::start_with(args, env);
    let line = program.wait_for("store ");
    program.stop();
    line
}

#[test]
fn the_file_gives_an_option_its_variable_overrides_it_and_a_flag_overrides_both() {
    let dir = tempfile::tempdir().unwrap();
    let [in_file, in_env, in_flag] =
        ["file.db", "env.db", "flag.db"].map(|name| dir.path().join(name));
    let config = dir.path().join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            "[gateway]\ndemo = true\nlisten = \"127.0.0.1:0\"\ndb = {:?}\n",
            in_file.display().to_string()
        ),
    )
    .unwrap();
    let args = ["--config".as_ref(), config.as_os_str()];
    let line = store_line(&args, &[]);
    assert!(
        line.ends_with(&format!("SQLite {}", in_file.display())),
        "{line}"
    );
    let env = [("TOWER_CHAT_DB", in_env.as_os_str())];
    let line = store_line(&args, &env);
    assert!(
        line.ends_with(&format!("SQLite {}", in_env.display())),
        "{line}"
    );
    let line = store_line(
        &[args[0], args[1], "--db".as_ref(), in_flag.as_os_str()],
        &env,
    );
    assert!(
        line.ends_with(&format!("SQLite {}", in_flag.display())),
        "{line}"
    );
    // A switch's variable says `false` over the file's `true`: without --demo there is no upstream key.
    let (code, stderr) = {
        let output = tower_chat_testkit::ProcessGroup::output(
            Command::new(env!("CARGO_BIN_EXE_tower-chat-gateway"))
                .args(args)
                .env("TOWER_CHAT_DEMO", "false")
                .env_remove("OPENAI_API_KEY"),
        )
        .expect("run the gateway program");
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("OPENAI_API_KEY"), "{stderr}");
}
