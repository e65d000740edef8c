//! Processes a test starts (a browser driver, a Python client, the gateway binary, this test binary re-run as a
//! child), each in a process group of its own that ends with the test.
//!
//! Killing the child alone is not enough: chromedriver starts Chromium, which starts a dozen helpers, and a
//! `SIGKILL` to chromedriver leaves them all running with no parent to end them. A [`ProcessGroup`] starts its command
//! as the leader of a new process group and sends `SIGKILL` to the whole group when it is dropped, which also
//! happens while a failing test unwinds.
//!
//! ```no_run
//! use std::process::Command;
//! use tower_chat_testkit::process::ProcessGroup;
//!
//! let mut driver = ProcessGroup::spawn(Command::new("/usr/bin/chromedriver").arg("--port=9515")).unwrap();
//! assert!(driver.try_wait().unwrap().is_none()); // a `ProcessGroup` derefs to its `Child`
//! // dropped here: chromedriver and every browser it started are killed
//! ```

use std::io::{self, Read};
use std::ops::{Deref, DerefMut};
use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command, Output, Stdio};

use rustix::process::{getpgrp, kill_process_group, Pid, Signal};

/// A child process leading its own process group, the group killed on drop.
#[derive(Debug)]
pub struct ProcessGroup {
    child: Child,
}

impl ProcessGroup {
    /// Start `command` as the leader of a new process group (its children join that group unless they leave
    /// it on purpose).
    pub fn spawn(command: &mut Command) -> io::Result<ProcessGroup> {
        let child = command.process_group(0).spawn()?;
        Ok(ProcessGroup { child })
    }

    /// Run `command` in a group of its own to its end and collect its output, as [`Command::output`] does;
    /// whatever it left running in its group is killed before the output is read to its end (a helper that
    /// kept the pipes open would otherwise hold the test forever).
    pub fn output(command: &mut Command) -> io::Result<Output> {
        let mut group = ProcessGroup::spawn(
            command
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped()),
        )?;
        let read = |pipe: Option<Box<dyn Read + Send>>| {
            std::thread::spawn(move || {
                let mut bytes = Vec::new();
                if let Some(mut pipe) = pipe {
                    let _ = pipe.read_to_end(&mut bytes);
                }
                bytes
            })
        };
        let stdout = read(group.child.stdout.take().map(|p| Box::new(p) as _));
        let stderr = read(group.child.stderr.take().map(|p| Box::new(p) as _));
        let status = group.child.wait()?;
        group.kill_group();
        Ok(Output {
            status,
            stdout: stdout.join().expect("the stdout reader"),
            stderr: stderr.join().expect("the stderr reader"),
        })
    }

    /// The group's id: the leader's process id.
    pub fn pgid(&self) -> u32 {
        self.child.id()
    }

    /// Send `SIGKILL` to every process of the group. Never signals process 0 or 1 nor the test's own group:
    /// those ids would reach processes that are not the test's.
    pub fn kill_group(&self) {
        let Some(pgid) = i32::try_from(self.child.id()).ok().and_then(Pid::from_raw) else {
            return;
        };
        if pgid.as_raw_nonzero().get() <= 1 || pgid == getpgrp() {
            return;
        }
        // ESRCH: the group is already empty.
        let _ = kill_process_group(pgid, Signal::KILL);
    }
}

impl Deref for ProcessGroup {
    type Target = Child;

    fn deref(&self) -> &Child {
        &self.child
    }
}

impl DerefMut for ProcessGroup {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.child
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.kill_group();
        // Reap the leader; the others were reparented and are reaped by whoever adopted them.
        let _ = self.child.wait();
    }
}
