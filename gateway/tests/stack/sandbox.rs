//! The file sandbox against what only a real kernel object shows: a file holding more than its `fstat` size says
//! (a file that grew after the check) is refused, never returned cut at the read limit; a terminal device inside
//! the files root is refused without becoming the gateway's controlling terminal.

use std::path::Path;

use tower_chat_gateway::tools::{Sandbox, MAX_READ_BYTES};

/// `/proc/kallsyms` is a regular file with one link whose `fstat` size is 0 but which holds megabytes of text:
/// to the sandbox it looks exactly like a file that grew between the `fstat` and the read.
#[tokio::test]
async fn a_file_larger_than_its_stat_size_is_refused_not_cut() {
    let proc = Path::new("/proc");
    let meta = std::fs::metadata(proc.join("kallsyms")).expect("/proc/kallsyms");
    assert!(meta.is_file() && meta.len() == 0, "{meta:?}");
    let mut content = Vec::new();
    std::io::Read::read_to_end(
        &mut std::io::Read::take(
            std::fs::File::open(proc.join("kallsyms")).unwrap(),
            MAX_READ_BYTES + 1,
        ),
        &mut content,
    )
    .unwrap();
    assert_eq!(
        content.len() as u64,
        MAX_READ_BYTES + 1,
        "the precondition: /proc/kallsyms holds more than the limit"
    );

    let sandbox = Sandbox::new(proc).unwrap();
    let error = sandbox.read("kallsyms").await.unwrap_err();
    assert!(
        error.message().contains("larger than the limit"),
        "{}",
        error.message()
    );
}

/// Set in the child process of the terminal test: the name of the terminal under `/dev/pts` it reads.
const CHILD_TERMINAL: &str = "SANDBOX_TERMINAL_TEST_PTS";

/// A gateway started as a session leader without a controlling terminal (a service manager's child) would acquire
/// any terminal it opens without `O_NOCTTY`, and with it the terminal's hang-up and interrupt signals. A child
/// process that is such a session leader reads a fresh pseudo-terminal with `/dev/pts` as the files root (a pty
/// opens only through its own devpts file, and the sandbox crosses no mount, so the root must be that directory).
#[test]
fn a_terminal_inside_the_root_is_refused_and_never_becomes_the_controlling_terminal() {
    if let Some(name) = std::env::var_os(CHILD_TERMINAL) {
        return read_the_terminal_as_a_session_leader(&name.to_string_lossy());
    }
    let master =
        rustix::pty::openpt(rustix::pty::OpenptFlags::RDWR | rustix::pty::OpenptFlags::NOCTTY)
            .expect("a pseudo-terminal");
    rustix::pty::grantpt(&master).unwrap();
    rustix::pty::unlockpt(&master).unwrap();
    let terminal = rustix::pty::ptsname(&master, Vec::new()).unwrap();
    let terminal = terminal.to_str().unwrap();
    let name = terminal
        .strip_prefix("/dev/pts/")
        .unwrap_or_else(|| panic!("a pty outside /dev/pts: {terminal}"));
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            &crate::common::test_path(
                module_path!(),
                "a_terminal_inside_the_root_is_refused_and_never_becomes_the_controlling_terminal",
            ),
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_TERMINAL, name)
        .output()
        .unwrap();
    assert!(
        child.status.success() && String::from_utf8_lossy(&child.stdout).contains("1 passed"),
        "the session-leader child failed:\n{}\n{}",
        String::from_utf8_lossy(&child.stdout),
        String::from_utf8_lossy(&child.stderr)
    );
    drop(master);
}

fn read_the_terminal_as_a_session_leader(name: &str) {
    rustix::process::setsid().expect("a new session, without a controlling terminal");
    assert!(
        std::fs::File::open("/dev/tty").is_err(),
        "the new session already has a controlling terminal"
    );
    let sandbox = Sandbox::new(Path::new("/dev/pts")).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let error = runtime.block_on(sandbox.read(name)).unwrap_err();
    assert!(
        error.message().starts_with("refused: "),
        "{}",
        error.message()
    );
    assert!(
        std::fs::File::open("/dev/tty").is_err(),
        "reading the terminal made it the process's controlling terminal"
    );
}
