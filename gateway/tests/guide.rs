//! The guide (`docs/`) and the READMEs say what works: every `toml` block in them is a configuration the
//! gateway's own loader accepts, and every relative link reaches a file (and a heading, when it names one).
//! A failure names the page and the line.

use std::path::{Path, PathBuf};

use tower_chat_gateway::config_file::ConfigFile;

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

/// The guide's pages and every README of the repository (build output and installed packages left out).
fn documents() -> Vec<PathBuf> {
    fn walk(dir: &Path, found: &mut Vec<PathBuf>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for path in entries {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                if !matches!(
                    name.as_str(),
                    "target" | "node_modules" | "book" | ".git" | "corpus" | "artifacts"
                ) {
                    walk(&path, found);
                }
            } else if name == "README.md"
                || (path.extension().is_some_and(|e| e == "md")
                    && path.components().any(|c| c.as_os_str() == "docs"))
            {
                found.push(path);
            }
        }
    }
    let mut found = Vec::new();
    walk(&repository(), &mut found);
    let guide = repository().join("docs/src/SUMMARY.md");
    assert!(found.contains(&guide), "no guide at {}", guide.display());
    found
}

fn shown(path: &Path) -> String {
    path.strip_prefix(repository())
        .unwrap_or(path)
        .display()
        .to_string()
}

/// A fenced block: its info string, its first line (1-based, the fence's) and its text with the fence's
/// indentation removed (a block inside a list item is indented).
struct Block {
    info: String,
    line: usize,
    text: String,
}

fn blocks(markdown: &str) -> Vec<Block> {
    let mut found = Vec::new();
    let mut lines = markdown.lines().enumerate();
    while let Some((number, line)) = lines.next() {
        let trimmed = line.trim_start();
        let Some(info) = trimmed.strip_prefix("```") else {
            continue;
        };
        let indent = line.len() - trimmed.len();
        let mut text = String::new();
        for (_, inner) in lines.by_ref() {
            if inner.trim_start().starts_with("```") {
                break;
            }
            text.push_str(inner.get(indent..).unwrap_or(inner.trim_start()));
            text.push('\n');
        }
        found.push(Block {
            info: info.trim().to_owned(),
            line: number + 1,
            text,
        });
    }
    found
}

#[test]
fn every_toml_block_is_a_configuration_the_gateway_loads() {
    let mut checked = 0;
    let mut failures = Vec::new();
    for path in documents() {
        let markdown = std::fs::read_to_string(&path).unwrap();
        for block in blocks(&markdown) {
            let mut tags = block.info.split(',').map(str::trim);
            // `toml,cargo`, `toml,codex`: a Cargo manifest or an agent's configuration, not the gateway's.
            if tags.next() != Some("toml") || tags.any(|tag| tag == "cargo" || tag == "codex") {
                continue;
            }
            checked += 1;
            if let Err(error) = ConfigFile::parse(&block.text, &shown(&path)) {
                let line = error.line().map_or(block.line, |l| block.line + l);
                failures.push(format!("{}:{line}: {}", shown(&path), error.message()));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The guide's pages on configuration have their examples.
    assert!(checked >= 10, "only {checked} toml blocks found");
}

/// GitHub's and mdBook's id of a heading: lower case, punctuation dropped, spaces as hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn headings(markdown: &str) -> Vec<String> {
    let mut fenced = false;
    let mut found = Vec::new();
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            let text = line.trim_start_matches('#');
            if text.starts_with(' ') {
                found.push(slug(text));
            }
        }
    }
    found
}

/// Each link target on each line outside code: `[text](target)` and `href="target"`, with its line.
fn links(markdown: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let mut fenced = false;
    for (number, line) in markdown.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Inline code may hold brackets that are not links.
        let prose: String = line
            .split('`')
            .enumerate()
            .filter(|(i, _)| i % 2 == 0)
            .map(|(_, part)| part)
            .collect::<Vec<_>>()
            .join(" ");
        for (open, close) in [("](", ')'), ("href=\"", '"')] {
            let mut rest = prose.as_str();
            while let Some(start) = rest.find(open) {
                rest = &rest[start + open.len()..];
                if let Some(end) = rest.find(close) {
                    found.push((number + 1, rest[..end].to_owned()));
                    rest = &rest[end..];
                }
            }
        }
    }
    found
}

#[test]
fn every_relative_link_reaches_its_file_and_heading() {
    let mut checked = 0;
    let mut failures = Vec::new();
    for path in documents() {
        let markdown = std::fs::read_to_string(&path).unwrap();
        for (line, target) in links(&markdown) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let at = format!("{}:{line}: `{target}`", shown(&path));
            if target.starts_with('/') {
                failures.push(format!("{at} is absolute; links are relative"));
                continue;
            }
            let (file, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let file = if file.is_empty() {
                path.clone()
            } else {
                path.parent().unwrap().join(file)
            };
            if !file.exists() {
                failures.push(format!("{at}: no such file"));
                continue;
            }
            if !anchor.is_empty() && file.extension().is_some_and(|e| e == "md") {
                let text = std::fs::read_to_string(&file).unwrap();
                if !headings(&text).iter().any(|h| h == anchor) {
                    failures.push(format!("{at}: no heading `#{anchor}` in {}", shown(&file)));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(checked >= 50, "only {checked} links found");
}

#[test]
fn every_guide_page_is_in_the_summary() {
    let src = repository().join("docs/src");
    let summary = std::fs::read_to_string(src.join("SUMMARY.md")).unwrap();
    let listed: Vec<String> = links(&summary).into_iter().map(|(_, t)| t).collect();
    let missing: Vec<String> = documents()
        .into_iter()
        .filter(|p| p.starts_with(&src) && !p.ends_with("SUMMARY.md"))
        .map(|p| p.strip_prefix(&src).unwrap().display().to_string())
        .filter(|page| !listed.contains(page))
        .collect();
    assert!(
        missing.is_empty(),
        "pages not in docs/src/SUMMARY.md: {missing:?}"
    );
}
