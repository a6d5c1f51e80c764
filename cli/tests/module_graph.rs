//! The import check of `cli/src`: its file-level module graph has no cycle, and the CLI reaches
//! the journal through its public API (no `babysitter_journal::fs` internals).
//!
//! A cycle between modules means neither can be read, tested or moved without the other; the
//! compat commands once had several (the session decision, the stop hook and `run:create` each
//! reaching into the others, every command into the crate root). This keeps them out.
//!
//! The scanner is deliberately small (no rustc, no syn): every `.rs` file under `src/` is a
//! module (`a/b.rs` is `a::b`, `main.rs` the root); comments, strings and char literals are
//! blanked; a file depends on another when it names it — a `use` path (each branch of a `{…}`
//! tree) or a qualified path in code — starting at `crate`, `super`, `self` or a child module.
//! A path names the deepest file module it walks through. Inline modules (`mod tests { … }`)
//! belong to their file, with `super` resolved from inside them. `mod x;` alone is not a
//! dependency, and macros (`errln!`) are not followed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

#[test]
fn cli_src_has_no_import_cycle() {
    let graph = Graph::of_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    // The scanner must see the crate, or the check passes vacuously.
    assert!(graph.files.len() > 50, "found only {:?}", graph.files);
    assert!(
        graph.edges.len() > 50,
        "found only {} edges",
        graph.edges.len()
    );
    let cycles = graph.cycles();
    assert!(
        cycles.is_empty(),
        "cli/src's module graph has {} cycle(s):\n\n{}",
        cycles.len(),
        cycles
            .iter()
            .map(|c| graph.describe(c))
            .collect::<Vec<_>>()
            .join("\n\n")
    );
}

/// `babysitter_journal::fs` names the CLI may use: the filesystem backend's public API — the
/// store, its runtime (which owns the run locks, deferred writes and commit-log settling), a
/// held run and who holds one, and the babysitter layout's own file primitives (`writeFileAtomic`,
/// the stale-lock pid test). The backend's modules are private, so nothing else is reachable;
/// this list makes any widening a reviewed change here. Housekeeping (descriptor reservation,
/// settling) is not on it: it happens through `FsRuntime`.
const JOURNAL_FS_PUBLIC: &[&str] = &[
    "FsStore",
    "FsRuntime",
    "HeldRun",
    "RunHolder",
    "run_lock_holder",
    "pid_alive",
    "write_atomic",
];

#[test]
fn cli_uses_no_journal_fs_internals() {
    let graph = Graph::of_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    let mut found = Vec::new();
    for (file, text) in &graph.texts {
        for path in all_paths(text) {
            if let ["babysitter_journal", "fs", name, ..] = path.segments_str().as_slice()
                && !JOURNAL_FS_PUBLIC.contains(name)
            {
                found.push(format!("{file}:{} {}", path.line, path.segments.join("::")));
            }
        }
    }
    assert!(
        found.is_empty(),
        "journal fs internals used by the CLI:\n{}",
        found.join("\n")
    );
}

/// One file-level module graph: `files` are paths relative to `src/`.
struct Graph {
    files: BTreeSet<String>,
    texts: BTreeMap<String, String>,
    /// `(from, to)` → the first reference that makes the edge (`line path`).
    edges: BTreeMap<(String, String), String>,
}

impl Graph {
    fn of_dir(src: &Path) -> Graph {
        let mut files = BTreeMap::new();
        let mut stack = vec![src.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).expect("src/ is readable") {
                let path = entry.expect("src/ is readable").path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    let rel = path.strip_prefix(src).expect("under src/");
                    let text = std::fs::read_to_string(&path).expect("source is UTF-8");
                    files.insert(rel.to_string_lossy().replace('\\', "/"), text);
                }
            }
        }
        Graph::of_files(files)
    }

    fn of_files(sources: BTreeMap<String, String>) -> Graph {
        let modules: BTreeMap<Vec<String>, String> =
            sources.keys().map(|f| (module_of(f), f.clone())).collect();
        let mut g = Graph {
            files: sources.keys().cloned().collect(),
            texts: BTreeMap::new(),
            edges: BTreeMap::new(),
        };
        for (file, source) in sources {
            let text = clean(&source);
            let here = module_of(&file);
            let inline = inline_modules(&text);
            for path in all_paths(&text) {
                // The module the path is written in: the file's, plus any inline modules.
                let mut at = here.clone();
                at.extend(
                    inline
                        .iter()
                        .filter(|(_, range)| range.contains(&path.offset))
                        .map(|(name, _)| name.clone()),
                );
                let Some(target) = resolve(&at, &path.segments, &modules) else {
                    continue;
                };
                if target != file {
                    g.edges
                        .entry((file.clone(), target))
                        .or_insert_with(|| format!("{} {}", path.line, path.segments.join("::")));
                }
            }
            g.texts.insert(file, text);
        }
        g
    }

    /// Every strongly connected set of more than one file, each as one cycle through it.
    fn cycles(&self) -> Vec<Vec<String>> {
        let next = |v: &str| -> Vec<&str> {
            self.edges
                .keys()
                .filter(|(a, _)| a == v)
                .map(|(_, b)| b.as_str())
                .collect()
        };
        let mut seen = BTreeSet::new();
        let mut cycles = Vec::new();
        for start in &self.files {
            if seen.contains(start.as_str()) {
                continue;
            }
            // The shortest way back to `start` (breadth first), if there is one.
            let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
            let mut queue = std::collections::VecDeque::from([start.as_str()]);
            let mut back = None;
            while let Some(v) = queue.pop_front() {
                for w in next(v) {
                    if w == start {
                        back = Some(v);
                        queue.clear();
                        break;
                    }
                    if !came_from.contains_key(w) {
                        came_from.insert(w, v);
                        queue.push_back(w);
                    }
                }
            }
            let Some(mut v) = back else { continue };
            let mut cycle = vec![v.to_owned()];
            while v != start {
                v = came_from[v];
                cycle.push(v.to_owned());
            }
            cycle.reverse();
            seen.extend(cycle.iter().cloned());
            cycles.push(cycle);
        }
        cycles
    }

    /// `a.rs -> b.rs (line path) -> … -> a.rs`.
    fn describe(&self, cycle: &[String]) -> String {
        let mut out = String::new();
        for (i, from) in cycle.iter().enumerate() {
            let to = &cycle[(i + 1) % cycle.len()];
            let why = &self.edges[&(from.clone(), to.clone())];
            out.push_str(&format!("  {from} -> {to}   ({from}:{why})\n"));
        }
        out
    }
}

/// `compat/run/iterate.rs` → `[compat, run, iterate]`; `main.rs` → `[]`.
fn module_of(file: &str) -> Vec<String> {
    let stem = file.trim_end_matches(".rs").trim_end_matches("/mod");
    match stem {
        "main" | "lib" => Vec::new(),
        s => s.split('/').map(str::to_owned).collect(),
    }
}

/// The file a path written in module `at` names: the deepest file module it walks through.
/// `None` for paths into other crates (or local names that are not modules).
fn resolve(
    at: &[String],
    segments: &[String],
    modules: &BTreeMap<Vec<String>, String>,
) -> Option<String> {
    let mut abs: Vec<String> = at.to_vec();
    let mut rest = segments;
    match segments.first().map(String::as_str) {
        Some("crate") => {
            abs.clear();
            rest = &segments[1..];
        }
        Some("self" | "super") => {
            while let Some(s @ ("self" | "super")) = rest.first().map(String::as_str) {
                if s == "super" {
                    abs.pop()?;
                }
                rest = &rest[1..];
            }
        }
        // A child module of the file's module (inline module paths stay within their file).
        Some(first) => {
            let mut child = abs.clone();
            child.push(first.to_owned());
            modules.get(&child)?;
        }
        None => return None,
    }
    abs.extend(rest.iter().cloned());
    (0..=abs.len())
        .rev()
        .find_map(|n| modules.get(&abs[..n]))
        .cloned()
}

/// Comments, string and char literals replaced by spaces (newlines kept, for line numbers).
fn clean(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let blank = |out: &mut String, s: &[char]| {
        out.extend(s.iter().map(|&ch| if ch == '\n' { '\n' } else { ' ' }));
    };
    while i < c.len() {
        let at = |k: usize| c.get(i + k).copied().unwrap_or('\0');
        let end = if at(0) == '/' && at(1) == '/' {
            (i..c.len()).find(|&j| c[j] == '\n').unwrap_or(c.len())
        } else if at(0) == '/' && at(1) == '*' {
            let (mut j, mut depth) = (i + 2, 1);
            while j < c.len() && depth > 0 {
                match (c[j], c.get(j + 1).copied().unwrap_or('\0')) {
                    ('/', '*') => (depth, j) = (depth + 1, j + 2),
                    ('*', '/') => (depth, j) = (depth - 1, j + 2),
                    _ => j += 1,
                }
            }
            j
        } else if at(0) == 'r'
            && (at(1) == '"' || (at(1) == '#' && (at(2) == '#' || at(2) == '"')))
            && !(i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_'))
        {
            let hashes = (i + 1..c.len()).take_while(|&j| c[j] == '#').count();
            let close: String = std::iter::once('"')
                .chain("#".repeat(hashes).chars())
                .collect();
            let body = i + 2 + hashes;
            let rest: String = c[body..].iter().collect();
            body + rest.find(&close).map_or(rest.chars().count(), |k| {
                rest[..k].chars().count() + close.len()
            })
        } else if at(0) == '"' {
            let mut j = i + 1;
            while j < c.len() && c[j] != '"' {
                j += if c[j] == '\\' { 2 } else { 1 };
            }
            j + 1
        } else if at(0) == '\'' && (at(2) == '\'' || (at(1) == '\\' && at(3) == '\'')) {
            i + if at(1) == '\\' { 4 } else { 3 }
        } else if at(0) == '\'' && at(1) == '\\' {
            // `'\u{…}'`
            (i + 2..c.len())
                .find(|&j| c[j] == '\'')
                .map_or(c.len(), |j| j + 1)
        } else {
            out.push(c[i]);
            i += 1;
            continue;
        };
        let end = end.min(c.len());
        blank(&mut out, &c[i..end]);
        i = end;
    }
    out
}

/// Inline modules (`mod name { … }`) and the byte range of their bodies.
fn inline_modules(text: &str) -> Vec<(String, std::ops::Range<usize>)> {
    let b = text.as_bytes();
    let mut found = Vec::new();
    for (start, _) in text.match_indices("mod ") {
        if start > 0 && (b[start - 1].is_ascii_alphanumeric() || b[start - 1] == b'_') {
            continue;
        }
        let rest = &text[start + 4..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let after = rest[name.len()..].trim_start();
        if name.is_empty() || !after.starts_with('{') {
            continue;
        }
        let open = start + 4 + (rest.len() - after.len());
        let mut depth = 0;
        let close = (open..b.len()).find(|&j| {
            match b[j] {
                b'{' => depth += 1,
                b'}' => depth -= 1,
                _ => {}
            }
            depth == 0
        });
        found.push((name, open..close.unwrap_or(b.len())));
    }
    found
}

/// A path as written (`use` trees expanded), where it starts and on which line.
struct Written {
    segments: Vec<String>,
    offset: usize,
    line: usize,
}

impl Written {
    fn segments_str(&self) -> Vec<&str> {
        self.segments.iter().map(String::as_str).collect()
    }
}

/// Every `::` path of a cleaned file: each branch of each `use` tree, and each qualified path in
/// code (visibility restrictions `pub(in …)` are not paths).
fn all_paths(text: &str) -> Vec<Written> {
    let tokens = tokens(text);
    let line = |offset: usize| text[..offset].matches('\n').count() + 1;
    let mut out = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let (tok, offset) = &tokens[i];
        if tok == "use" {
            let end = (i..tokens.len())
                .find(|&j| tokens[j].0 == ";")
                .unwrap_or(tokens.len());
            let tree: Vec<&str> = tokens[i + 1..end].iter().map(|(t, _)| t.as_str()).collect();
            for segments in expand(&tree) {
                out.push(Written {
                    segments,
                    offset: *offset,
                    line: line(*offset),
                });
            }
            i = end;
        } else if tok == "in" && i > 0 && tokens[i - 1].0 == "(" {
            // `pub(in crate::a)`: skip to the `)`.
            i = (i..tokens.len())
                .find(|&j| tokens[j].0 == ")")
                .unwrap_or(tokens.len());
        } else if is_ident(tok)
            && tokens.get(i + 1).is_some_and(|t| t.0 == "::")
            && (i == 0 || tokens[i - 1].0 != "::")
        {
            let mut segments = vec![tok.clone()];
            let mut j = i + 1;
            while tokens.get(j).is_some_and(|t| t.0 == "::")
                && let Some((next, _)) = tokens.get(j + 1).filter(|t| is_ident(&t.0))
            {
                segments.push(next.clone());
                j += 2;
            }
            out.push(Written {
                segments,
                offset: *offset,
                line: line(*offset),
            });
            i = j;
        } else {
            i += 1;
        }
    }
    out
}

/// The paths of a `use` tree: `a::{b, c::{d as e, self}}` → `a::b`, `a::c::d`, `a::c`.
fn expand(tree: &[&str]) -> Vec<Vec<String>> {
    let mut prefix: Vec<String> = Vec::new();
    for (i, t) in tree.iter().enumerate() {
        match *t {
            "{" => return expand_group(&prefix, &tree[i + 1..]),
            "as" | "*" => break,
            t if is_ident(t) => prefix.push(t.to_owned()),
            _ => {}
        }
    }
    if prefix.is_empty() {
        Vec::new()
    } else {
        vec![prefix]
    }
}

/// The branches of a `{…}` group (`inner` starts after its `{`), each under `prefix`.
fn expand_group(prefix: &[String], inner: &[&str]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (j, t) in inner.iter().enumerate() {
        let end_of_branch = match *t {
            "{" => {
                depth += 1;
                false
            }
            "}" if depth == 0 => true,
            "}" => {
                depth -= 1;
                false
            }
            "," => depth == 0,
            _ => false,
        };
        if end_of_branch {
            for branch in expand(&inner[start..j]) {
                let mut p = prefix.to_vec();
                if branch != ["self"] {
                    p.extend(branch);
                }
                out.push(p);
            }
            start = j + 1;
            if *t == "}" {
                break;
            }
        }
    }
    out
}

/// Identifiers and punctuation (`::` as one token) with their byte offsets.
fn tokens(text: &str) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    let mut it = text.char_indices().peekable();
    while let Some((i, ch)) = it.next() {
        if ch.is_alphanumeric() || ch == '_' {
            let mut end = i + ch.len_utf8();
            while let Some(&(j, c)) = it.peek().filter(|(_, c)| c.is_alphanumeric() || *c == '_') {
                end = j + c.len_utf8();
                it.next();
            }
            out.push((text[i..end].to_owned(), i));
        } else if ch == ':' && it.peek().is_some_and(|&(_, c)| c == ':') {
            it.next();
            out.push(("::".to_owned(), i));
        } else if !ch.is_whitespace() {
            out.push((ch.to_string(), i));
        }
    }
    out
}

fn is_ident(t: &str) -> bool {
    t.chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
}

/// The scanner's own checks, on made-up crates: each can fail.
mod scanner {
    use super::*;

    fn graph(files: &[(&str, &str)]) -> Graph {
        Graph::of_files(
            files
                .iter()
                .map(|(p, t)| (p.to_string(), t.to_string()))
                .collect(),
        )
    }

    fn edges(g: &Graph) -> Vec<String> {
        g.edges.keys().map(|(a, b)| format!("{a} -> {b}")).collect()
    }

    #[test]
    fn finds_a_cycle_through_use_trees_and_qualified_paths() {
        let g = graph(&[
            ("main.rs", "mod a;\nmod b;\nfn main() { a::go(); }"),
            (
                "a.rs",
                "use crate::{b::{self, Thing}};\npub fn go() { b::run(); }",
            ),
            (
                "b.rs",
                "pub fn run() { super::a::go(); }\npub struct Thing;",
            ),
        ]);
        assert_eq!(
            edges(&g),
            ["a.rs -> b.rs", "b.rs -> a.rs", "main.rs -> a.rs"]
        );
        let cycles = g.cycles();
        assert_eq!(cycles, vec![vec!["a.rs".to_owned(), "b.rs".to_owned()]]);
        assert!(g.describe(&cycles[0]).contains("(b.rs:1 super::a::go)"));
    }

    #[test]
    fn ignores_comments_strings_visibility_and_resolves_inline_modules() {
        let g = graph(&[
            ("main.rs", "mod a;\nmod b;\nuse a::A;"),
            (
                "a.rs",
                "// crate::b::x\n/* super::b::y /* nested */ */\npub(in crate::b) struct A;\n\
                 const S: &str = \"crate::b::z\";\nconst R: &str = r#\"super::b\"#;\n\
                 const C: char = '{';\nfn f<'a>(x: &'a str) -> &'a str { x }\n\
                 #[cfg(test)]\nmod tests {\n    use super::*;\n    fn t() { super::A; }\n}",
            ),
            ("b.rs", "pub fn x() {}"),
        ]);
        assert_eq!(edges(&g), ["main.rs -> a.rs"]);
    }

    #[test]
    fn resolves_child_paths_and_nested_files() {
        let g = graph(&[
            ("main.rs", "mod a;\nmod c;"),
            (
                "a.rs",
                "mod b;\npub use b::run as go;\nfn f() { b::helper(); }",
            ),
            ("a/b.rs", "pub fn run() { std::process::exit(0) }"),
            ("c.rs", "use crate::a as top;\nuse crate::a::b::{run as r};"),
        ]);
        assert_eq!(
            edges(&g),
            ["a.rs -> a/b.rs", "c.rs -> a.rs", "c.rs -> a/b.rs"]
        );
        assert!(g.cycles().is_empty());
    }

    #[test]
    fn finds_journal_fs_paths_in_use_trees() {
        let paths = all_paths(&clean(
            "use babysitter_journal::{EventType, fs::{FsStore, pid_alive}};",
        ));
        let names: Vec<String> = paths.iter().map(|p| p.segments.join("::")).collect();
        assert_eq!(
            names,
            [
                "babysitter_journal::EventType",
                "babysitter_journal::fs::FsStore",
                "babysitter_journal::fs::pid_alive"
            ]
        );
    }
}
