use crate::config::file::ConfigFile;

fn refused(text: &str) -> (Option<usize>, String) {
    let err = ConfigFile::parse(text, "g.toml").unwrap_err();
    (err.line(), err.message().to_owned())
}

/// Values the stack could not use are refused where the file is read, naming the table and the key, at the
/// table's line, instead of when the stack is built.
#[test]
fn retry_breaker_and_timeout_values_are_checked_where_the_file_is_read() {
    for (text, line, expected) in [
        (
            "\n[upstreams.retry]\nmax_attempts = 0\n",
            2,
            "[upstreams.retry] `max_attempts` must be at least 1",
        ),
        (
            "[upstreams.retry]\nbudget_percent = 2000\n",
            1,
            "`budget_percent` must be between 0 and 1000",
        ),
        (
            "[upstreams.retry]\ndeadline_secs = -1\n",
            1,
            "[upstreams.retry] `deadline_secs` must be a positive number of seconds",
        ),
        (
            "[upstreams.breaker]\nfailure_ratio = 1.5\n",
            1,
            "[upstreams.breaker] `failure_ratio` must be in (0, 1]",
        ),
        (
            "[upstreams.breaker]\nconsecutive_failures = 0\n",
            1,
            "`consecutive_failures` must be at least 1",
        ),
        (
            "\n\n[upstreams.timeouts]\nidle_secs = 0\n",
            3,
            "[upstreams.timeouts] `idle_secs` must be a positive number of seconds",
        ),
    ] {
        let (at, message) = refused(text);
        assert_eq!(at, Some(line), "{text}: {message}");
        assert!(message.contains(expected), "{text}: {message}");
    }
    let file = ConfigFile::parse(
        "[upstreams.retry]\nmax_attempts = 1\ndeadline_secs = 0.5\n[upstreams.timeouts]\nconnect_secs = 2\n",
        "g.toml",
    )
    .unwrap();
    assert_eq!(file.upstreams.retry.max_attempts, 1);
}

#[test]
fn invalid_sections_are_refused_with_their_line_and_reason() {
    let (line, message) = refused(
        "[[upstreams.models]]\nname = \"a\"\n\n[[upstreams.models.targets]]\nprovider = \"cohere\"\nmodel = \"x\"\n",
    );
    assert_eq!(line, Some(5), "{message}");
    assert!(message.contains("cohere"), "{message}");

    let (line, message) = refused("[[upstreams.models]]\nname = \"a\"\ntargets = []\n");
    assert_eq!(line, Some(3), "{message}");
    assert!(message.contains("at least one target"), "{message}");

    let (line, message) = refused(
        "[[upstreams.models]]\nname = \"a\"\ntargets = [{ provider = \"openai\", model = \"m\", base_url = \"ftp://x\" }]\n",
    );
    assert_eq!(line, Some(3), "{message}");
    assert!(message.contains("not an http(s) URL"), "{message}");

    let (line, message) = refused("[upstreams.retry]\nmax_attempts = 3\nbackof = 1\n");
    assert_eq!(line, Some(3), "{message}");
    assert!(message.contains("backof"), "{message}");

    let twice = "[[upstreams.models]]\nname = \"a\"\ntargets = [{ provider = \"openai\", model = \"m\", no_key = true }]\n";
    let (line, message) = refused(&format!("{twice}{twice}"));
    assert!(line.is_some(), "{message}");
    assert!(message.contains("configured twice"), "{message}");
}
