//! `cargo xtask tidy`: what no compiler checks about the repository's
//! shape (docs/development.md#repository-checks).
//!
//! - the rules the code cites live in `docs/`, and every link into
//!   `docs/` from code, README or docs resolves to a file and a heading;
//! - nothing cites documents outside the repository ([`OUTSIDE`]);
//! - `docs/` covers its topics and README.md stays short;
//! - no heading names an issue;
//! - no crate has an import cycle between its modules ([`modules`]).
//!
//! The xtask's own tests run these checks, so `cargo xtask test` fails on
//! a broken link or a new cycle.

pub mod modules;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::run::Failed;

/// The most README.md may weigh: what a visitor reads in two minutes.
pub const README_MAX_BYTES: usize = 10_000;

/// How the code once cited rules kept outside the repository (the product
/// spec's sections, the shared folder beside it); written in pieces so
/// that this file does not cite them itself.
pub const OUTSIDE: [&str; 2] = [concat!("SPEC ", "§"), concat!("shared", "/")];

/// What `docs/` must hold: each topic's document.
pub const TOPICS: [&str; 10] = [
    "README.md",
    "architecture.md",
    "provisioning.md",
    "configuration.md",
    "security.md",
    "http-api.md",
    "openapi.json",
    "backends.md",
    "operations.md",
    "development.md",
];

/// The crates whose module graphs must be acyclic: their root files.
pub const CRATE_ROOTS: [&str; 13] = [
    "src/lib.rs",
    "app/src/lib.rs",
    "frontend/src/lib.rs",
    "crates/domain/src/lib.rs",
    "crates/support/src/lib.rs",
    "crates/config/src/lib.rs",
    "crates/mirror/src/lib.rs",
    "crates/proxmox/src/lib.rs",
    "crates/sim/src/lib.rs",
    "crates/sim/src/bin/pvedeck-sim/main.rs",
    "crates/client/src/lib.rs",
    "crates/testkit/src/lib.rs",
    "xtask/src/main.rs",
];

pub fn run(root: &Path) -> Result<(), Failed> {
    for root_file in CRATE_ROOTS {
        let graph = modules::Graph::of_crate(&root.join(root_file))
            .map_err(|e| Failed(format!("{root_file}: {e}")))?;
        println!(
            "    {root_file}: {} modules, {} uses between unrelated modules, {} cycles",
            graph.uses.len(),
            graph.edges().count(),
            graph.cycles().len()
        );
    }
    let problems = problems(root);
    for problem in &problems {
        println!("    {problem}");
    }
    match problems.len() {
        0 => Ok(()),
        n => Err(Failed(format!("{n} problem(s), listed above"))),
    }
}

/// Everything wrong with the repository's shape, one line each.
pub fn problems(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let files = match tracked(root) {
        Ok(files) => files,
        Err(e) => return vec![format!("cannot list the repository's files: {e}")],
    };
    let mut headings = Headings::default();

    for topic in TOPICS {
        if !root.join("docs").join(topic).is_file() {
            out.push(format!("docs/{topic} is missing"));
        }
    }
    match std::fs::metadata(root.join("README.md")) {
        Ok(meta) if meta.len() as usize > README_MAX_BYTES => out.push(format!(
            "README.md is {} bytes, more than {README_MAX_BYTES}: move the detail into docs/",
            meta.len()
        )),
        Ok(_) => {}
        Err(e) => out.push(format!("README.md: {e}")),
    }

    for file in &files {
        let shown = file.display().to_string();
        let Ok(text) = std::fs::read_to_string(root.join(file)) else {
            continue;
        };
        let ext = file.extension().and_then(|e| e.to_str()).unwrap_or("");
        if ext == "md" {
            for (n, line) in text.lines().enumerate() {
                if line.starts_with('#') && names_an_issue(line) {
                    out.push(format!(
                        "{shown}:{}: a heading names an issue: {line}",
                        n + 1
                    ));
                }
            }
            for (n, target) in markdown_links(&text) {
                let base = file.parent().unwrap_or(Path::new(""));
                if let Some(why) = headings.check(root, base, &target, file) {
                    out.push(format!("{shown}:{n}: link {target}: {why}"));
                }
            }
        }
        for (n, line) in text.lines().enumerate() {
            if OUTSIDE.iter().any(|cited| line.contains(cited)) {
                out.push(format!(
                    "{shown}:{}: cites a document outside the repository: {}",
                    n + 1,
                    line.trim()
                ));
            }
            if ext != "md" {
                for target in docs_references(line) {
                    if let Some(why) = headings.check(root, Path::new(""), &target, file) {
                        out.push(format!("{shown}:{}: {target}: {why}", n + 1));
                    }
                }
            }
        }
    }

    for root_file in CRATE_ROOTS {
        match modules::Graph::of_crate(&root.join(root_file)) {
            Ok(graph) => {
                for cycle in graph.cycles() {
                    out.push(format!(
                        "{root_file}: import cycle between modules {}",
                        cycle.join(", ")
                    ));
                }
            }
            Err(e) => out.push(format!("{root_file}: {e}")),
        }
    }
    out
}

/// The repository's own text files: sources, docs, settings; not what
/// builds or installs produce.
fn tracked(root: &Path) -> std::io::Result<Vec<PathBuf>> {
    /// Folders of what builds, installs and runs produce, wherever they are.
    const SKIP_ANY: [&str; 3] = ["target", "node_modules", ".git"];
    /// Folders at these places: a server's data, the README's pictures.
    const SKIP: [&str; 2] = ["data", "docs/images"];
    const TEXT: [&str; 8] = [
        "rs", "md", "toml", "mjs", "sh", "service", "example", "json",
    ];
    let mut out = Vec::new();
    let mut dirs = vec![PathBuf::new()];
    while let Some(dir) = dirs.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(root.join(&dir))?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<Result<_, _>>()?;
        entries.sort();
        for name in entries {
            let rel = dir.join(&name);
            let shown = rel.to_string_lossy();
            let generated = name.to_str().is_some_and(|name| SKIP_ANY.contains(&name));
            if generated || SKIP.iter().any(|s| shown == *s) || shown.ends_with("package-lock.json")
            {
                continue;
            }
            if root.join(&rel).is_dir() {
                dirs.push(rel);
            } else if rel
                .extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| TEXT.contains(&e))
            {
                out.push(rel);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// A heading that names an issue of the tracker (`issue 13`, `part 4`)
/// tells a reader about the project's history, not about pvedeck.
fn names_an_issue(heading: &str) -> bool {
    let lower = heading.to_ascii_lowercase();
    ["issue ", "part "].iter().any(|word| {
        lower
            .match_indices(word)
            .any(|(at, _)| lower[at + word.len()..].starts_with(|c: char| c.is_ascii_digit()))
    })
}

/// `docs/<name>.md#anchor` (or `.json`) as code and settings cite them.
fn docs_references(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("docs/") {
        let after = &rest[at..];
        let end = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || "/._-#".contains(c)))
            .unwrap_or(after.len());
        let reference = after[..end].trim_end_matches(['.', '#']);
        if reference.contains(".md") || reference.ends_with(".json") {
            out.push(reference.to_string());
        }
        rest = &after[end.max(5)..];
    }
    out
}

/// `(line, target)` of each inline link and image in a Markdown text,
/// outside code blocks; web addresses are left out.
fn markdown_links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fenced = false;
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            let target = after[..end].trim();
            if !(target.starts_with("http://")
                || target.starts_with("https://")
                || target.starts_with("mailto:"))
            {
                out.push((n + 1, target.to_string()));
            }
            rest = &after[end..];
        }
    }
    out
}

/// The anchors of Markdown files, read once each.
#[derive(Default)]
struct Headings(BTreeMap<PathBuf, BTreeSet<String>>);

impl Headings {
    /// Why `target` (relative to `base`, or `#anchor` within `from`) does not
    /// resolve, if it does not.
    fn check(&mut self, root: &Path, base: &Path, target: &str, from: &Path) -> Option<String> {
        let (file, anchor) = match target.split_once('#') {
            Some((file, anchor)) => (file, Some(anchor)),
            None => (target, None),
        };
        let file = if file.is_empty() {
            from.to_path_buf()
        } else {
            normalize(&base.join(file))
        };
        if !root.join(&file).exists() {
            return Some(format!("{} does not exist", file.display()));
        }
        let anchor = anchor?;
        if file.extension().is_none_or(|e| e != "md") {
            return None;
        }
        let anchors = self.0.entry(file.clone()).or_insert_with(|| {
            std::fs::read_to_string(root.join(&file))
                .map(|text| anchors(&text))
                .unwrap_or_default()
        });
        (!anchors.contains(anchor)).then(|| format!("{} has no heading #{anchor}", file.display()))
    }
}

/// `a/b/../c` → `a/c`.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The anchors GitHub gives a Markdown file's headings: lower case, spaces
/// to `-`, punctuation but `-` and `_` dropped, repeats numbered.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let title = line.trim_start_matches('#').trim();
        let slug: String = title
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect();
        let n = seen.entry(slug.clone()).or_insert(0);
        out.insert(if *n == 0 {
            slug.clone()
        } else {
            format!("{slug}-{n}")
        });
        *n += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anchors_are_githubs() {
        let got = anchors("# Title\n## `qm create`\n## ALLOW_IPS\n## Title\n```\n# not\n```\n");
        let want: BTreeSet<String> = ["title", "qm-create", "allow_ips", "title-1"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn references_and_links_are_found() {
        // Built at run time: as a literal it would be a broken reference.
        let line = format!(
            "//! (docs/provisioning.md#failure-contract), and {}x.md.",
            "docs/"
        );
        assert_eq!(
            docs_references(&line),
            vec![
                "docs/provisioning.md#failure-contract".to_string(),
                format!("{}x.md", "docs/")
            ]
        );
        assert_eq!(
            markdown_links("see [a](a.md#b) and ![p](images/p.png) or [w](https://x)\n"),
            vec![(1, "a.md#b".to_string()), (1, "images/p.png".to_string())]
        );
        assert!(names_an_issue("## Installing (issue 13, part 1)"));
        assert!(!names_an_issue("## Issues and parts"));
    }

    /// The repository as it is: what `cargo xtask tidy` checks, run by
    /// `cargo xtask test` too.
    #[test]
    fn the_repository_is_tidy() {
        let root = crate::root();
        let problems = problems(&root);
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }
}
