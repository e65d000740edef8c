//! A dropped `ProcessGroup` ends what its leader started too, also when the test holding it panics; its
//! `output` returns although a helper the command left behind holds the pipes open.

use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tower_chat_testkit::{ProcessGroup, BOUND};

/// A shell that starts a long `sleep` in the background (the grandchild, as Chromium is chromedriver's),
/// prints its pid and waits for it.
fn shell_with_a_grandchild() -> Command {
    let mut command = Command::new("sh");
    command
        .args(["-c", "sleep 600 & echo $!; wait"])
        .stdout(Stdio::piped());
    command
}

fn first_line_pid(group: &mut ProcessGroup) -> u32 {
    let mut line = String::new();
    BufReader::new(group.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    line.trim()
        .parse()
        .unwrap_or_else(|_| panic!("not a pid: {line:?}"))
}

/// Whether `pid` runs (a zombie, killed and waiting for its new parent to reap it, does not).
fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command's name in parentheses.
        Ok(stat) => !stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
        Err(_) => false,
    }
}

/// `SIGKILL` is delivered asynchronously: wait for its effect, failing after the kit's bound.
fn assert_ends(pid: u32) {
    let deadline = Instant::now() + BOUND;
    while running(pid) {
        assert!(
            Instant::now() < deadline,
            "process {pid} outlived its group's guard"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_dropped_group_ends_the_processes_its_leader_started() {
    let mut group = ProcessGroup::spawn(&mut shell_with_a_grandchild()).unwrap();
    let grandchild = first_line_pid(&mut group);
    assert!(running(grandchild));
    drop(group);
    assert_ends(grandchild);
}

#[test]
fn a_panicking_test_still_ends_its_group() {
    let (send, receive) = std::sync::mpsc::channel();
    let unwound = std::thread::spawn(move || {
        let mut group = ProcessGroup::spawn(&mut shell_with_a_grandchild()).unwrap();
        send.send(first_line_pid(&mut group)).unwrap();
        panic!("a failing assertion while the group runs");
    })
    .join();
    assert!(unwound.is_err());
    assert_ends(receive.recv().unwrap());
}

#[test]
fn output_returns_although_a_helper_left_behind_holds_the_pipes() {
    // The shell exits at once; its `sleep` keeps stdout open, so reading to the end would wait 600 s.
    let output =
        ProcessGroup::output(Command::new("sh").args(["-c", "sleep 600 & echo $!"])).unwrap();
    assert!(output.status.success());
    let pid: u32 = String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .unwrap();
    assert_ends(pid);
}
