//! `babysitter compress-output <command> [args…]` (spec `babysitter-core.md` §5.5): runs a command
//! (no shell, 30 s, at most 10 MiB of output) and prints a condensed form of its stdout for an
//! agent's context — what `hook:run --hook-type pre-tool-use` rewrites simple `git`, `ls`, `grep`
//! and `diff` Bash commands to. stderr passes through; the exit code is the command's.
//!
//! The condensed forms are the reference's: `git status` as staged / unstaged / untracked counts
//! with the first names, `git diff` / `show` as the changed lines per file, `git log` as short
//! entries, `ls -l` as names and sizes with a summary, grep matches grouped by file, `diff` as
//! per-file counts and first changes, anything else capped at 200 lines. Difference (fixed, in
//! `docs/compatibility.md`): the output of `cat`, `head`, `tail`, `less`, `more` passes unchanged —
//! the reference strips comment lines from a file read this way, and an agent that edits the file
//! from that view deletes its comments.

use std::collections::BTreeMap;
use std::process::Stdio;

use tokio::io::AsyncReadExt as _;

use crate::compat::output;

const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);
const MAX_OUTPUT: usize = 10 * 1024 * 1024;

/// The command families the hook rewrites (`cat` & co. are not rewritten; see the module docs).
pub fn family(command: &str) -> &'static str {
    let first = command
        .split_whitespace()
        .next()
        .unwrap_or("")
        .to_lowercase();
    match first.as_str() {
        "git" => "git",
        "ls" | "dir" => "ls",
        "grep" | "rg" | "ag" => "grep",
        "diff" | "delta" => "diff",
        "cat" | "head" | "tail" | "less" | "more" => "read",
        _ => "unknown",
    }
}

pub async fn run(args: &[String]) -> u8 {
    let Some((bin, rest)) = args.split_first() else {
        errln!("Error: compress-output requires a command");
        return 1;
    };
    let spawned = tokio::process::Command::new(bin)
        .args(rest)
        .stdin(Stdio::inherit())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            errln!("compress-output: cannot run {bin}: {e}");
            return 1;
        }
    };
    let (Some(mut out), Some(mut err)) = (child.stdout.take(), child.stderr.take()) else {
        errln!("compress-output: no pipes to {bin}");
        return 1;
    };
    let work = async {
        let mut stdout = Vec::new();
        let mut stderr = Vec::new();
        let limit = (MAX_OUTPUT + 1) as u64;
        let mut out = (&mut out).take(limit);
        let mut err = (&mut err).take(limit);
        let (a, b) = tokio::join!(out.read_to_end(&mut stdout), err.read_to_end(&mut stderr));
        a.and(b)?;
        let status = child.wait().await?;
        Ok::<_, std::io::Error>((stdout, stderr, status))
    };
    let (stdout, stderr, status) = match tokio::time::timeout(TIMEOUT, work).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            errln!("compress-output: {bin}: {e}");
            return 1;
        }
        Err(_) => {
            errln!(
                "compress-output: {bin} timed out after {} s",
                TIMEOUT.as_secs()
            );
            return 1;
        }
    };
    if stdout.len() > MAX_OUTPUT || stderr.len() > MAX_OUTPUT {
        errln!("compress-output: {bin} wrote more than {MAX_OUTPUT} bytes");
        return 1;
    }
    let stderr = String::from_utf8_lossy(&stderr);
    if !stderr.is_empty() {
        output::write_err(format_args!("{stderr}"));
    }
    let text = String::from_utf8_lossy(&stdout);
    let compressed = compress(&args.join(" "), &text);
    if !compressed.is_empty() {
        let nl = if compressed.ends_with('\n') { "" } else { "\n" };
        output::write_out(format_args!("{compressed}{nl}"));
    }
    status
        .code()
        .map_or(1, |c| u8::try_from(c & 0xff).unwrap_or(1))
}

/// The condensed form of `command`'s output.
pub fn compress(command: &str, raw: &str) -> String {
    match family(command) {
        "git" => git(git_subcommand(command).as_str(), raw),
        "ls" => ls(raw),
        "grep" => {
            let pattern = command
                .split_whitespace()
                .skip(1)
                .find(|p| !p.starts_with('-'))
                .unwrap_or("");
            grep(raw, pattern)
        }
        "diff" => condense_diff(raw),
        "read" => raw.to_owned(),
        _ => cap_lines(raw, 200),
    }
}

fn git_subcommand(command: &str) -> String {
    command
        .to_lowercase()
        .split_whitespace()
        .skip(1)
        .find(|p| !p.starts_with('-'))
        .unwrap_or("")
        .to_owned()
}

/// `line` cut to `max` characters, the last three `...`, when longer.
fn clip(line: &str, max: usize) -> String {
    if line.chars().count() > max {
        let head: String = line.chars().take(max - 3).collect();
        format!("{head}...")
    } else {
        line.to_owned()
    }
}

/// The file of a `+++ b/path` line.
fn plus_file(line: &str) -> String {
    let rest = &line[4..];
    let rest = rest
        .strip_prefix('b')
        .filter(|r| r.starts_with('/'))
        .unwrap_or(rest);
    match rest.strip_prefix('/') {
        Some(r) => r.to_owned(),
        None => line.to_owned(),
    }
}

fn git(sub: &str, raw: &str) -> String {
    match sub {
        "diff" => compact_diff(raw, 100),
        "show" => compact_diff(raw, 60),
        "log" => compact_log(raw, 20),
        "status" => compact_status(raw),
        "add" | "commit" | "push" | "pull" | "fetch" => raw
            .split('\n')
            .filter(|l| !l.trim().is_empty())
            .take(10)
            .collect::<Vec<_>>()
            .join("\n"),
        _ => raw.split('\n').take(50).collect::<Vec<_>>().join("\n"),
    }
}

fn compact_diff(diff: &str, max: usize) -> String {
    let lines: Vec<&str> = diff.split('\n').collect();
    let mut out: Vec<String> = Vec::new();
    let mut kept = 0;
    for line in &lines {
        if kept >= max {
            break;
        }
        if line.starts_with("diff --git") || line.starts_with("--- ") || line.starts_with("@@") {
            continue;
        }
        if line.starts_with("+++ ") {
            out.push(format!("\n--- {} ---", plus_file(line)));
        } else if line.starts_with('+') || line.starts_with('-') {
            out.push(clip(line, 120));
            kept += 1;
        }
    }
    if lines.len() > max {
        out.push(format!("\n... {} more lines", lines.len() - max));
    }
    out.join("\n").trim().to_owned()
}

fn compact_log(log: &str, max: usize) -> String {
    let mut entries = Vec::new();
    let mut count = 0;
    for line in log.split('\n') {
        if count >= max {
            break;
        }
        let t = line.trim();
        if t.is_empty() {
            continue;
        }
        if t.starts_with("commit ") {
            entries.push(t.replacen("commit ", "", 1).chars().take(12).collect());
        } else if t.len() >= 7
            && t.bytes()
                .take(7)
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            entries.push(clip(t, 80));
            count += 1;
        }
    }
    entries.join("\n")
}

fn compact_status(status: &str) -> String {
    let (mut staged, mut unstaged, mut untracked) = (Vec::new(), Vec::new(), Vec::new());
    let mut section = "";
    for line in status.split('\n') {
        if line.trim().is_empty() || line.starts_with("On branch") || line.starts_with("HEAD") {
            continue;
        }
        if line.starts_with("Changes to be committed") {
            section = "staged";
        } else if line.starts_with("Changes not staged for commit") {
            section = "unstaged";
        } else if line.starts_with("Untracked files") {
            section = "untracked";
        } else if line.starts_with('\t') {
            let name = line.trim().to_owned();
            match section {
                "staged" => staged.push(name),
                "unstaged" => unstaged.push(name),
                "untracked" => untracked.push(name),
                _ => {}
            }
        } else if let Some(name) = line.strip_prefix("?? ") {
            untracked.push(name.to_owned());
        }
    }
    let parts: Vec<String> = [
        ("staged", staged),
        ("unstaged", unstaged),
        ("untracked", untracked),
    ]
    .into_iter()
    .filter(|(_, v)| !v.is_empty())
    .map(|(k, v)| format!("{k}({}): {}", v.len(), v[..v.len().min(5)].join(", ")))
    .collect();
    if parts.is_empty() {
        "clean".into()
    } else {
        parts.join("\n")
    }
}

const NOISE: &[&str] = &[
    "node_modules",
    ".git",
    "target",
    "__pycache__",
    ".next",
    "dist",
    "build",
    ".cache",
    ".turbo",
    ".vercel",
    ".pytest_cache",
    ".mypy_cache",
    ".tox",
    ".venv",
    "venv",
    "coverage",
    ".nyc_output",
    ".DS_Store",
    "Thumbs.db",
    ".idea",
    ".vscode",
    ".vs",
    ".eggs",
];

fn human_size(bytes: u64) -> String {
    if bytes >= 1_048_576 {
        format!("{:.1}M", bytes as f64 / 1_048_576.0)
    } else if bytes >= 1024 {
        format!("{:.1}K", bytes as f64 / 1024.0)
    } else {
        format!("{bytes}B")
    }
}

fn ls(raw: &str) -> String {
    let mut dirs = Vec::new();
    let mut files: Vec<(String, String)> = Vec::new();
    let mut by_ext: Vec<(String, usize)> = Vec::new();
    for line in raw.split('\n') {
        if line.starts_with("total ") || line.trim().is_empty() {
            continue;
        }
        let parts: Vec<&str> = line.split_whitespace().collect();
        if parts.len() < 9 {
            continue;
        }
        let name = parts[8..].join(" ");
        if name == "." || name == ".." || NOISE.contains(&name.as_str()) {
            continue;
        }
        if parts[0].starts_with('d') {
            dirs.push(name);
        } else if parts[0].starts_with('-') || parts[0].starts_with('l') {
            let size = parts[4].parse().unwrap_or(0);
            let ext = name
                .rfind('.')
                .map_or("no ext".to_owned(), |i| name[i..].to_owned());
            match by_ext.iter_mut().find(|(e, _)| *e == ext) {
                Some((_, n)) => *n += 1,
                None => by_ext.push((ext, 1)),
            }
            files.push((name, human_size(size)));
        }
    }
    if dirs.is_empty() && files.is_empty() {
        return "(empty)\n".into();
    }
    let mut out = String::new();
    for d in &dirs {
        out.push_str(&format!("{d}/\n"));
    }
    for (name, size) in &files {
        out.push_str(&format!("{name}  {size}\n"));
    }
    out.push('\n');
    let mut summary = format!("{} files, {} dirs", files.len(), dirs.len());
    if !by_ext.is_empty() {
        by_ext.sort_by_key(|e| std::cmp::Reverse(e.1));
        let shown: Vec<String> = by_ext
            .iter()
            .take(5)
            .map(|(e, c)| format!("{c} {e}"))
            .collect();
        summary.push_str(&format!(" ({}", shown.join(", ")));
        if by_ext.len() > 5 {
            summary.push_str(&format!(", +{} more", by_ext.len() - 5));
        }
        summary.push(')');
    }
    out + &summary + "\n"
}

fn grep(raw: &str, pattern: &str) -> String {
    const MAX_RESULTS: usize = 50;
    let mut by_file: BTreeMap<String, Vec<(u64, String)>> = BTreeMap::new();
    let mut total = 0;
    for line in raw.split('\n') {
        if line.trim().is_empty() {
            continue;
        }
        let parts: Vec<&str> = line.split(':').collect();
        if parts.len() < 3 || parts[1].is_empty() || !parts[1].bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(number) = parts[1].parse::<u64>() else {
            continue;
        };
        let content = parts[2..].join(":");
        total += 1;
        by_file
            .entry(parts[0].to_owned())
            .or_default()
            .push((number, clip(content.trim(), 120)));
    }
    if total == 0 {
        return format!("0 matches for '{pattern}'");
    }
    let mut out = format!("{total} matches in {} files:\n\n", by_file.len());
    let mut shown = 0;
    for (file, matches) in &by_file {
        if shown >= MAX_RESULTS {
            break;
        }
        out.push_str(&format!("{file} ({}):\n", matches.len()));
        for (n, content) in matches.iter().take(10) {
            out.push_str(&format!("  {n:>4}: {content}\n"));
            shown += 1;
            if shown >= MAX_RESULTS {
                break;
            }
        }
        if matches.len() > 10 {
            out.push_str(&format!("  +{}\n", matches.len() - 10));
        }
        out.push('\n');
    }
    if total > shown {
        out.push_str(&format!("... +{} more\n", total - shown));
    }
    out
}

fn condense_diff(diff: &str) -> String {
    let mut out = Vec::new();
    let mut file = String::new();
    let (mut added, mut removed) = (0, 0);
    let mut changes: Vec<String> = Vec::new();
    let flush =
        |out: &mut Vec<String>, file: &str, added: usize, removed: usize, changes: &[String]| {
            if !file.is_empty() && (added > 0 || removed > 0) {
                out.push(format!("{file} (+{added} -{removed})"));
                out.extend(changes.iter().take(10).map(|c| format!("  {c}")));
                if changes.len() > 10 {
                    out.push(format!("  ... +{} more", changes.len() - 10));
                }
            }
        };
    for line in diff.split('\n') {
        if line.starts_with("+++ ") {
            flush(&mut out, &file, added, removed, &changes);
            file = plus_file(line);
            (added, removed) = (0, 0);
            changes.clear();
        } else if line.starts_with('+') && !line.starts_with("+++") {
            added += 1;
            if changes.len() < 15 {
                changes.push(clip(line, 70));
            }
        } else if line.starts_with('-') && !line.starts_with("---") {
            removed += 1;
            if changes.len() < 15 {
                changes.push(clip(line, 70));
            }
        }
    }
    flush(&mut out, &file, added, removed, &changes);
    out.join("\n")
}

fn cap_lines(raw: &str, max: usize) -> String {
    let lines: Vec<&str> = raw.split('\n').collect();
    if lines.len() <= max {
        return raw.to_owned();
    }
    format!(
        "{}\n... +{} more lines",
        lines[..max].join("\n"),
        lines.len() - max
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_status_diff_and_log() {
        let status = "On branch main\nChanges to be committed:\n\tmodified:   a.rs\n\nChanges not staged for commit:\n\tmodified:   b.rs\n\tdeleted:    c.rs\n\nUntracked files:\n\tnew.txt\n";
        assert_eq!(
            compress("git status", status),
            "staged(1): modified:   a.rs\nunstaged(2): modified:   b.rs, deleted:    c.rs\nuntracked(1): new.txt"
        );
        assert_eq!(compress("git status", "On branch main\n"), "clean");
        let diff =
            "diff --git a/x.rs b/x.rs\n--- a/x.rs\n+++ b/x.rs\n@@ -1,2 +1,2 @@\n ctx\n-old\n+new\n";
        assert_eq!(compress("git diff", diff), "--- x.rs ---\n-old\n+new");
        let log = "commit 0123456789abcdef0123\nAuthor: a\n\n    msg\nabcdef1 short line\n";
        assert_eq!(compress("git log", log), "0123456789ab\nabcdef1 short line");
    }

    #[test]
    fn ls_grep_diff_and_the_rest() {
        let ls_out = "total 8\ndrwxr-xr-x 2 u g 4096 Dec  1 04:30 src\ndrwxr-xr-x 2 u g 4096 Dec  1 04:30 node_modules\n-rw-r--r-- 1 u g 2048 Dec  1 04:30 a.rs\n-rw-r--r-- 1 u g 10 Dec  1 04:30 README\n";
        assert_eq!(
            compress("ls -la", ls_out),
            "src/\na.rs  2.0K\nREADME  10B\n\n2 files, 1 dirs (1 .rs, 1 no ext)\n"
        );
        let g = "b.rs:3:  let x = foo();\na.rs:10:foo\nnot a match\n";
        assert_eq!(
            compress("grep -rn foo .", g),
            "2 matches in 2 files:\n\na.rs (1):\n    10: foo\n\nb.rs (1):\n     3: let x = foo();\n\n"
        );
        assert_eq!(compress("grep foo", ""), "0 matches for 'foo'");
        let d = "--- a/f\n+++ b/f\n-one\n+two\n+three\n";
        assert_eq!(
            compress("diff -u a b", d),
            "f (+2 -1)\n  -one\n  +two\n  +three"
        );
        // Files read through cat & co. pass unchanged (comments included).
        let src = "// keep me\nfn main() {}\n";
        assert_eq!(compress("cat main.rs", src), src);
        let many = (0..250)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join("\n");
        assert!(compress("make", &many).ends_with("\n... +50 more lines"));
    }
}
