//! What the dashboard's process tests share: this build's `babysitter` started as a server and
//! stopped by its PID, and the browser prerequisites (skipped without them, see
//! `tests/src/skip.rs`).

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A server process, killed by its PID when dropped.
pub struct Server(pub Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts this build's `babysitter` with `args` and waits for a stderr line starting with each
/// of `wanted`: the first word after each (an address). Stderr is drained from then on.
pub fn start(args: &[String], wanted: &[&str]) -> (Server, Vec<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_babysitter"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let server = Server(child);
    let mut found: Vec<Option<String>> = vec![None; wanted.len()];
    let mut seen = String::new();
    while found.iter().any(Option::is_none) {
        let Some(Ok(line)) = lines.next() else {
            panic!("the server exited:\n{seen}");
        };
        seen.push_str(&line);
        seen.push('\n');
        for (i, w) in wanted.iter().enumerate() {
            if let Some(rest) = line.strip_prefix(w) {
                found[i] = Some(rest.split_whitespace().next().unwrap_or("").to_owned());
            }
        }
    }
    std::thread::spawn(move || for _ in lines {});
    (server, found.into_iter().map(Option::unwrap).collect())
}

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The Playwright venv's python when it and the system Chromium are installed.
pub fn browser() -> Result<PathBuf, String> {
    let python = repo().join(".ci-work/venv-playwright/bin/python");
    if Path::new("/usr/bin/chromium").is_file() && python.is_file() {
        Ok(python)
    } else {
        Err("needs /usr/bin/chromium and Playwright for Python in .ci-work/venv-playwright: run scripts/ensure-playwright.sh".into())
    }
}

/// One HTTP/1.1 request to `addr` (`Connection: close`): the status and the body.
pub async fn http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    let status = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}
