//! Help text: the reference's agent-facing usage lines for the commands this build implements.

pub const USAGE: &str = "Usage:
  babysitter run:create --process-id <id> [--entry <path#export>] [--inputs <file>] [--run-id <id>] [--process-revision <rev>] [--request <id>] [--prompt <text>] [--harness <name>] [--session-id <id>] [--non-interactive] [--json] [--dry-run]
  babysitter run:status <runDir> [--json] [--tree]
  babysitter run:events <runDir> [--json] [--limit <n>] [--reverse] [--filter-type <type>]
  babysitter run:rebuild-state <runDir> [--json] [--dry-run]
  babysitter run:halt <runDir> [--reason <text>] [--final-status completed|failed] [--force] [--json] [--dry-run]
  babysitter run:iterate <runDir> [--json] [--verbose] [--iteration <n>]
  babysitter run:assign-process <runDir> --entry <path#export> [--process-id <id>] [--process-revision <rev>] [--force] [--json] [--dry-run]
  babysitter run:repair-journal <runDir> [--json] [--dry-run]
  babysitter run:recover-process-error <runDir> [--patch-effect <effectId>:<dot.path>=<json>] [--json] [--dry-run]
  babysitter task:post <runDir> <effectId> --status <ok|error> [--json] [--dry-run] [--value <file>] [--value-inline <json>] [--error <file>] [--stdout-ref <ref>] [--stderr-ref <ref>] [--stdout-file <file>] [--stderr-file <file>] [--started-at <iso8601>] [--finished-at <iso8601>] [--metadata <file>] [--invocation-key <key>]
  babysitter task:list <runDir> [--pending] [--kind <kind>] [--json]
  babysitter task:show <runDir> <effectId> [--json]
  babysitter task:cancel <runDir> <effectId> [--reason <text>] [--json]
  babysitter health [--json] [--verbose]
  babysitter hooks:invoke --harness <claude-code|codex|gemini-cli|cursor|opencode|pi> --phase <phase> [--handler <cmd>]... [--timeout-ms <n>]   (the harness's hook payload on stdin; answers in its format)
  babysitter harness:install-plugin <harness> [--project [<dir>] | --user] [--json]
  babysitter plugin:uninstall <harness> [--project [<dir>] | --user] [--json]
  babysitter plugin:list-installed [--json]
  babysitter harness:discover [--json]
  babysitter harness:install <harness> [--prefix <dir>] [--dry-run] [--json]
  babysitter plugin:generate --out <dir> [--harness <name>]
  babysitter tls:generate --out <dir> <name>[=<san>,<san>...]...   (a private CA and a certificate per service, for a deployment that has none)
  babysitter mcp:serve   (an MCP server over stdio)
  babysitter hook:run --hook-type <stop|session-end|session-start|user-prompt-submit|pre-tool-use> [--harness <name>] [--state-dir <dir>] [--runs-dir <dir>] [--json]   (hook JSON on stdin)
  babysitter compress-output <command> [args...]   (runs the command, prints its condensed output)
  babysitter log --type <process|hook|cli> --message <msg> [--run-id <id>] [--process-id <id>] [--label <label>] [--level <debug|info|warn|error>] [--source <src>] [--json]
  babysitter hook:log --hook-type <type> --log-file <path> [--json]   (hook JSON on stdin)
  babysitter breakpoint:approve-rule <pattern> [--action auto-approve|never-auto-approve] [--source <source>] [--note <note>] [--json]
  babysitter breakpoint:remove-rule <ruleId> [--json]
  babysitter breakpoint:list-rules [--json]
  babysitter breakpoint:should-auto-approve <breakpointId> [--tags <csv>] [--expert <expert>] [--json]
  babysitter breakpoint:history [--breakpoint-id <id>] [--limit <n>] [--json]
  babysitter session:init --session-id <id> [--state-dir <dir>] [--max-iterations <n>] [--run-id <id>] [--prompt <text>] [--json]
  babysitter session:associate --session-id <id> --run-id <id> [--state-dir <dir>] [--force] [--json]
  babysitter session:state --session-id <id> [--state-dir <dir>] [--json]
  babysitter session:update --session-id <id> [--state-dir <dir>] [--iteration <n>] [--last-iteration-at <iso8601>] [--iteration-times <csv>] [--json]
  babysitter session:check-iteration --session-id <id> [--state-dir <dir>] [--json]
  babysitter session:last-message --transcript-path <file> [--json]
  babysitter session:resume --session-id <id> --run-id <id> [--state-dir <dir>] [--max-iterations <n>] [--json]
  babysitter session:iteration-message --iteration <n> [--run-id <id>] [--json]
  babysitter session:whoami [--harness <name>] [--state-dir <dir>] [--json]
  babysitter session:cleanup [--harness <name>] [--state-dir <dir>] [--dry-run] [--json]
  babysitter instructions:babysit-skill|orchestrate|process-create|breakpoint-handling [--harness <name>] [--interactive|--no-interactive] [--json]
  babysitter process-library:clone [--repo <url|path>] [--dir <dir>] [--ref <ref>] [--state-dir <dir>] [--json]
  babysitter process-library:update [--dir <dir>] [--ref <ref>] [--state-dir <dir>] [--json]
  babysitter process-library:use [--dir <dir>] [--run-id <id>] [--session-id <id>] [--ref <ref>] [--state-dir <dir>] [--json]
  babysitter process-library:active [--run-id <id>] [--session-id <id>] [--state-dir <dir>] [--json]
  babysitter compression:status [--json]
  babysitter compression:toggle <userPromptHook|commandOutputHook|sdkContextHook|processLibraryCache> <on|off> [--json]
  babysitter compression:set <layer.key> <value> [--json]   (e.g. userPromptHook.threshold 300, enabled false)
  babysitter compression:reset [--json]
  babysitter tokens:stats [<runId>] [--all] [--json]   (COMPRESSION_APPLIED events of a run, or of all runs)
  babysitter profile:read|render --user|--project [--dir <dir>] [--json]
  babysitter profile:write|merge --user|--project --input <file> [--dir <dir>] [--json]
  babysitter skill:discover [--plugin-root <dir>] [--run-id <id>] [--process-path <file>] [--cache-ttl <s>] [--summary-only] [--json]
  babysitter skill:fetch-remote --source-type <github|well-known> --url <url> [--json]   (needs the network: not available in this build)
  babysitter configure [show|validate|paths] [--defaults-only] [--json]
  babysitter discover|list [--json]   (installed harnesses and the calling one)
  babysitter run <process> [...]          (drive a whole process on this machine; see babysitter run --help)
  babysitter version

Global flags:
  --runs-dir <dir>   Override the runs directory (advanced compatibility flag).
  --json             Emit JSON output when supported by the command.
  --dry-run          Describe planned mutations without changing on-disk state.
  --verbose          Log resolved paths and options to stderr for debugging.
  --help, -h         Show this help text.
  --version, -v      Show CLI version.
  Value flags also accept the --flag=value form.

Runs storage defaults:
  global scope       ~/.a5c/runs
  repo scope         <repo>/.a5c/runs (set BABYSITTER_RUNS_SCOPE=repo)";
