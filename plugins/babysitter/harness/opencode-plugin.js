// babysitter-rs plugin for OpenCode: each OpenCode event babysitter cares about becomes one call
// of hooks/babysitter-hook.sh (`babysitter hooks:invoke --harness opencode --phase <phase>`), the
// payload as JSON on stdin. When the session goes idle while its bound run is unfinished, the
// answer is {"decision":"block","reason":...} and the reason is sent back as the next prompt.
// Every failure is reported and treated as "allow": the plugin never wedges a session.
import { spawnSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const shim = join(here, "babysitter", "hooks", "babysitter-hook.sh");

function invoke(phase, payload) {
  const r = spawnSync("sh", [shim, "opencode", phase], {
    input: JSON.stringify(payload),
    encoding: "utf8",
    timeout: phase === "session.idle" ? 360000 : 30000,
  });
  if (r.stderr) process.stderr.write(r.stderr);
  if (r.error || r.status !== 0) {
    process.stderr.write(`babysitter hook (opencode ${phase}): ${r.error ?? "exit " + r.status}; allowing\n`);
    return {};
  }
  try {
    return JSON.parse(r.stdout || "{}");
  } catch (e) {
    process.stderr.write(`babysitter hook (opencode ${phase}): not JSON: ${e}; allowing\n`);
    return {};
  }
}

export const BabysitterPlugin = async ({ client, directory }) => {
  return {
    event: async ({ event }) => {
      const sessionID = event?.properties?.sessionID ?? event?.properties?.info?.id;
      if (event?.type === "session.created") {
        invoke("session.start", { hook_event_name: "session.created", session_id: sessionID, cwd: directory });
      } else if (event?.type === "session.idle" && sessionID) {
        const answer = invoke("session.idle", { hook_event_name: "session.idle", session_id: sessionID, cwd: directory });
        if (answer.decision === "block" && answer.reason) {
          await client.session.prompt({ path: { id: sessionID }, body: { parts: [{ type: "text", text: answer.reason }] } });
        }
      }
    },
    "tool.execute.before": async (input, output) => {
      invoke("tool.before", { hook_event_name: "tool.execute.before", session_id: input?.sessionID, cwd: directory, tool_name: input?.tool, tool_input: output?.args });
    },
    "tool.execute.after": async (input) => {
      invoke("tool.after", { hook_event_name: "tool.execute.after", session_id: input?.sessionID, cwd: directory, tool_name: input?.tool });
    },
  };
};
