"""The official MCP Python SDK as the client of `babysitter mcp:serve` (tests/mcp.rs runs it).

argv: <babysitter binary> <project dir>. Spawns the server over stdio in the project, lists its
tools, drives the demo process to completion through them (create, iterate, list, show, post,
answer the breakpoint, events, status, rebuild), calls the session, discovery and configuration
tools and a few bad calls, and prints one JSON document: the tool names and every call with its
result, for the Rust test to assert on.
"""

import asyncio
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters, stdio_client


def result_json(r):
    text = "\n".join(c.text for c in r.content if getattr(c, "type", "") == "text")
    structured = getattr(r, "structured_content", None)
    if structured is None:
        structured = getattr(r, "structuredContent", None)
    return {"isError": bool(r.is_error if hasattr(r, "is_error") else r.isError),
            "structured": structured, "text": text}


async def main(binary, project):
    calls = []
    # The SDK passes the server only a default environment: babysitter's variables explicitly.
    env = {k: v for k, v in os.environ.items() if k.startswith("BABYSITTER_") or k in ("HOME", "TMPDIR")}
    params = StdioServerParameters(command=binary, args=["mcp:serve"], cwd=project, env=env)
    async with stdio_client(params) as streams:
        read, write = streams[0], streams[1]
        async with ClientSession(read, write) as session:
            info = await session.initialize()
            tools = (await session.list_tools()).tools
            names = sorted(t.name for t in tools)

            async def call(name, args):
                r = result_json(await session.call_tool(name, args))
                calls.append({"tool": name, "args": args, **r})
                return r

            await call("health", {})
            await call("run_create", {"processId": "golden/demo", "entrypoint": "processes/demo.mjs#process",
                                      "inputs": json.dumps({"feature": "mcp"}), "runId": "mcp-run",
                                      "prompt": "through MCP"})
            for _ in range(10):
                it = await call("run_iterate", {"runId": "mcp-run"})
                state = (it["structured"] or {}).get("status")
                if state == "completed" or it["isError"]:
                    break
                pending = await call("task_list", {"runId": "mcp-run", "pending": True})
                for t in (pending["structured"] or {}).get("tasks", []):
                    eid = t["effectId"]
                    await call("task_show", {"runId": "mcp-run", "effectId": eid})
                    if t.get("kind") == "breakpoint":
                        await call("breakpoint_answer", {"runId": "mcp-run", "effectId": eid,
                                                         "approved": True, "response": "ship it"})
                    else:
                        await call("task_post", {"runId": "mcp-run", "effectId": eid, "status": "ok",
                                                 "value": json.dumps({"done": eid})})
            await call("run_status", {"runId": "mcp-run"})
            await call("run_events", {"runId": "mcp-run", "limit": 100, "filterType": "EFFECT_RESOLVED",
                                      "reverse": True})
            await call("run_rebuild_state", {"runId": "mcp-run"})
            await call("breakpoint_rules", {})
            await call("session_init", {"sessionId": "mcp-session", "stateDir": f"{project}/state"})
            await call("session_associate", {"sessionId": "mcp-session", "stateDir": f"{project}/state",
                                             "runId": "mcp-run"})
            await call("session_state", {"sessionId": "mcp-session", "stateDir": f"{project}/state"})
            await call("run_create", {"processId": "golden/demo", "entrypoint": "processes/demo.mjs#process",
                                      "inputs": json.dumps({"feature": "resume"}), "runId": "mcp-run-2"})
            await call("session_resume", {"sessionId": "mcp-session-2", "stateDir": f"{project}/state",
                                          "runId": "mcp-run-2"})
            await call("skill_discover", {})
            await call("process_library_active", {})
            await call("configure_show", {})
            # Bad calls: refused with a reason, nothing run.
            await call("task_post", {"runId": "mcp-run", "effectId": "x", "status": "maybe"})
            await call("run_status", {"runId": "mcp-run", "colour": "blue"})
            await call("run_status", {})
            await call("run_status", {"runId": "no-such-run"})
            unknown = None
            try:
                await session.call_tool("no_such_tool", {})
            except Exception as e:  # the SDK raises the server's JSON-RPC error
                unknown = str(e)
    print(json.dumps({"server": info.server_info.name, "tools": names, "calls": calls,
                      "unknownTool": unknown}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
