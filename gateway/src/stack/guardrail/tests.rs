//! The `[guardrail]` table: what compiles, what refuses the start, which policy a request gets.

use super::*;
use crate::config::file::ConfigFile;

fn section(toml: &str) -> GuardrailSection {
    ConfigFile::parse(toml, "gateway.toml")
        .unwrap()
        .guardrail
        .unwrap()
}

fn refused(toml: &str) -> String {
    section(toml).compile().unwrap_err().to_string()
}

#[test]
fn the_first_matching_policy_applies() {
    let policies = section(
        r#"
[[guardrail.policy]]
name = "support"
callers = ["support-bot"]
routes = ["/v1/messages", "responses"]
[[guardrail.policy.check]]
kind = "secrets"

[[guardrail.policy]]
models = ["gpt-4o-mini"]
[[guardrail.policy.check]]
kind = "personal_data"

[[guardrail.policy]]
[[guardrail.policy.check]]
kind = "output_length"
max_bytes = 10
"#,
    )
    .compile()
    .unwrap();
    let pick = |caller: Option<&str>, route: Option<InboundRoute>, model: Option<&str>| {
        policies
            .selectors
            .iter()
            .position(|s| s.matches(caller, route, model))
    };
    let messages = Some(InboundRoute::Messages);
    let chat = Some(InboundRoute::ChatCompletions);
    assert_eq!(
        pick(Some("support-bot"), messages, Some("gpt-4o-mini")),
        Some(0)
    );
    // The caller matches but not the route: the next policy that matches.
    assert_eq!(
        pick(Some("support-bot"), chat, Some("gpt-4o-mini")),
        Some(1)
    );
    assert_eq!(pick(Some("other"), messages, Some("o3")), Some(2));
    // A list names what must be known: no caller (no keys file) matches no `callers` list.
    assert_eq!(pick(None, messages, Some("o3")), Some(2));
    assert_eq!(
        policies.check_names(),
        vec!["output_length", "personal_data", "secrets"]
    );
}

#[test]
fn check_parameters_reach_the_checks() {
    let policies = section(
        r#"
[[guardrail.policy]]
block_message = "[cut: {check}]"
[[guardrail.policy.check]]
kind = "pattern"
name = "ticket"
pattern = "TCK-[0-9]{4,8}"
action = "redact"
stages = ["output"]
[[guardrail.policy.check]]
kind = "deny_list"
name = "topics"
words = ["project zeus"]
action = "flag"
[[guardrail.policy.check]]
kind = "json_schema"
schema = '{"type": "object"}'
[[guardrail.policy.check]]
kind = "moderation"
endpoint = "http://127.0.0.1:9/v1"
model = "omni-moderation-latest"
timeout_seconds = 0.5
"#,
    )
    .compile()
    .unwrap();
    let checks = policies.selectors[0].layer.policy_checks();
    let described: Vec<(&str, &str)> = checks
        .iter()
        .map(|c| (c.name(), c.action().as_str()))
        .collect();
    assert_eq!(
        described,
        vec![
            ("ticket", "redact"),
            ("topics", "flag"),
            ("json_schema", "block"),
            ("moderation", "block")
        ]
    );
}

#[test]
fn bad_entries_refuse_the_start_naming_policy_and_check() {
    let head = "[[guardrail.policy]]\nname = \"p\"\n[[guardrail.policy.check]]\n";
    let cases = [
        ("kind = \"pattern\"\nname = \"t\"\npattern = \"TCK-[0-9]+\"\n", "check #1 (pattern)"),
        ("kind = \"pattern\"\npattern = \"a{1,3}\"\n", "`name` is required"),
        ("kind = \"pattern\"\nname = \"t\"\npattern = \"(\"\n", "check #1 (pattern)"),
        ("kind = \"secrets\"\nwords = [\"x\"]\n", "`words` is not a parameter of kind `secrets`"),
        ("kind = \"output_length\"\n", "`max_bytes` is required"),
        ("kind = \"output_length\"\nmax_bytes = 5\naction = \"redact\"\n", "cannot be redacted"),
        ("kind = \"json_schema\"\nschema = \"{\"\n", "`schema` is not JSON"),
        ("kind = \"json_schema\"\nschema = '{\"type\": 7}'\n", "json_schema"),
        (
            "kind = \"moderation\"\nendpoint = \"http://127.0.0.1:9\"\napi_key_env = \"TOWER_CHAT_GATEWAY_TEST_UNSET_KEY\"\n",
            "TOWER_CHAT_GATEWAY_TEST_UNSET_KEY is unset",
        ),
        ("kind = \"moderation\"\nendpoint = \"http://127.0.0.1:9\"\ntimeout_seconds = -1.0\n", "timeout_seconds"),
        ("kind = \"deny_list\"\nname = \"d\"\nwords = []\n", "`words` lists nothing"),
        ("kind = \"secrets\"\nname = \"has space\"\n", "`name = \"has space\"`"),
        ("kind = \"secrets\"\nstages = []\n", "`stages` lists nothing"),
    ];
    for (check, wanted) in cases {
        let error = refused(&format!("{head}{check}"));
        assert!(
            error.starts_with("[[guardrail.policy]] #1 (\"p\")") && error.contains(wanted),
            "{check:?}: {error}"
        );
    }
    let error = refused(
        "[[guardrail.policy]]\nmax_candidates = 0\n[[guardrail.policy.check]]\nkind = \"secrets\"\n",
    );
    assert!(
        error.contains("`max_candidates` must be at least 1"),
        "{error}"
    );
    let error = refused("[[guardrail.policy]]\nroutes = [\"/v1/chat\"]\n[[guardrail.policy.check]]\nkind = \"secrets\"\n");
    assert!(error.contains("unknown route `/v1/chat`"), "{error}");
    let error = refused(
        "[[guardrail.policy]]\ncallers = []\n[[guardrail.policy.check]]\nkind = \"secrets\"\n",
    );
    assert!(error.contains("`callers` lists nothing"), "{error}");
    let error = refused("[[guardrail.policy]]\nmodels = [\"m\"]\n");
    assert!(
        error.contains("lists no [[guardrail.policy.check]]"),
        "{error}"
    );
}

#[test]
fn unknown_kinds_and_keys_are_refused_with_their_line() {
    let error = ConfigFile::parse(
        "[[guardrail.policy]]\n[[guardrail.policy.check]]\nkind = \"secret\"\n",
        "g.toml",
    )
    .unwrap_err();
    assert_eq!(error.line(), Some(3), "{error}");
    let error =
        ConfigFile::parse("[[guardrail.policy]]\ncaller = [\"a\"]\n", "g.toml").unwrap_err();
    assert_eq!(error.line(), Some(2), "{error}");
}

/// The guide's example parses and compiles (its moderation key variable set).
#[test]
fn the_documented_example_is_valid() {
    if std::env::var_os("OPENAI_API_KEY").is_none() {
        std::env::set_var("OPENAI_API_KEY", "sk-documented-example");
    }
    let page = include_str!("../../../../docs/src/gateway/guardrails.md");
    let start = page
        .find("[[guardrail.policy]]\nname = \"support\"")
        .unwrap();
    let end = start + page[start..].find("```").unwrap();
    let policies = section(&page[start..end]).compile().unwrap();
    assert_eq!(policies.len(), 2);
    assert_eq!(
        policies.check_names(),
        vec![
            "json_schema",
            "moderation",
            "output_length",
            "personal_data",
            "secrets",
            "ticket",
            "topics"
        ]
    );
}
