// babysitter-rs extension for Pi: each Pi event babysitter cares about becomes one call of
// hooks/babysitter-hook.sh (`babysitter hooks:invoke --harness pi --phase <phase>`), the payload
// as JSON on stdin. When the agent ends its turn while the session's bound run is unfinished, the
// answer is {"decision":"block","reason":...} and the reason is sent as the next user message.
// Every failure is reported and treated as "allow": the extension never wedges a session.
import { spawnSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const shim = join(here, "hooks", "babysitter-hook.sh");

function invoke(phase: string, payload: Record<string, unknown>): any {
  const r = spawnSync("sh", [shim, "pi", phase], {
    input: JSON.stringify(payload),
    encoding: "utf8",
    timeout: phase === "turn.after_agent" ? 360000 : 30000,
  });
  if (r.stderr) process.stderr.write(r.stderr);
  if (r.error || r.status !== 0) {
    process.stderr.write(`babysitter hook (pi ${phase}): ${r.error ?? "exit " + r.status}; allowing\n`);
    return {};
  }
  try {
    return JSON.parse(r.stdout || "{}");
  } catch (e) {
    process.stderr.write(`babysitter hook (pi ${phase}): not JSON: ${e}; allowing\n`);
    return {};
  }
}

function sessionId(ctx: any): string | undefined {
  const sm = ctx?.sessionManager;
  return sm?.getSessionId?.() ?? sm?.getSessionFile?.() ?? undefined;
}

function lastAssistantText(messages: any[] | undefined): string {
  for (const m of [...(messages ?? [])].reverse()) {
    if (m?.role !== "assistant") continue;
    const parts = Array.isArray(m.content) ? m.content : [{ type: "text", text: String(m.content ?? "") }];
    return parts.filter((p: any) => p?.type === "text").map((p: any) => p.text).join("\n");
  }
  return "";
}

export default function (pi: any) {
  pi.on("session_start", async (event: any, ctx: any) => {
    invoke("session.start", { hook_event_name: "session_start", session_id: sessionId(ctx), cwd: ctx?.cwd, source: event?.reason });
  });
  pi.on("tool_call", async (event: any, ctx: any) => {
    invoke("tool.before", { hook_event_name: "tool_call", session_id: sessionId(ctx), cwd: ctx?.cwd, tool_name: event?.toolName, tool_input: event?.input });
  });
  pi.on("tool_result", async (event: any, ctx: any) => {
    invoke("tool.after", { hook_event_name: "tool_result", session_id: sessionId(ctx), cwd: ctx?.cwd, tool_name: event?.toolName });
  });
  pi.on("agent_end", async (event: any, ctx: any) => {
    const answer = invoke("turn.after_agent", {
      hook_event_name: "agent_end",
      session_id: sessionId(ctx),
      cwd: ctx?.cwd,
      last_assistant_message: lastAssistantText(event?.messages),
    });
    if (answer.decision === "block" && answer.reason) {
      pi.sendUserMessage(answer.reason);
    }
  });
  pi.on("session_shutdown", async (event: any, ctx: any) => {
    invoke("session.end", { hook_event_name: "session_shutdown", session_id: sessionId(ctx), cwd: ctx?.cwd, reason: event?.reason });
  });
}
