//! The official Python clients (`openai`, `anthropic`) against a server under test: a parser nobody here wrote
//! reads what it answers.

use std::path::PathBuf;

/// Whether `python3` can import `package`. When it cannot, the test `test` is skipped visibly (a `SKIPPED` line
/// on stdout and stderr), and fails instead when `CI` is set, so nothing silently skips there.
pub fn python_package(test: &str, package: &str) -> bool {
    let installed = crate::process::ProcessGroup::output(
        std::process::Command::new("python3").args(["-c", &format!("import {package}")]),
    )
    .is_ok_and(|output| output.status.success());
    if !installed {
        let reason =
            format!("the `{package}` Python package is not installed (pip install {package})");
        assert!(
            std::env::var_os("CI").is_none(),
            "{test}: {reason}, and CI is set"
        );
        eprintln!("SKIPPED {test}: {reason}");
        println!("SKIPPED {test}: {reason}");
    }
    installed
}

/// Run the Python script at `script` with `args`; assert it exited 0 and printed every one of `checks`.
pub async fn run_python(script: impl Into<PathBuf>, args: &[String], checks: &[&str]) {
    let script = script.into();
    let args = args.to_vec();
    let output = tokio::task::spawn_blocking(move || {
        crate::process::ProcessGroup::output(
            std::process::Command::new("python3")
                .arg(&script)
                .args(&args),
        )
        .expect("run python3")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "python client failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    for check in checks {
        assert!(stdout.contains(check), "missing `{check}` in:\n{stdout}");
    }
}
