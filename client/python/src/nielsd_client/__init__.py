"""nielsd_client: talk to nielsd, the local inference daemon for niels_gpt models, over its socket.

    import nielsd_client
    with nielsd_client.Client() as client:          # socket resolved like niels-chat's
        session = client.create_session("you are terse.")
        reply = client.chat(session.session_id, "hello", on_token=lambda t: print(t.text, end=""))

Structured output: client.chat(..., constraint=nielsd_client.json_schema({...})) (or gbnf(text),
any_json()) makes the reply follow a JSON Schema or a grammar.

Sampling: chat() and generate() take temperature, top_k, top_p, repetition_penalty, seed,
banned_ids and logit_bias={token_id: bias} (added to the raw logits; float("-inf") bans) as keywords.

Tools: create_session(system, tools=[{"type": "function", "function": {...}}]) gives the model
tools; a reply's tool_calls are run by the caller and answered with
client.chat(sid, messages=[tool_result(call, value), ...]); run_tool_loop(client, sid, text,
{"name": python_function}) does that until the model answers.

Activation statistics: client.generate(sid, ids, probes={"sites": ["blocks.*.hook_resid_post"],
"aggregate": True}) gives per-token statistics at the named hook sites (response.activations,
activation_totals; activation_stats_dicts() turns them into dicts).

The wire format is proto/PROTOCOL.md: varint-length-delimited niels.v1.Request / Response protobuf
messages. The generated messages are `nielsd_client.pb` (nielsd_pb2, built with the package).
`python3 -m nielsd_client chat` is a small terminal chat.
"""

from . import nielsd_pb2 as pb
from .client import (Client, NielsdError, activation_stats_dicts, any_json, default_socket_path, encode_varint,
                     gbnf, json_schema, message, run_tool_loop, sampling_message, tool_result, tools_from_openai)

__all__ = ["Client", "NielsdError", "activation_stats_dicts", "any_json", "default_socket_path", "encode_varint",
           "gbnf", "json_schema", "message", "pb", "run_tool_loop", "sampling_message", "tool_result",
           "tools_from_openai"]
