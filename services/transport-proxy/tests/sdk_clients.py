"""Official SDKs (anthropic, openai Chat + Responses, google-genai) against the proxy: a tool-call
turn and a tool-result turn, streaming and not.

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

tools_r = [{"type": "function", "name": "get_weather", "description": "Get weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]
first_r = [{"role": "user", "content": "weather in Paris?"}]
rr = o.responses.create(model="gpt-5", tools=tools_r, input=first_r)
rcall = [i for i in rr.output if i.type == "function_call"][0]
check(rr.status == "completed" and json.loads(rcall.arguments) == {"city": "Paris"}
      and rr.usage.input_tokens == 15, "responses tool turn")
second_r = first_r + [{"type": "function_call", "call_id": rcall.call_id, "name": rcall.name,
                       "arguments": rcall.arguments},
                      {"type": "function_call_output", "call_id": rcall.call_id, "output": "sunny"}]
rr2 = o.responses.create(model="gpt-5", tools=tools_r, input=second_r)
check(rr2.output_text == "It is sunny.", "responses tool result turn")
with o.responses.stream(model="gpt-5", tools=tools_r, input=first_r) as s:
    final_r = s.get_final_response()
scall = [i for i in final_r.output if i.type == "function_call"][0]
check(json.loads(scall.arguments) == {"city": "Paris"} and final_r.usage.output_tokens == 7,
      "responses streaming tool turn")
with o.responses.stream(model="gpt-5", tools=tools_r, input=second_r) as s:
    deltas = "".join(ev.delta for ev in s if ev.type == "response.output_text.delta")
check(deltas == "It is sunny.", "responses streaming tool result turn")

from google import genai  # noqa: E402
from google.genai import types  # noqa: E402

g = genai.Client(api_key="proxy-token",
                 http_options=types.HttpOptions(base_url=base, api_version="v1beta"))
decl = types.FunctionDeclaration(
    name="get_weather", description="Get weather",
    parameters_json_schema={"type": "object", "properties": {"city": {"type": "string"}}})
cfg = types.GenerateContentConfig(
    tools=[types.Tool(function_declarations=[decl])],
    automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True))
ask = [types.Content(role="user", parts=[types.Part(text="weather in Paris?")])]
gr = g.models.generate_content(model="gemini-x", contents=ask, config=cfg)
gcall = gr.function_calls[0]
check(gcall.name == "get_weather" and gcall.args == {"city": "Paris"}
      and gr.candidates[0].finish_reason == types.FinishReason.STOP, "gemini tool turn")
answer = ask + [gr.candidates[0].content,
                types.Content(role="user", parts=[types.Part.from_function_response(
                    name="get_weather", response={"output": "sunny"})])]
gr2 = g.models.generate_content(model="gemini-x", contents=answer, config=cfg)
check(gr2.text == "It is sunny." and gr2.usage_metadata.prompt_token_count == 15,
      "gemini tool result turn")
calls = [c for ch in g.models.generate_content_stream(model="gemini-x", contents=ask, config=cfg)
         for c in (ch.function_calls or [])]
check(len(calls) == 1 and calls[0].args == {"city": "Paris"}, "gemini streaming tool turn")
text = "".join(ch.text or "" for ch in
               g.models.generate_content_stream(model="gemini-x", contents=answer, config=cfg))
check(text == "It is sunny.", "gemini streaming tool result turn")
