"""Official SDKs against the proxy: a tool-call turn and a tool-result turn, streaming and not.

Usage: python sdk_clients.py <proxy base url>. Prints one line per check; exits non-zero on the
first failure. Run by tests/e2e.rs (sdk_clients_drive_the_proxy) against its scripted upstream.
"""
import json
import sys

import anthropic
import openai

base = sys.argv[1]
tools_a = [{"name": "get_weather", "description": "Get weather",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]
tools_o = [{"type": "function", "function": {"name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", flush=True)
        sys.exit(1)
    print(f"ok: {what}", flush=True)


a = anthropic.Anthropic(base_url=base, api_key="proxy-token", max_retries=0)
first = [{"role": "user", "content": "weather in Paris?"}]
m = a.messages.create(model="claude-opus-4-8", max_tokens=256, tools=tools_a, messages=first)
check(m.stop_reason == "tool_use" and m.content[0].input == {"city": "Paris"}, "anthropic tool turn")
second = first + [{"role": "assistant", "content": [c.model_dump() for c in m.content]},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": m.content[0].id,
                                                "content": "sunny"}]}]
m2 = a.messages.create(model="claude-opus-4-8", max_tokens=256, tools=tools_a, messages=second)
check(m2.stop_reason == "end_turn" and m2.content[0].text == "It is sunny.", "anthropic tool result turn")
with a.messages.stream(model="claude-opus-4-8", max_tokens=256, tools=tools_a, messages=first) as s:
    final = s.get_final_message()
check(final.stop_reason == "tool_use" and final.content[0].input == {"city": "Paris"}
      and final.usage.input_tokens == 11, "anthropic streaming tool turn")
with a.messages.stream(model="claude-opus-4-8", max_tokens=256, tools=tools_a, messages=second) as s:
    text = "".join(s.text_stream)
check(text == "It is sunny.", "anthropic streaming tool result turn")

o = openai.OpenAI(base_url=base + "/v1", api_key="proxy-token", max_retries=0)
msgs = [{"role": "user", "content": "weather in Paris?"}]
r = o.chat.completions.create(model="gpt-4o", tools=tools_o, messages=msgs)
call = r.choices[0].message.tool_calls[0]
check(r.choices[0].finish_reason == "tool_calls" and json.loads(call.function.arguments) == {"city": "Paris"},
      "openai tool turn")
msgs2 = msgs + [r.choices[0].message.model_dump(exclude_none=True),
                {"role": "tool", "tool_call_id": call.id, "content": "sunny"}]
r2 = o.chat.completions.create(model="gpt-4o", tools=tools_o, messages=msgs2)
check(r2.choices[0].message.content == "It is sunny.", "openai tool result turn")
args, finish, usage = "", None, None
for ch in o.chat.completions.create(model="gpt-4o", tools=tools_o, messages=msgs, stream=True,
                                    stream_options={"include_usage": True}):
    if ch.usage:
        usage = ch.usage
    for c in ch.choices:
        for tc in c.delta.tool_calls or []:
            args += tc.function.arguments or ""
        finish = c.finish_reason or finish
check(json.loads(args) == {"city": "Paris"} and finish == "tool_calls" and usage.prompt_tokens == 15,
      "openai streaming tool turn")
text = "".join(c.choices[0].delta.content or "" for c in
               o.chat.completions.create(model="gpt-4o", tools=tools_o, messages=msgs2, stream=True)
               if c.choices)
check(text == "It is sunny.", "openai streaming tool result turn")
