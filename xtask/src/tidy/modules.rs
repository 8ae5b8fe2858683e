//! The module graph of a crate, read from its sources, and the cycles in
//! it.
//!
//! A module is a file (`engine/install.rs`, `engine/mod.rs`); modules
//! written inline (`mod tests { … }`) belong to their file. Module `a`
//! uses module `b` when a path in `a` — in a `use` item or in the code —
//! names `b` or an item of `b` through `crate::…` or `super::…`. A module
//! may use its ancestors (what `engine/mod.rs` defines is every engine
//! module's) and its descendants; between any two other modules, uses go
//! one way only. A cycle among them is reported with the modules in it.
//!
//! This reads paths, not types: a use through a re-export (`pub use`) is
//! a use of the module that re-exports. The project keeps no re-export
//! that would hide a cycle (docs/architecture.md#rules).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A crate's modules (by path, `engine::install`; the root is `""`) and
/// what each uses.
#[derive(Debug, Default)]
pub struct Graph {
    pub uses: BTreeMap<String, BTreeSet<String>>,
}

impl Graph {
    /// The crate whose root file is `root_file` (`lib.rs`, `main.rs`), its
    /// modules in the directory beside it.
    pub fn of_crate(root_file: &Path) -> std::io::Result<Graph> {
        let dir = root_file.parent().unwrap_or(Path::new("."));
        let mut files = BTreeMap::new();
        files.insert(String::new(), std::fs::read_to_string(root_file)?);
        collect(dir, dir, root_file, &mut files)?;
        Ok(Graph::of_files(&files))
    }

    /// The graph of module sources given by module path.
    pub fn of_files(files: &BTreeMap<String, String>) -> Graph {
        let modules: BTreeSet<&str> = files.keys().map(String::as_str).collect();
        let mut uses = BTreeMap::new();
        for (module, source) in files {
            let mut used = BTreeSet::new();
            for path in paths(module, &strip(source)) {
                if let Some(target) = resolve(&modules, &path)
                    && !related(module, target)
                {
                    used.insert(target.to_string());
                }
            }
            uses.insert(module.clone(), used);
        }
        Graph { uses }
    }

    /// Every set of two or more modules that use each other, in some order
    /// (Tarjan's strongly connected components).
    pub fn cycles(&self) -> Vec<Vec<String>> {
        struct Walk<'a> {
            graph: &'a Graph,
            index: BTreeMap<&'a str, usize>,
            low: BTreeMap<&'a str, usize>,
            stack: Vec<&'a str>,
            on_stack: BTreeSet<&'a str>,
            found: Vec<Vec<String>>,
        }
        impl<'a> Walk<'a> {
            fn visit(&mut self, v: &'a str) {
                let n = self.index.len();
                self.index.insert(v, n);
                self.low.insert(v, n);
                self.stack.push(v);
                self.on_stack.insert(v);
                for w in self.graph.uses.get(v).into_iter().flatten() {
                    let w = w.as_str();
                    if !self.index.contains_key(w) {
                        self.visit(w);
                        let low = self.low[v].min(self.low[w]);
                        self.low.insert(v, low);
                    } else if self.on_stack.contains(w) {
                        let low = self.low[v].min(self.index[w]);
                        self.low.insert(v, low);
                    }
                }
                if self.low[v] == self.index[v] {
                    let mut component = Vec::new();
                    while let Some(w) = self.stack.pop() {
                        self.on_stack.remove(w);
                        component.push(w.to_string());
                        if w == v {
                            break;
                        }
                    }
                    if component.len() > 1 {
                        component.sort();
                        self.found.push(component);
                    }
                }
            }
        }
        let mut walk = Walk {
            graph: self,
            index: BTreeMap::new(),
            low: BTreeMap::new(),
            stack: Vec::new(),
            on_stack: BTreeSet::new(),
            found: Vec::new(),
        };
        for v in self.uses.keys() {
            if !walk.index.contains_key(v.as_str()) {
                walk.visit(v);
            }
        }
        walk.found
    }

    /// The uses between modules, as `a -> b` lines.
    pub fn edges(&self) -> impl Iterator<Item = (&str, &str)> {
        self.uses
            .iter()
            .flat_map(|(a, bs)| bs.iter().map(move |b| (a.as_str(), b.as_str())))
    }
}

/// Reads the module files under `dir` into `files` by module path. A
/// directory `bin/` holds other crates (binaries) and is not walked; nor
/// is the root file itself.
fn collect(
    base: &Path,
    dir: &Path,
    root_file: &Path,
    files: &mut BTreeMap<String, String>,
) -> std::io::Result<()> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    entries.sort();
    for path in entries {
        if path.is_dir() {
            if dir == base && path.file_name().is_some_and(|n| n == "bin") {
                continue;
            }
            collect(base, &path, root_file, files)?;
        } else if path.extension().is_some_and(|e| e == "rs")
            && path != root_file
            && !(dir == base
                && path
                    .file_name()
                    .is_some_and(|n| n == "main.rs" || n == "lib.rs"))
        {
            let rel = path.strip_prefix(base).unwrap_or(&path).with_extension("");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if parts.last().is_some_and(|p| p == "mod") {
                parts.pop();
            }
            files.insert(parts.join("::"), std::fs::read_to_string(&path)?);
        }
    }
    Ok(())
}

/// `a` and `b` are the same module or one contains the other.
fn related(a: &str, b: &str) -> bool {
    let within = |inner: &str, outer: &str| {
        outer.is_empty() || inner == outer || inner.starts_with(&format!("{outer}::"))
    };
    within(a, b) || within(b, a)
}

/// The longest module that `path` (absolute, from the crate root) names or
/// names an item of.
fn resolve<'a>(modules: &BTreeSet<&'a str>, path: &[String]) -> Option<&'a str> {
    (0..=path.len()).rev().find_map(|n| {
        let candidate = path[..n].join("::");
        modules.get(candidate.as_str()).copied()
    })
}

/// Source without comments, strings and character literals, which may
/// hold anything that looks like a path.
fn strip(source: &str) -> String {
    let chars: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && raw_string_at(&chars, i) {
            i += 1;
            let mut hashes = 0;
            while chars.get(i) == Some(&'#') {
                hashes += 1;
                i += 1;
            }
            i += 1;
            while i < chars.len() {
                if chars[i] == '"' && (1..=hashes).all(|k| chars.get(i + k) == Some(&'#')) {
                    i += 1 + hashes;
                    break;
                }
                i += 1;
            }
            out.push_str("\"\"");
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' && char_literal_len(&chars, i).is_some() {
            i += char_literal_len(&chars, i).unwrap_or(1);
            out.push_str("' '");
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// `r"…"` or `r#"…"#` starts at `i` (and is not the end of an identifier).
fn raw_string_at(chars: &[char], i: usize) -> bool {
    let before = i.checked_sub(1).map(|j| chars[j]);
    if before.is_some_and(|b| b.is_alphanumeric() || b == '_') {
        return false;
    }
    let mut j = i + 1;
    while chars.get(j) == Some(&'#') {
        j += 1;
    }
    chars.get(j) == Some(&'"')
}

/// The length of a character literal at `i` (`'a'`, `'\n'`, `'\u{1F600}'`),
/// or `None` for a lifetime.
fn char_literal_len(chars: &[char], i: usize) -> Option<usize> {
    match chars.get(i + 1)? {
        '\\' => {
            let end = (i + 2..chars.len().min(i + 12)).find(|&j| chars[j] == '\'')?;
            Some(end - i + 1)
        }
        _ => (chars.get(i + 2) == Some(&'\'')).then_some(3),
    }
}

/// Every path through `crate::` or `super::` in `source` (of `module`),
/// made absolute. `use` trees are expanded (`crate::{a, b::c}`).
fn paths(module: &str, source: &str) -> Vec<Vec<String>> {
    let base: Vec<String> = if module.is_empty() {
        Vec::new()
    } else {
        module.split("::").map(str::to_string).collect()
    };
    let tokens = tokens(source);
    let mut out = Vec::new();
    // Inline modules (`mod tests {`) shift what `super` means.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < tokens.len() {
        let t = tokens[i].as_str();
        match t {
            "{" => depth += 1,
            "}" => {
                depth = depth.saturating_sub(1);
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
            }
            "mod" if tokens.get(i + 2).is_some_and(|t| t == "{") => {
                inline.push((tokens[i + 1].clone(), depth));
            }
            "crate" | "super" if tokens.get(i + 1).is_some_and(|t| t == "::") => {
                let here: Vec<String> = base
                    .iter()
                    .cloned()
                    .chain(inline.iter().map(|(name, _)| name.clone()))
                    .collect();
                let (tree, next) = use_tree(&tokens, i);
                for relative in tree {
                    if let Some(absolute) = absolute(&here, &relative) {
                        out.push(absolute);
                    }
                }
                i = next;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// `crate::a::b` or `super::super::c` from the module at `here`.
fn absolute(here: &[String], relative: &[String]) -> Option<Vec<String>> {
    let mut at: Vec<String> = here.to_vec();
    let mut rest = relative;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            at.clear();
            rest = &rest[1..];
        }
        Some("super") => {
            while rest.first().is_some_and(|s| s == "super") {
                at.pop()?;
                rest = &rest[1..];
            }
        }
        _ => return None,
    }
    at.extend(rest.iter().filter(|s| *s != "self").cloned());
    Some(at)
}

/// The paths of the use tree (or plain path) starting at `tokens[i]`, and
/// the index after it.
fn use_tree(tokens: &[String], mut i: usize) -> (Vec<Vec<String>>, usize) {
    let mut prefix = Vec::new();
    loop {
        let Some(t) = tokens.get(i) else {
            return (vec![prefix], i);
        };
        if t == "{" {
            let mut out = Vec::new();
            i += 1;
            loop {
                match tokens.get(i).map(String::as_str) {
                    None => return (out, i),
                    Some("}") => return (out, i + 1),
                    Some(",") => i += 1,
                    Some(_) => {
                        let (subs, next) = use_tree(tokens, i);
                        for sub in subs {
                            let mut path = prefix.clone();
                            path.extend(sub);
                            out.push(path);
                        }
                        // A `use` subtree ends at `,` or `}`; skip what a
                        // rename (`as x`) or glob left.
                        i = next;
                        while let Some(t) = tokens.get(i)
                            && t != ","
                            && t != "}"
                        {
                            i += 1;
                        }
                    }
                }
            }
        }
        if is_ident(t) {
            prefix.push(t.clone());
            i += 1;
            if tokens.get(i).is_some_and(|t| t == "::") {
                i += 1;
                continue;
            }
        }
        return (vec![prefix], i);
    }
}

fn is_ident(t: &str) -> bool {
    t.chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
        && t.chars().all(|c| c.is_alphanumeric() || c == '_')
}

/// Identifiers, `::` and single punctuation characters.
fn tokens(source: &str) -> Vec<String> {
    let chars: Vec<char> = source.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(chars[start..i].iter().collect());
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            out.push("::".to_string());
            i += 2;
        } else if c.is_whitespace() {
            i += 1;
        } else {
            out.push(c.to_string());
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(files: &[(&str, &str)]) -> Graph {
        Graph::of_files(
            &files
                .iter()
                .map(|(m, s)| (m.to_string(), s.to_string()))
                .collect(),
        )
    }

    #[test]
    fn siblings_that_use_each_other_are_a_cycle() {
        let g = graph(&[
            ("", "mod a; mod b; mod c;"),
            ("a", "use super::b::Thing; fn f() { crate::c::go(); }"),
            ("b", "use crate::{a::{self, Other}, c};"),
            (
                "c",
                "// crate::a::X in a comment\nconst S: &str = \"crate::a::Y\";",
            ),
        ]);
        assert_eq!(g.cycles(), vec![vec!["a".to_string(), "b".to_string()]]);
        assert!(g.uses["c"].is_empty(), "comments and strings are no uses");
    }

    #[test]
    fn parents_children_and_test_modules_are_no_cycle() {
        let g = graph(&[
            ("", "mod engine;"),
            (
                "engine",
                "mod install; pub struct Engine; use install::Step;",
            ),
            ("engine::install", "use super::Engine; pub struct Step;"),
            (
                "engine::report",
                "mod tests { use super::super::install::Step; use super::*; }",
            ),
            (
                "engine::other",
                "fn f() { let _ = crate::engine::report::x; }",
            ),
        ]);
        assert!(g.cycles().is_empty(), "{g:?}");
        assert_eq!(
            g.uses["engine::report"],
            BTreeSet::from(["engine::install".to_string()])
        );
    }

    #[test]
    fn a_longer_cycle_is_found_whole() {
        let g = graph(&[
            ("a", "use crate::b::X;"),
            ("b", "use crate::c::X;"),
            ("c", "use crate::a::X; use crate::d::Y;"),
            ("d", ""),
        ]);
        assert_eq!(
            g.cycles(),
            vec![vec!["a".to_string(), "b".to_string(), "c".to_string()]]
        );
    }
}
