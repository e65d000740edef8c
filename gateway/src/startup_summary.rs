//! The start-up summary: one block, logged once the listener is bound, saying what a newcomer needs to know
//! before the first request — where the gateway listens, what it calls, whether callers need a key, whether
//! the operator console is served and where, where the file tools and the records live.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;

use crate::config::Config;

/// The block, first line `gateway listening on http://ADDR · upstream: …`. `created_files` is the `--files`
/// folder when the program created it at start.
pub(crate) fn describe(config: &Config, addr: SocketAddr, created_files: Option<&Path>) -> String {
    let upstream = if config.demo {
        format!(
            "demo (scripted, in-process at {}; no provider is called, no key)",
            config.upstream
        )
    } else {
        // The configured `[upstreams]` models and targets, else the single `--upstream`.
        crate::stack::upstreams::describe(config)
    };
    let mut block = format!("gateway listening on http://{addr} · upstream: {upstream}");
    let mut line = |name: &str, value: String| {
        let _ = write!(block, "\n  {name:<12}{value}");
    };
    line(
        "client auth",
        match &config.api_keys_file {
            Some(path) => format!("on (keys from {})", path.display()),
            None => "off: any caller is served (--api-keys-file PATH to require keys)".to_owned(),
        },
    );
    line(
        "console",
        match (&config.operator_keys_file, config.console) {
            (Some(path), true) => format!(
                "on at http://{addr}/console (operator keys from {})",
                path.display()
            ),
            (Some(_), false) => "off (--no-console)".to_owned(),
            (None, _) => "off: needs --operator-keys-file PATH".to_owned(),
        },
    );
    line(
        "files",
        match (&config.files, created_files) {
            (Some(root), Some(_)) => format!(
                "{} (created at start; read_file, write_file)",
                root.display()
            ),
            (Some(root), None) => format!("{} (read_file, write_file)", root.display()),
            (None, _) => "none (--files DIR for read_file, write_file)".to_owned(),
        },
    );
    line(
        "store",
        match &config.database_url {
            Some(url) => format!("PostgreSQL {}", without_password(url)),
            None => format!("SQLite {}", config.db.display()),
        },
    );
    line(
        "metrics",
        match config.metrics_listen {
            Some(metrics) => format!("http://{metrics}/metrics"),
            None => format!("http://{addr}/metrics"),
        },
    );
    block
}

/// `postgres://user:secret@host/db` → `postgres://user:***@host/db`: the summary goes to logs.
fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}{path}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_password_is_not_logged() {
        assert_eq!(
            without_password("postgres://app:s3cret@db:5432/chat"),
            "postgres://app:***@db:5432/chat"
        );
        assert_eq!(
            without_password("postgres://postgres@127.0.0.1:5432/test"),
            "postgres://postgres@127.0.0.1:5432/test"
        );
    }

    #[test]
    fn the_summary_names_auth_console_files_and_store() {
        let mut config = Config::new("https://api.openai.com/v1");
        config.files = Some("./sandbox".into());
        let addr = SocketAddr::from(([127, 0, 0, 1], 8080));
        let block = describe(&config, addr, Some(Path::new("./sandbox")));
        assert!(block.starts_with("gateway listening on http://127.0.0.1:8080 · upstream: openai https://api.openai.com/v1"), "{block}");
        assert!(block.contains("client auth off"), "{block}");
        assert!(
            block.contains("console     off: needs --operator-keys-file PATH"),
            "{block}"
        );
        assert!(block.contains("./sandbox (created at start"), "{block}");
        assert!(block.contains("SQLite gateway.db"), "{block}");
        config.operator_keys_file = Some("operators.txt".into());
        config.api_keys_file = Some("keys.txt".into());
        let block = describe(&config, addr, None);
        assert!(
            block.contains("console     on at http://127.0.0.1:8080/console"),
            "{block}"
        );
        assert!(
            block.contains("client auth on (keys from keys.txt)"),
            "{block}"
        );
    }
}
