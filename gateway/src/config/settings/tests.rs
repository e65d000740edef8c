use super::*;

fn run(args: &[&str]) -> Result<Config, CliError> {
    match Config::parse(args.iter().copied())? {
        Command::Run(config) => Ok(*config),
        Command::Help(text) => panic!("help: {text}"),
    }
}

#[test]
fn defaults_are_the_documented_ones() {
    let config = run(&[]).unwrap();
    assert_eq!(config.listen.to_string(), "127.0.0.1:8080");
    assert_eq!(config.upstream, "https://api.openai.com/v1");
    assert_eq!(config.key_env(), Some("OPENAI_API_KEY"));
    assert_eq!(config.db, PathBuf::from("gateway.db"));
    assert_eq!(config.max_rounds, 10);
    assert_eq!(config.files, None, "no file tools unless --files is given");
    assert_eq!(
        config.retention, None,
        "every call is kept unless --retention-days is given"
    );
    let anthropic = run(&["--provider", "anthropic"]).unwrap();
    assert_eq!(anthropic.key_env(), Some("ANTHROPIC_API_KEY"));
    assert_eq!(anthropic.upstream, "https://api.anthropic.com/v1");
}

#[test]
fn retention_days_set_the_stores_retention_and_zero_is_refused() {
    let config = run(&["--retention-days", "30"]).unwrap();
    assert_eq!(
        config.retention,
        Some(tower_chat_persistence::Retention::days(30).unwrap())
    );
    assert!(run(&["--retention-days=0"]).is_err());
    assert!(run(&["--retention-days=99999999999"]).is_err());
}

#[test]
fn every_option_is_read_in_both_spellings() {
    let config = run(&[
        "--listen=0.0.0.0:9",
        "--upstream",
        "http://127.0.0.1:9000/v1",
        "--upstream-key-env",
        "MY_KEY",
        "--db",
        "x.db",
        "--database-url=postgres://u@h/db",
        "--files",
        "/srv",
        "--api-keys-file",
        "keys.txt",
        "--operator-keys-file",
        "ops.txt",
        "--max-rounds",
        "3",
        "--body-limit",
        "100",
        "--shutdown-timeout",
        "0.5",
        "--max-messages=5",
        "--max-tools=6",
        "--max-schema-bytes=7",
        "--max-media-part-bytes=10",
        "--max-media-bytes=11",
        "--max-approvals=8",
        "--max-id-bytes=9",
        "--header-timeout=1",
        "--body-timeout=2",
        "--idle-timeout=3",
        "--write-timeout=4",
        "--max-polls-per-key=7",
        "--max-connections=4",
        "--max-in-flight=5",
        "--max-in-flight-per-key=6",
        "--max-media-in-flight=12",
        "--metrics-listen=127.0.0.1:9090",
        "--metrics-key-env",
        "METRICS_KEY",
        "--allowed-hosts=gw.example.com,localhost:8080",
        "--trusted-proxy-header",
        "X-Forwarded-For",
        "--trusted-proxies=127.0.0.1,10.0.0.0/8",
    ])
    .unwrap();
    assert_eq!(
        config.trusted_proxies,
        Some(TrustedProxies::new("x-forwarded-for", "127.0.0.1,10.0.0.0/8").unwrap())
    );
    assert_eq!(
        config.allowed_hosts,
        Some(AllowedHosts::parse("gw.example.com,localhost:8080").unwrap())
    );
    assert_eq!(config.listen.port(), 9);
    assert_eq!(config.metrics_listen.map(|a| a.port()), Some(9090));
    assert_eq!(config.metrics_key_env.as_deref(), Some("METRICS_KEY"));
    assert_eq!(config.upstream, "http://127.0.0.1:9000/v1");
    assert_eq!(config.key_env(), Some("MY_KEY"));
    assert_eq!(config.database_url.as_deref(), Some("postgres://u@h/db"));
    assert_eq!(config.files, Some(PathBuf::from("/srv")));
    assert_eq!(config.operator_keys_file, Some(PathBuf::from("ops.txt")));
    assert_eq!(config.max_rounds, 3);
    assert_eq!(config.body_limit, 100);
    assert_eq!(config.shutdown_timeout, Duration::from_millis(500));
    assert_eq!(config.max_polls_per_key, 7);
    assert_eq!(
        config.connections,
        ConnectionLimits {
            header_timeout: Duration::from_secs(1),
            body_timeout: Duration::from_secs(2),
            idle_timeout: Duration::from_secs(3),
            write_timeout: Duration::from_secs(4),
            max_connections: 4,
            max_in_flight: 5,
            max_in_flight_per_key: 6,
            max_media_in_flight: 12,
        }
    );
    assert_eq!(
        config.limits,
        RequestLimits {
            max_messages: 5,
            max_tools: 6,
            max_schema_bytes: 7,
            max_approvals: 8,
            max_id_bytes: 9,
            max_media_part_bytes: 10,
            max_media_bytes: 11,
            setting_names: SettingNames::Flags,
            ..RequestLimits::default()
        }
    );
}

#[test]
fn bad_command_lines_are_typed_errors() {
    for (args, needle) in [
        (&["--nope"][..], "--nope"),
        (&["--listen"][..], "--listen"),
        (&["--listen", "nowhere"][..], "--listen"),
        (&["--provider", "cohere"][..], "openai"),
        (&["--max-rounds", "0"][..], "positive integer"),
        (&["--shutdown-timeout=-1"][..], "positive number of seconds"),
        (&["stray"][..], "stray"),
    ] {
        match run(args).unwrap_err() {
            CliError::Usage(message) => {
                assert!(message.contains(needle), "{args:?}: {message}")
            }
            other => panic!("{args:?}: {other:?}"),
        }
    }
    assert!(matches!(
        run(&["--allowed-hosts", "http://gw.example.com"]).unwrap_err(),
        CliError::Invalid { option, .. } if option == "--allowed-hosts"
    ));
    assert!(matches!(
        run(&["--trusted-proxy-header", "x-forwarded-for"]).unwrap_err(),
        CliError::Requires { option, .. } if option == "--trusted-proxy-header"
    ));
    assert!(matches!(
        run(&["--trusted-proxies", "10.0.0.1"]).unwrap_err(),
        CliError::Requires { option, .. } if option == "--trusted-proxies"
    ));
    assert_eq!(
        run(&[
            "--trusted-proxy-header=x-forwarded-for",
            "--trusted-proxies=10.0.0.1,proxy"
        ])
        .unwrap_err(),
        CliError::Invalid {
            option: "--trusted-proxies".into(),
            value: "proxy".into(),
            expected: "an IP address or a range like 10.0.0.0/8",
        }
    );
    assert!(matches!(
        run(&["--trusted-proxy-header=x forwarded", "--trusted-proxies=10.0.0.1"]).unwrap_err(),
        CliError::Invalid { option, .. } if option == "--trusted-proxy-header"
    ));
    assert!(
        matches!(Config::parse(["--help"]), Ok(Command::Help(text)) if text.contains("--listen"))
    );
}

#[test]
fn no_upstream_key_is_a_switch_that_excludes_a_key_variable() {
    let config = run(&[]).unwrap();
    assert!(!config.no_upstream_key);
    assert_eq!(config.key_source(), Some(KeySource::Env("OPENAI_API_KEY")));
    let keyless = run(&["--no-upstream-key"]).unwrap();
    assert_eq!(keyless.key_source(), Some(KeySource::None));
    assert_eq!(
        run(&["--no-upstream-key", "--upstream-key-env", "K"]).unwrap_err(),
        CliError::Conflict("--no-upstream-key", "--upstream-key-env")
    );
    assert!(matches!(
        run(&["--no-upstream-key=yes"]).unwrap_err(),
        CliError::Usage(_)
    ));
}

#[test]
fn record_content_is_a_switch() {
    assert!(!run(&[]).unwrap().record_content || content_capture_from_env());
    assert!(run(&["--record-content"]).unwrap().record_content);
    assert!(run(&[]).unwrap().console);
    assert!(!run(&["--no-console"]).unwrap().console);
    assert!(matches!(
        run(&["--record-content=yes"]).unwrap_err(),
        CliError::Usage(_)
    ));
}

#[test]
fn records_and_tracing_are_on_unless_switched_off() {
    let defaults = run(&[]).unwrap();
    assert!(defaults.record_calls && defaults.trace_calls);
    let proxy = run(&["--no-records", "--no-tracing"]).unwrap();
    assert!(!proxy.record_calls && !proxy.trace_calls);
    assert!(run(&["--no-tracing"]).unwrap().record_calls);
    assert!(run(&["--no-records"]).unwrap().trace_calls);
}

#[test]
fn a_config_file_is_read_and_a_bad_one_refused() {
    let dir = std::env::temp_dir().join(format!("tc-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.toml");
    std::fs::write(&good, "# nothing yet\n").unwrap();
    let config = run(&["--config", good.to_str().unwrap()]).unwrap();
    assert_eq!(config.file, ConfigFile::default());
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "[unknown]\n").unwrap();
    let err = run(&["--config", bad.to_str().unwrap()]).unwrap_err();
    assert!(
        matches!(&err, CliError::File(e) if e.line() == Some(1)),
        "{err}"
    );
    assert!(err.to_string().contains("bad.toml"), "{err}");
}

#[test]
fn the_file_gives_options_and_a_flag_overrides_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gateway.toml");
    std::fs::write(
        &path,
        "[gateway]\nlisten = \"127.0.0.1:9100\"\nmax-rounds = 4\nno-console = true\n\
         trusted-proxy-header = \"x-forwarded-for\"\n",
    )
    .unwrap();
    let path = path.to_str().unwrap();
    let from_file = run(&["--config", path, "--trusted-proxies=10.0.0.1"]).unwrap();
    assert_eq!(from_file.listen.port(), 9100);
    assert_eq!(from_file.max_rounds, 4);
    assert!(!from_file.console);
    assert!(
        from_file.trusted_proxies.is_some(),
        "a pair may come half from the file"
    );
    let overridden = run(&[
        "--config",
        path,
        "--listen",
        "127.0.0.1:9200",
        "--max-rounds=6",
    ])
    .unwrap_err();
    assert!(
        matches!(&overridden, CliError::Requires { option, .. } if option == "--trusted-proxy-header"),
        "{overridden:?}"
    );
    let overridden = run(&[
        "--config",
        path,
        "--listen",
        "127.0.0.1:9200",
        "--max-rounds=6",
        "--trusted-proxies=10.0.0.1",
    ])
    .unwrap();
    assert_eq!(overridden.listen.port(), 9200);
    assert_eq!(overridden.max_rounds, 6);
    assert!(!overridden.console, "what no flag says stays the file's");
    assert_eq!(
        overridden.config_path.as_deref(),
        Some(std::path::Path::new(path))
    );
}
