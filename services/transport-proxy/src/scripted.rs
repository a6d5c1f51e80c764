//! The scripted model server (test support, feature `test-support`): one HTTP server that
//! speaks all four protocols and answers from a script, so harnesses and SDKs run offline and
//! the proxy's conformance tests have a deterministic upstream (`harnesses.md` §7).
//!
//! Why it renders through the proxy's own encoders: a scripted turn is written once in
//! canonical terms (text, thinking, tool calls, stop reason, usage) and must come out right in
//! every protocol, streaming and not; the encoders are exactly that function, and they are
//! themselves checked against the official SDKs and the real harness CLIs. Where a test needs
//! bytes no encoder would produce (upstream quirks such as arguments only in
//! `response.function_call_arguments.done`), a turn carries them verbatim (`raw_sse`,
//! `raw_json`).
//!
//! Turn selection is stateless by default (`harnesses.md` §7.2): the first turn whose `when`
//! matches the request; a turn without `when` matches when the history holds as many assistant
//! messages as the turn's index. Without a script the built-in harness rule answers: a call of
//! the shell-like tool (`echo hello > out.txt`) until a tool result is in the history, then
//! `DONE` (`DONE-AGAIN` after a Stop-hook continuation); Gemini JSON-mode side calls get an
//! object filled from their schema.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::response::{IntoResponse, Response};
use axum::serve::ListenerExt;
use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode, Uri};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::canonical::{Part, Request, Role, Tool};
use crate::error::{ErrorKind, render};
use crate::protocol::{self, Protocol, UrlFacts};

mod harness;
mod render;

pub use harness::{harness_reply, shell_call};
use render::render_reply;

/// A script: turns tried in order.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    #[serde(default)]
    pub turns: Vec<Turn>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Turn {
    /// When this turn answers; default: `assistant_turns` = the turn's index.
    #[serde(default)]
    pub when: Option<When>,
    /// Checks on the request; a failed check is answered with a 400 naming it.
    #[serde(default)]
    pub expect: Option<Expect>,
    pub reply: Reply,
    /// Answer the first `fail_times` matching requests with `reply.error`-like 503s first.
    #[serde(default)]
    pub fail_times: u32,
}

impl Turn {
    /// Answers `text` to any request whose last user message contains `needle` (a task told
    /// apart by its prompt, however many side calls the harness makes).
    pub fn text_when_asked(needle: &str, text: &str) -> Self {
        Turn {
            when: Some(When {
                last_user_text_contains: Some(needle.to_owned()),
                ..When::default()
            }),
            reply: Reply {
                text: Some(text.to_owned()),
                ..Reply::default()
            },
            ..Turn::default()
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct When {
    pub protocol: Option<Protocol>,
    pub assistant_turns: Option<usize>,
    pub has_tools: Option<bool>,
    pub has_tool_result: Option<bool>,
    pub last_user_text_contains: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    pub model: Option<String>,
    #[serde(default)]
    pub tools_include: Vec<String>,
    pub has_tool_result: Option<bool>,
    /// JSON pointer into the raw request body → expected value.
    #[serde(default)]
    pub body: HashMap<String, Value>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reply {
    #[serde(default)]
    pub thinking: Option<Thinking>,
    /// `redacted_thinking` blocks (their `data`), after the thinking block.
    #[serde(default)]
    pub redacted_thinking: Vec<String>,
    #[serde(default)]
    pub text: Option<String>,
    #[serde(default)]
    pub tool_calls: Vec<ScriptedCall>,
    /// Canonical stop: end_turn, stop_sequence, tool_use, max_tokens,
    /// model_context_window_exceeded, refusal, pause_turn; default tool_use with calls, else
    /// end_turn.
    #[serde(default)]
    pub stop: Option<String>,
    #[serde(default)]
    pub usage: Option<ScriptedUsage>,
    /// Stream text in pieces of this many characters (default: 4).
    #[serde(default)]
    pub chunk_chars: Option<usize>,
    /// Answer with this HTTP error instead.
    #[serde(default)]
    pub error: Option<ScriptedError>,
    /// Verbatim SSE frames (each sent as one chunk) instead of rendering.
    #[serde(default)]
    pub raw_sse: Option<Vec<String>>,
    /// Keep a `raw_sse` stream open after its frames (idle-timeout tests).
    #[serde(default)]
    pub stall: bool,
    /// Verbatim JSON body instead of rendering.
    #[serde(default)]
    pub raw_json: Option<Value>,
    /// Answer with text copied out of the latest tool result (a model that read what a command
    /// printed): replaces `text`.
    #[serde(default)]
    pub echo: Option<Echo>,
    /// Call the request's shell-like tool (whichever name the harness gives it, as the built-in
    /// harness rule finds it) with this command: added to `tool_calls`. A request offering no
    /// such tool is answered with a 400 saying so.
    #[serde(default)]
    pub shell: Option<String>,
}

/// Text taken from the request's latest tool result that holds `after`: what follows it up to
/// `until`, put into `format` at `{}`. A request with no such tool result is answered with a
/// 400 naming the marker, so a script that lost its way fails loudly.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Echo {
    pub after: String,
    pub until: String,
    pub format: String,
}

impl Echo {
    fn text(&self, req: &Request) -> Option<String> {
        let results = req
            .messages
            .iter()
            .flat_map(|m| &m.content)
            .filter_map(|p| match p {
                Part::ToolResult(r) => Some(r),
                _ => None,
            });
        let texts: Vec<String> = results
            .map(|r| {
                r.content
                    .iter()
                    .filter_map(|p| match p {
                        Part::Text(t) => Some(t.text.as_str()),
                        _ => None,
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .collect();
        let text = texts
            .iter()
            .rev()
            .find(|t| t.contains(self.after.as_str()))?;
        let start = text.find(self.after.as_str())? + self.after.len();
        let rest = &text[start..];
        let end = rest.find(self.until.as_str()).unwrap_or(rest.len());
        Some(self.format.replace("{}", &rest[..end]))
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Thinking {
    pub text: String,
    #[serde(default)]
    pub signature: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedCall {
    #[serde(default)]
    pub id: Option<String>,
    pub name: String,
    #[serde(default)]
    pub arguments: Value,
    /// Gemini `thoughtSignature` of the call.
    #[serde(default)]
    pub thought_signature: Option<String>,
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedUsage {
    #[serde(default)]
    pub input: Option<u64>,
    #[serde(default)]
    pub output: Option<u64>,
    #[serde(default)]
    pub cache_read: Option<u64>,
    #[serde(default)]
    pub cache_write: Option<u64>,
    #[serde(default)]
    pub reasoning: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedError {
    pub status: u16,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub retry_after: Option<String>,
}

/// One request as the server saw it (credentials redacted to length + prefix).
#[derive(Debug, Clone, Serialize)]
pub struct LoggedRequest {
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    pub protocol: Option<Protocol>,
    pub headers: Vec<(String, String)>,
    pub auth_header: Option<String>,
    pub body: Value,
    pub turn: Option<usize>,
    pub status: u16,
}

struct State {
    script: Option<Script>,
    failures: Vec<AtomicU32>,
    log: Mutex<Vec<LoggedRequest>>,
    log_file: Option<PathBuf>,
}

/// A running scripted server; stopped on [`ScriptedServer::stop`] or drop.
#[derive(Debug)]
pub struct ScriptedServer {
    addr: SocketAddr,
    state: Arc<StateHandle>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Debug)]
struct StateHandle(State);

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("State")
    }
}

impl ScriptedServer {
    /// Starts on `addr` (`127.0.0.1:0` for a free port). `script: None` = the harness rule.
    pub async fn start(
        addr: SocketAddr,
        script: Option<Script>,
        log_file: Option<PathBuf>,
    ) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        // Streams are written frame by frame: without TCP_NODELAY each waits for a delayed ACK.
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let failures = script
            .as_ref()
            .map(|s| s.turns.iter().map(|_| AtomicU32::new(0)).collect())
            .unwrap_or_default();
        let state = Arc::new(StateHandle(State {
            script,
            failures,
            log: Mutex::new(Vec::new()),
            log_file,
        }));
        let st = state.clone();
        let app = Router::new().fallback(move |m: Method, u: Uri, h: HeaderMap, b: Bytes| {
            let st = st.clone();
            async move { handle(&st.0, m, u, h, b).await }
        });
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::warn!(error = %e, "scripted server stopped");
            }
        });
        Ok(Self { addr, state, task })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Requests seen so far.
    pub fn requests(&self) -> Vec<LoggedRequest> {
        self.state
            .0
            .log
            .lock()
            .map(|l| l.clone())
            .unwrap_or_default()
    }

    /// Stops the server (open streams are dropped).
    pub async fn stop(self) {
        self.task.abort();
        let _ = (&mut { self }.task).await;
    }
}

impl Drop for ScriptedServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn redact(v: &str) -> String {
    let prefix: String = v.chars().take(6).collect();
    format!("{prefix}…({} chars)", v.chars().count())
}

fn protocol_of(path: &str) -> Option<(Protocol, UrlFacts, bool)> {
    if path.ends_with("/messages") {
        return Some((Protocol::Anthropic, UrlFacts::default(), false));
    }
    if path.ends_with("/messages/count_tokens") {
        return Some((Protocol::Anthropic, UrlFacts::default(), true));
    }
    if path.ends_with("/chat/completions") {
        return Some((Protocol::OpenAiChat, UrlFacts::default(), false));
    }
    if path.ends_with("/responses") {
        return Some((Protocol::OpenAiResponses, UrlFacts::default(), false));
    }
    let (_, tail) = path.rsplit_once("/models/")?;
    let (model, method) = tail.rsplit_once(':')?;
    let facts = |stream| UrlFacts {
        model: Some(model.to_owned()),
        stream: Some(stream),
    };
    match method {
        "generateContent" => Some((Protocol::Gemini, facts(false), false)),
        "streamGenerateContent" => Some((Protocol::Gemini, facts(true), false)),
        "countTokens" => Some((Protocol::Gemini, facts(false), true)),
        _ => None,
    }
}

async fn handle(st: &State, method: Method, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    let path = uri.path().to_owned();
    let mut entry = LoggedRequest {
        method: method.to_string(),
        path: path.clone(),
        query: uri.query().map(str::to_owned),
        protocol: None,
        headers: headers
            .iter()
            .map(|(k, v)| {
                let v = v.to_str().unwrap_or("");
                let sensitive = matches!(
                    k.as_str(),
                    "authorization" | "x-api-key" | "x-goog-api-key" | "api-key" | "cookie"
                );
                (
                    k.to_string(),
                    if sensitive { redact(v) } else { v.to_owned() },
                )
            })
            .collect(),
        auth_header: ["authorization", "x-api-key", "x-goog-api-key", "api-key"]
            .iter()
            .find(|h| headers.contains_key(**h))
            .map(|h| (*h).to_owned()),
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        turn: None,
        status: 200,
    };
    let resp = answer(st, &method, &path, &body, &mut entry).await;
    entry.status = resp.status().as_u16();
    if let Some(file) = &st.log_file
        && let Ok(line) = serde_json::to_string(&entry)
    {
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(file)
        {
            let _ = writeln!(f, "{line}");
        }
    }
    if let Ok(mut log) = st.log.lock() {
        log.push(entry);
    }
    let mut resp = resp;
    if let Ok(v) = http::HeaderValue::from_str(&format!("req_{}", ulid::Ulid::generate())) {
        resp.headers_mut().insert("request-id", v);
    }
    resp
}

async fn answer(
    st: &State,
    method: &Method,
    path: &str,
    body: &[u8],
    entry: &mut LoggedRequest,
) -> Response {
    if method == Method::HEAD {
        return StatusCode::NOT_FOUND.into_response();
    }
    if method == Method::GET && path.ends_with("/models") {
        return axum::Json(json!({"object": "list", "data": [{"id": "fake-model", "object": "model", "owned_by": "scripted"}],
            "models": [{"name": "models/fake-model", "supportedGenerationMethods": ["generateContent", "streamGenerateContent"]}]}))
        .into_response();
    }
    let Some((p, facts, counting)) = protocol_of(path).filter(|_| method == Method::POST) else {
        return (
            StatusCode::NOT_FOUND,
            axum::Json(json!({"error": {"message": format!("no such endpoint {path}")}})),
        )
            .into_response();
    };
    entry.protocol = Some(p);
    let err = |kind: ErrorKind, msg: &str| {
        let (status, body) = render(p, kind, msg);
        (
            StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST),
            axum::Json(body),
        )
            .into_response()
    };
    let body_for_decode = if counting && p == Protocol::Anthropic {
        let mut v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        if let Some(o) = v.as_object_mut() {
            o.entry("max_tokens").or_insert(json!(1));
        }
        Bytes::from(v.to_string())
    } else {
        Bytes::copy_from_slice(body)
    };
    let req = match protocol::decode_request(p, &body_for_decode, &facts) {
        Ok(r) => r,
        Err(e) => return err(ErrorKind::InvalidRequest, &e.to_string()),
    };
    if counting {
        let n = crate::checks::estimate_tokens(&req);
        return axum::Json(if p == Protocol::Gemini {
            json!({"totalTokens": n})
        } else {
            json!({"input_tokens": n})
        })
        .into_response();
    }
    let raw: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let (turn_index, reply) = match &st.script {
        None => (None, harness_reply(&req, &raw)),
        Some(script) => match pick(script, p, &req) {
            Some(i) => {
                let turn = &script.turns[i];
                if let Some(exp) = &turn.expect
                    && let Err(why) = check(exp, &req, &raw)
                {
                    entry.turn = Some(i);
                    return err(
                        ErrorKind::InvalidRequest,
                        &format!("scripted expectation failed: {why}"),
                    );
                }
                if turn.fail_times > 0
                    && st.failures[i].fetch_add(1, Ordering::SeqCst) < turn.fail_times
                {
                    entry.turn = Some(i);
                    return err(ErrorKind::Overloaded, "scripted transient failure");
                }
                let mut reply = turn.reply.clone();
                if let Some(echo) = &reply.echo {
                    match echo.text(&req) {
                        Some(t) => reply.text = Some(t),
                        None => {
                            entry.turn = Some(i);
                            return err(
                                ErrorKind::InvalidRequest,
                                &format!("scripted echo: no tool result holds {:?}", echo.after),
                            );
                        }
                    }
                }
                if let Some(command) = &reply.shell {
                    match shell_call(&req, command, "Run the scripted command") {
                        Some(call) => reply.tool_calls.push(call),
                        None => {
                            entry.turn = Some(i);
                            return err(
                                ErrorKind::InvalidRequest,
                                "scripted shell: the request offers no shell-like tool",
                            );
                        }
                    }
                }
                (Some(i), reply)
            }
            None => return err(ErrorKind::InvalidRequest, "no scripted turn matches"),
        },
    };
    entry.turn = turn_index;
    render_reply(p, &req, &reply)
}

pub(crate) fn assistant_turns(req: &Request) -> usize {
    req.messages
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .count()
}

pub(crate) fn has_tool_result(req: &Request) -> bool {
    req.messages
        .iter()
        .flat_map(|m| &m.content)
        .any(|p| matches!(p, Part::ToolResult(_)))
}

pub(crate) fn last_user_text(req: &Request) -> String {
    req.messages
        .iter()
        .rev()
        .find(|m| m.role == Role::User)
        .map(|m| {
            m.content
                .iter()
                .filter_map(|p| match p {
                    Part::Text(t) => Some(t.text.as_str()),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

fn pick(script: &Script, p: Protocol, req: &Request) -> Option<usize> {
    script.turns.iter().enumerate().position(|(i, t)| {
        let Some(w) = &t.when else {
            return assistant_turns(req) == i;
        };
        w.protocol.is_none_or(|x| x == p)
            && w.assistant_turns.is_none_or(|n| n == assistant_turns(req))
            && w.has_tools.is_none_or(|h| h != req.tools.is_empty())
            && w.has_tool_result.is_none_or(|h| h == has_tool_result(req))
            && w.last_user_text_contains
                .as_ref()
                .is_none_or(|s| last_user_text(req).contains(s.as_str()))
    })
}

fn check(exp: &Expect, req: &Request, raw: &Value) -> Result<(), String> {
    if let Some(m) = &exp.model
        && &req.model != m
        && raw.get("model").and_then(Value::as_str) != Some(m.as_str())
    {
        return Err(format!("model is {}, expected {m}", req.model));
    }
    for name in &exp.tools_include {
        let found = req
            .tools
            .iter()
            .any(|t| matches!(t, Tool::Function { name: n, .. } if n == name));
        if !found {
            return Err(format!("tool {name} not offered"));
        }
    }
    if let Some(h) = exp.has_tool_result
        && h != has_tool_result(req)
    {
        return Err(format!("has_tool_result is {}, expected {h}", !h));
    }
    for (ptr, want) in &exp.body {
        let got = raw.pointer(ptr);
        if got != Some(want) {
            return Err(format!("body{ptr} is {got:?}, expected {want}"));
        }
    }
    Ok(())
}
