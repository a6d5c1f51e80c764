//! `mcp:serve`: babysitter as an MCP server over stdio (the official Rust SDK, `rmcp`), with the
//! reference MCP server's tools (`run_create`, `run_status`, `run_iterate`, `run_events`,
//! `run_rebuild_state`, `task_post`, `task_list`, `task_show`, `session_init`,
//! `session_associate`, `session_resume`, `session_state`, `skill_discover`, `health`,
//! `configure_show`) plus breakpoints and the process library.
//!
//! Each tool is one table row: its parameters (the JSON schema the client sees) and the
//! `babysitter` command line they become. A call runs that command through [`compat::execute`]
//! — the same code a shell call runs, with this server's environment, working directory,
//! journal runtime and run client — its output captured: the tool result is the command's JSON
//! (and its text), `isError` with the command's error when it exits non-zero. A call whose
//! arguments are missing or of the wrong type is refused naming the argument, before anything
//! runs. Calls run one at a time.

use std::path::PathBuf;
use std::sync::Arc;

use babysitter_common::EnvMap;
use babysitter_journal::fs::FsRuntime;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Map, Value, json};

use crate::compat::{self, client, output};

/// A parameter: name, JSON type, required, description.
type Param = (&'static str, &'static str, bool, &'static str);

/// One tool: name, description, parameters, and the command line its arguments become.
struct Spec {
    name: &'static str,
    description: &'static str,
    params: &'static [Param],
    argv: fn(&Args) -> Result<Vec<String>, String>,
}

const RUN_ID: Param = ("runId", "string", true, "The run id (or run directory)");
const RUNS_DIR: Param = ("runsDir", "string", false, "Override the runs directory");
const EFFECT_ID: Param = ("effectId", "string", true, "The effect id of the task");
const SESSION_ID: Param = ("sessionId", "string", true, "The harness session id");
const STATE_DIR: Param = (
    "stateDir",
    "string",
    false,
    "Directory of the session state files",
);

const TOOLS: &[Spec] = &[
    Spec {
        name: "run_create",
        description: "Create a new babysitter run for a process definition",
        params: &[
            ("processId", "string", true, "The process identifier"),
            (
                "entrypoint",
                "string",
                true,
                "Path to the process module, optionally path#export",
            ),
            (
                "inputs",
                "string",
                false,
                "JSON-encoded inputs of the process",
            ),
            (
                "runId",
                "string",
                false,
                "The run id to use (a new one otherwise)",
            ),
            ("prompt", "string", false, "The request the run serves"),
            RUNS_DIR,
        ],
        argv: |a| {
            let mut v = cmd(&[
                "run:create",
                "--process-id",
                a.req("processId")?,
                "--entry",
                a.req("entrypoint")?,
                "--json",
            ]);
            if let Some(inputs) = a.opt("inputs")? {
                v.extend(["--inputs".into(), a.json_file("inputs", inputs)?]);
            }
            a.pass(
                &mut v,
                &[
                    ("runId", "--run-id"),
                    ("prompt", "--prompt"),
                    ("runsDir", "--runs-dir"),
                ],
            )?;
            Ok(v)
        },
    },
    Spec {
        name: "run_status",
        description: "The state and metadata of a run",
        params: &[RUN_ID, RUNS_DIR],
        argv: |a| a.run_command("run:status"),
    },
    Spec {
        name: "run_iterate",
        description: "Run one orchestration iteration of a run: what it asks for next",
        params: &[RUN_ID, RUNS_DIR],
        argv: |a| a.run_command("run:iterate"),
    },
    Spec {
        name: "run_events",
        description: "The journal events of a run",
        params: &[
            RUN_ID,
            RUNS_DIR,
            ("limit", "integer", false, "At most this many events"),
            (
                "filterType",
                "string",
                false,
                "Only events of this type (e.g. EFFECT_REQUESTED)",
            ),
            ("reverse", "boolean", false, "Newest first"),
        ],
        argv: |a| {
            let mut v = a.run_command("run:events")?;
            if let Some(n) = a.int("limit")? {
                v.extend(["--limit".into(), n.to_string()]);
            }
            a.pass(&mut v, &[("filterType", "--filter-type")])?;
            if a.bool("reverse")? {
                v.push("--reverse".into());
            }
            Ok(v)
        },
    },
    Spec {
        name: "run_rebuild_state",
        description: "Rebuild a run's state cache from its journal",
        params: &[RUN_ID, RUNS_DIR],
        argv: |a| a.run_command("run:rebuild-state"),
    },
    Spec {
        name: "task_list",
        description: "The tasks of a run, optionally only the pending ones",
        params: &[
            RUN_ID,
            RUNS_DIR,
            ("pending", "boolean", false, "Only pending tasks"),
        ],
        argv: |a| {
            let mut v = a.run_command("task:list")?;
            if a.bool("pending")? {
                v.push("--pending".into());
            }
            Ok(v)
        },
    },
    Spec {
        name: "task_show",
        description: "One task: its definition and its result",
        params: &[RUN_ID, EFFECT_ID, RUNS_DIR],
        argv: |a| {
            let mut v = cmd(&["task:show", a.req("runId")?, a.req("effectId")?, "--json"]);
            a.pass(&mut v, &[("runsDir", "--runs-dir")])?;
            Ok(v)
        },
    },
    Spec {
        name: "task_post",
        description: "Post the result of a pending task",
        params: &[
            RUN_ID,
            EFFECT_ID,
            ("status", "string", true, "ok or error"),
            (
                "value",
                "string",
                false,
                "JSON-encoded result value (status ok)",
            ),
            (
                "error",
                "string",
                false,
                "JSON-encoded error (status error)",
            ),
            RUNS_DIR,
        ],
        argv: |a| {
            let status = a.req("status")?;
            let mut v = cmd(&[
                "task:post",
                a.req("runId")?,
                a.req("effectId")?,
                "--status",
                status,
                "--json",
            ]);
            match status {
                "ok" => {
                    let value = a.opt("value")?.unwrap_or("null");
                    serde_json::from_str::<Value>(value)
                        .map_err(|e| format!("value is not JSON: {e}"))?;
                    v.extend(["--value-inline".into(), value.to_owned()]);
                }
                "error" => {
                    if let Some(error) = a.opt("error")? {
                        v.extend(["--error".into(), a.json_file("error", error)?]);
                    }
                }
                other => return Err(format!("status must be ok or error, not {other:?}")),
            }
            a.pass(&mut v, &[("runsDir", "--runs-dir")])?;
            Ok(v)
        },
    },
    Spec {
        name: "breakpoint_answer",
        description: "Approve or reject a pending breakpoint of a run",
        params: &[
            RUN_ID,
            EFFECT_ID,
            (
                "approved",
                "boolean",
                true,
                "Approve (true) or reject (false)",
            ),
            ("response", "string", false, "What to tell the process"),
            RUNS_DIR,
        ],
        argv: |a| {
            let answer = json!({"approved": a.bool("approved")?, "response": a.opt("response")?.unwrap_or("")});
            let mut v = cmd(&[
                "task:post",
                a.req("runId")?,
                a.req("effectId")?,
                "--status",
                "ok",
                "--json",
            ]);
            v.extend(["--value-inline".into(), answer.to_string()]);
            a.pass(&mut v, &[("runsDir", "--runs-dir")])?;
            Ok(v)
        },
    },
    Spec {
        name: "breakpoint_rules",
        description: "The breakpoint auto-approval rules in force",
        params: &[],
        argv: |_| Ok(cmd(&["breakpoint:list-rules", "--json"])),
    },
    Spec {
        name: "session_init",
        description: "Create the state of a harness session",
        params: &[
            SESSION_ID,
            STATE_DIR,
            ("runId", "string", false, "Bind it to this run"),
        ],
        argv: |a| a.session_command("session:init", &[("runId", "--run-id")]),
    },
    Spec {
        name: "session_associate",
        description: "Bind a harness session to a run",
        params: &[
            SESSION_ID,
            STATE_DIR,
            ("runId", "string", true, "The run to bind"),
        ],
        argv: |a| a.session_command("session:associate", &[("runId", "--run-id")]),
    },
    Spec {
        name: "session_resume",
        description: "Point a session at an existing run so the loop continues it",
        params: &[
            SESSION_ID,
            STATE_DIR,
            ("runId", "string", true, "The run to resume"),
            RUNS_DIR,
        ],
        argv: |a| {
            a.session_command(
                "session:resume",
                &[("runId", "--run-id"), ("runsDir", "--runs-dir")],
            )
        },
    },
    Spec {
        name: "session_state",
        description: "The state of a harness session",
        params: &[SESSION_ID, STATE_DIR],
        argv: |a| a.session_command("session:state", &[]),
    },
    Spec {
        name: "skill_discover",
        description: "The skills, agents and processes available here",
        params: &[RUNS_DIR],
        argv: |a| {
            let mut v = cmd(&["skill:discover", "--json"]);
            a.pass(&mut v, &[("runsDir", "--runs-dir")])?;
            Ok(v)
        },
    },
    Spec {
        name: "process_library_active",
        description: "The active process library",
        params: &[],
        argv: |_| Ok(cmd(&["process-library:active", "--json"])),
    },
    Spec {
        name: "health",
        description: "The health and configuration of this babysitter installation",
        params: &[],
        argv: |_| Ok(cmd(&["health", "--json"])),
    },
    Spec {
        name: "configure_show",
        description: "The current babysitter configuration",
        params: &[],
        argv: |_| Ok(cmd(&["configure", "show", "--json"])),
    },
];

fn cmd(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| (*s).to_owned()).collect()
}

/// A call's arguments, validated against its tool's parameters as they are read.
struct Args<'a> {
    map: &'a Map<String, Value>,
    tmp: PathBuf,
}

impl Args<'_> {
    fn opt(&self, k: &str) -> Result<Option<&str>, String> {
        match self.map.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(format!("{k} must be a string")),
        }
    }
    fn req(&self, k: &str) -> Result<&str, String> {
        self.opt(k)?
            .filter(|s| !s.is_empty())
            .ok_or_else(|| format!("{k} is required"))
    }
    fn bool(&self, k: &str) -> Result<bool, String> {
        match self.map.get(k) {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(format!("{k} must be a boolean")),
        }
    }
    fn int(&self, k: &str) -> Result<Option<u64>, String> {
        match self.map.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_u64()
                .filter(|n| *n > 0)
                .map(Some)
                .ok_or_else(|| format!("{k} must be a positive integer")),
        }
    }
    /// Optional string arguments passed on as flags.
    fn pass(&self, v: &mut Vec<String>, flags: &[(&str, &str)]) -> Result<(), String> {
        for (k, flag) in flags {
            if let Some(s) = self.opt(k)? {
                v.extend([(*flag).to_owned(), s.to_owned()]);
            }
        }
        Ok(())
    }
    fn run_command(&self, command: &str) -> Result<Vec<String>, String> {
        let mut v = cmd(&[command, self.req("runId")?, "--json"]);
        self.pass(&mut v, &[("runsDir", "--runs-dir")])?;
        Ok(v)
    }
    fn session_command(
        &self,
        command: &str,
        extra: &[(&str, &str)],
    ) -> Result<Vec<String>, String> {
        let mut v = cmd(&[command, "--session-id", self.req("sessionId")?, "--json"]);
        self.pass(&mut v, &[("stateDir", "--state-dir")])?;
        self.pass(&mut v, extra)?;
        Ok(v)
    }
    /// A JSON argument the command reads from a file: checked, written to a private temp file.
    fn json_file(&self, k: &str, text: &str) -> Result<String, String> {
        serde_json::from_str::<Value>(text).map_err(|e| format!("{k} is not JSON: {e}"))?;
        let path = self
            .tmp
            .join(format!("mcp-{k}-{}.json", ulid::Ulid::generate()));
        std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        Ok(path.display().to_string())
    }
}

fn schema(params: &[Param]) -> Map<String, Value> {
    let mut props = Map::new();
    let mut required = Vec::new();
    for (name, ty, req, description) in params {
        props.insert(
            (*name).to_owned(),
            json!({"type": ty, "description": description}),
        );
        if *req {
            required.push(*name);
        }
    }
    let mut s = Map::new();
    s.insert("type".into(), json!("object"));
    s.insert("properties".into(), Value::Object(props));
    s.insert("required".into(), json!(required));
    s.insert("additionalProperties".into(), json!(false));
    s
}

/// The server: what every call runs with.
#[derive(Clone)]
struct Server {
    env: Arc<EnvMap>,
    cwd: PathBuf,
    fs: FsRuntime,
    client: Arc<dyn client::RunClient>,
    one_at_a_time: Arc<tokio::sync::Mutex<()>>,
}

impl Server {
    async fn call(&self, spec: &Spec, args: &Map<String, Value>) -> CallToolResult {
        for k in args.keys() {
            if !spec.params.iter().any(|(n, ..)| n == k) {
                return tool_error(format!("{}: unknown argument {k:?}", spec.name));
            }
        }
        let tmp = std::env::temp_dir();
        let argv = match (spec.argv)(&Args { map: args, tmp }) {
            Ok(v) => v,
            Err(why) => return tool_error(format!("{}: {why}", spec.name)),
        };
        let _turn = self.one_at_a_time.lock().await;
        let (code, captured) = output::captured(compat::execute(
            &argv,
            &self.env,
            self.cwd.clone(),
            self.fs.clone(),
            self.client.clone(),
        ))
        .await;
        let stdout = String::from_utf8_lossy(&captured.stdout).trim().to_owned();
        let stderr = String::from_utf8_lossy(&captured.stderr).trim().to_owned();
        if code != 0 {
            let text = if stderr.is_empty() { stdout } else { stderr };
            return tool_error(format!("{} ({}): {text}", spec.name, argv.join(" ")));
        }
        match serde_json::from_str::<Value>(&stdout) {
            Ok(v) => {
                let mut r = CallToolResult::structured(v);
                if r.content.is_empty() {
                    r.content = vec![ContentBlock::text(stdout)];
                }
                r
            }
            Err(_) => CallToolResult::success(vec![ContentBlock::text(stdout)]),
        }
    }
}

fn tool_error(message: String) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message)])
}

impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("babysitter", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "babysitter-rs: create, iterate and inspect babysitter runs, post task results, answer breakpoints.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(
            TOOLS
                .iter()
                .map(|t| Tool::new(t.name, t.description, Arc::new(schema(t.params))))
                .collect(),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some(spec) = TOOLS.iter().find(|t| t.name == request.name.as_ref()) else {
            return Err(ErrorData::invalid_params(
                format!("unknown tool {:?}", request.name),
                None,
            ));
        };
        let args = request.arguments.unwrap_or_default();
        Ok(self.call(spec, &args).await.into())
    }
}

/// `babysitter mcp:serve --help`.
pub fn help() {
    use std::io::Write as _;
    let _ = writeln!(
        std::io::stdout(),
        "babysitter mcp:serve: an MCP server over stdio with the run, task, session, breakpoint and\n\
         process-library tools; the runs are this machine's, resolved as the commands resolve them."
    );
}

/// `babysitter mcp:serve`: serves until the client closes stdin; the runs are this machine's
/// (the runs directory the commands resolve from the working directory and environment).
pub fn main(env: &EnvMap, fs: FsRuntime) -> std::process::ExitCode {
    let fail = |what: String| {
        eprintln!("babysitter mcp:serve: {what}");
        std::process::ExitCode::from(1)
    };
    let cwd = match std::env::current_dir() {
        Ok(d) => d,
        Err(e) => return fail(format!("cannot read the working directory: {e}")),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => return fail(format!("cannot start the async runtime: {e}")),
    };
    let server = Server {
        env: Arc::new(env.clone()),
        cwd,
        fs,
        client: Arc::new(client::OnDisk::Local),
        one_at_a_time: Arc::new(tokio::sync::Mutex::new(())),
    };
    let served = runtime.block_on(async move {
        let running = server
            .serve(rmcp::transport::io::stdio())
            .await
            .map_err(|e| format!("the client's initialisation failed: {e}"))?;
        running.waiting().await.map_err(|e| e.to_string())
    });
    match served {
        Ok(_) => std::process::ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}
