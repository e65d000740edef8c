//! Which `[[upstreams.models]]` entry a client's model name reaches: its `name` or one of its `aliases`, each an
//! exact name or a pattern with `*` (any run of characters, `claude-*`), so that the model names agents send by
//! default (`claude-sonnet-4-5-20250929`, `gpt-5-codex`, `gemini-2.5-pro`) reach a configured model without an
//! edit per version. An exact name wins; then the longest pattern (the most characters that are not `*`); of
//! two patterns as long, the first in the file.

use std::collections::HashMap;

/// The names and patterns of every configured model, resolved to the model's `name`.
#[derive(Clone, Debug, Default)]
pub(super) struct Routes {
    exact: HashMap<String, String>,
    /// The exact names that are aliases, in file order.
    aliases: Vec<String>,
    /// Longest first, file order among equals.
    patterns: Vec<(String, String)>,
}

impl Routes {
    /// The routes of `models`: each `(name, aliases)` in file order. Names and aliases are checked unique where
    /// the file is read.
    pub(super) fn new<'a>(models: impl IntoIterator<Item = (&'a str, &'a [String])>) -> Routes {
        let mut routes = Routes::default();
        for (name, aliases) in models {
            for route in std::iter::once(name).chain(aliases.iter().map(String::as_str)) {
                if route.contains('*') {
                    routes.patterns.push((route.to_owned(), name.to_owned()));
                } else {
                    if route != name {
                        routes.aliases.push(route.to_owned());
                    }
                    routes.exact.insert(route.to_owned(), name.to_owned());
                }
            }
        }
        // Stable: patterns as long keep the file's order.
        routes
            .patterns
            .sort_by_key(|(pattern, _)| std::cmp::Reverse(literal_len(pattern)));
        routes
    }

    /// The configured model `requested` reaches, if any.
    pub(super) fn resolve(&self, requested: &str) -> Option<&str> {
        if let Some(name) = self.exact.get(requested) {
            return Some(name);
        }
        self.patterns
            .iter()
            .find(|(pattern, _)| glob(pattern, requested))
            .map(|(_, name)| name.as_str())
    }

    /// The patterns, for an unknown name's error.
    pub(super) fn patterns(&self) -> impl Iterator<Item = &str> {
        self.patterns.iter().map(|(pattern, _)| pattern.as_str())
    }

    /// The exact names that are aliases (not a model's own name), for an unknown name's error.
    pub(super) fn aliases(&self) -> impl Iterator<Item = &str> {
        self.aliases.iter().map(String::as_str)
    }
}

fn literal_len(pattern: &str) -> usize {
    pattern.chars().filter(|c| *c != '*').count()
}

/// Whether `text` matches `pattern`, where each `*` stands for any run of characters (none included).
pub(crate) fn glob(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let middle: Vec<&str> = parts.collect();
    let Some((last, middle)) = middle.split_last() else {
        // No `*`: the whole text.
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stars_match_any_run_of_characters() {
        assert!(glob("claude-*", "claude-sonnet-4-5-20250929"));
        assert!(glob("claude-*", "claude-"));
        assert!(!glob("claude-*", "claude"));
        assert!(glob("*-mini", "gpt-4o-mini"));
        assert!(glob("gpt-*-mini", "gpt-4o-mini"));
        assert!(!glob("gpt-*-mini", "gpt-4o-mini-2024"));
        assert!(glob("a*b*a", "aba"));
        assert!(!glob("a*a", "a"));
        assert!(glob("*", ""));
        assert!(glob("exact", "exact") && !glob("exact", "exactly"));
    }

    #[test]
    fn an_exact_name_wins_then_the_longest_pattern_then_the_first() {
        let aliases = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let (gpt, gpt4, exact, first, second) = (
            aliases(&["gpt-*", "o3"]),
            aliases(&["gpt-4*"]),
            aliases(&["gpt-4o"]),
            aliases(&["x-*"]),
            aliases(&["x-*"]),
        );
        let routes = Routes::new([
            ("gpt", gpt.as_slice()),
            ("gpt-four", gpt4.as_slice()),
            ("exact", exact.as_slice()),
            ("first", first.as_slice()),
            ("second", second.as_slice()),
        ]);
        assert_eq!(routes.resolve("gpt-5-codex"), Some("gpt"));
        assert_eq!(routes.resolve("gpt-4o-mini"), Some("gpt-four"));
        assert_eq!(routes.resolve("gpt-4o"), Some("exact"));
        assert_eq!(routes.resolve("o3"), Some("gpt"));
        assert_eq!(routes.resolve("gpt"), Some("gpt"));
        assert_eq!(routes.resolve("x-1"), Some("first"));
        assert_eq!(routes.resolve("llama"), None);
    }
}
