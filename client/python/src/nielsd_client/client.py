"""Client: one connection to nielsd, one call at a time (see the package docstring).

Each call assigns the next request id (1, 2, ...), sends one Request frame and reads Response frames
until the final one for that id; TokenEvents of a streaming call go to `on_token` as they arrive.
An Error response raises NielsdError; a lost or corrupt connection raises ConnectionError, after
which the client is unusable.

Cancelling the call in flight: request_cancel() may be called from another thread or from a signal
handler. The call then sends Cancel{target_request_id} on the same connection, reads on until its
own final response (normally Error CANCELLED, raised as NielsdError with code "CANCELLED") and the
Cancel's reply, so the connection stays usable. cancel(request_id) is the Cancel request itself.
request_stop() sends Cancel{keep_output}: the call returns its result with stop_reason STOPPED,
keeping what was generated.
"""

import json
import os
import select
import socket
import threading

from . import nielsd_pb2 as pb


def default_socket_path(flag=None):
    """--socket > $NIELSD_SOCKET > $XDG_RUNTIME_DIR/nielsd/nielsd.sock > /run/nielsd/nielsd.sock."""
    if flag:
        return flag
    if os.environ.get("NIELSD_SOCKET"):
        return os.environ["NIELSD_SOCKET"]
    if os.environ.get("XDG_RUNTIME_DIR"):
        return os.path.join(os.environ["XDG_RUNTIME_DIR"], "nielsd", "nielsd.sock")
    return "/run/nielsd/nielsd.sock"


def json_schema(schema):
    """A Constraint (structured output): replies are JSON valid under `schema` (a dict, or JSON text)."""
    if not isinstance(schema, str):
        schema = json.dumps(schema)
    return pb.Constraint(json_schema=schema)


def gbnf(grammar):
    """A Constraint: replies follow the GBNF grammar text (llama.cpp's syntax, start rule `root`)."""
    return pb.Constraint(gbnf=grammar)


def any_json():
    """A Constraint: replies are a single JSON value."""
    return pb.Constraint(any_json=pb.Constraint.AnyJson())


def tools_from_openai(tools):
    """An OpenAI-style tools list ([{"type": "function", "function": {"name", "description",
    "parameters"}}], or the bare function objects) as a niels.v1.ToolSet."""
    out = pb.ToolSet()
    for tool in tools:
        function = tool.get("function", tool) if isinstance(tool, dict) else tool
        params = function.get("parameters")
        out.tools.add(name=function["name"], description=function.get("description", ""),
                      parameters=json.dumps(params) if params is not None else "")
    return out


def message(role, content="", tool_calls=(), tool_call_id="", name="", reasoning=""):
    """A niels.v1.ChatMessage. tool_calls: (id, name, arguments) triples or ToolCall messages;
    arguments a dict or JSON text."""
    out = pb.ChatMessage(role=role, content=content, tool_call_id=tool_call_id, name=name,
                         reasoning=reasoning)
    for call in tool_calls:
        if isinstance(call, pb.ToolCall):
            out.tool_calls.add().CopyFrom(call)
        else:
            call_id, call_name, arguments = call
            if not isinstance(arguments, str):
                arguments = json.dumps(arguments)
            out.tool_calls.add(id=call_id, name=call_name, arguments=arguments)
    return out


def tool_result(call, content):
    """The tool message answering `call` (a ToolCall of a reply) with `content` (text, or any
    JSON-serializable value)."""
    if not isinstance(content, str):
        content = json.dumps(content)
    return message("tool", content, tool_call_id=call.id, name=call.name)


TOOL_CHOICES = {"auto": pb.ToolChoice.AUTO, "none": pb.ToolChoice.NONE,
                "required": pb.ToolChoice.REQUIRED}


def sampling_message(logit_bias=None, **sampling):
    """A niels.v1.Sampling from keyword arguments: temperature, top_k, top_p, repetition_penalty,
    seed, allow_special_tokens, banned_ids, and logit_bias, a dict {token id: bias} or an iterable
    of (id, bias) pairs (the bias is added to the raw logits; float("-inf") bans the id)."""
    message = pb.Sampling(**sampling)
    if logit_bias is not None:
        pairs = logit_bias.items() if isinstance(logit_bias, dict) else logit_bias
        for token_id, bias in pairs:
            message.logit_bias.add(id=int(token_id), bias=float(bias))
    return message


class NielsdError(Exception):
    """An Error response: `code` is the niels.v1.ErrorCode name, e.g. "NOT_FOUND"."""

    def __init__(self, code, message):
        super().__init__("%s: %s" % (code, message))
        self.code = code
        self.message = message


def encode_varint(value):
    """The base-128 varint that precedes every frame."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


class Client:
    """A connection to nielsd. Use as a context manager or call close()."""

    def __init__(self, path=None, max_frame_bytes=64 << 20):
        self.path = default_socket_path(path)
        self.max_frame_bytes = max_frame_bytes
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._sock.connect(self.path)
        except OSError as e:
            self._sock.close()
            raise ConnectionError("cannot reach nielsd at %s (%s)" % (self.path, e.strerror)) from e
        self._buf = bytearray()
        self._next_id = 1
        self._call_lock = threading.Lock()
        # request_cancel() writes one byte here; the call in flight waits on both sockets.
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)

    def close(self):
        self._sock.close()
        self._wake_r.close()
        self._wake_w.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def last_request_id(self):
        """The most recently assigned request id (0 before any call)."""
        return self._next_id - 1

    # ------------------------------------------------------------------ cancelling

    def request_cancel(self):
        """Asks the call in flight to be cancelled. Safe from other threads and signal handlers.
        A request made while no call is in flight is forgotten when the next call starts."""
        try:
            self._wake_w.send(b"c")
        except (BlockingIOError, OSError):
            pass  # already pending, or closed

    def request_stop(self):
        """Asks the call in flight to stop and keep what it generated (its result then has
        stop_reason STOPPED). Safe from other threads and signal handlers; a pending
        request_cancel() wins."""
        try:
            self._wake_w.send(b"s")
        except (BlockingIOError, OSError):
            pass

    def clear_cancel_request(self):
        """Forgets a cancel or stop request that no call has acted on yet; returns which it was
        ("cancel", "stop" or None)."""
        kind = None
        try:
            while True:
                data = self._wake_r.recv(64)
                if not data:
                    break
                if b"c" in data:
                    kind = "cancel"
                elif kind is None:
                    kind = "stop"
        except (BlockingIOError, OSError):
            pass
        return kind

    # ------------------------------------------------------------------ framing

    def _send(self, request):
        body = request.SerializeToString()
        self._sock.sendall(encode_varint(len(body)) + body)

    def _try_parse(self):
        """A complete Response from the buffer, or None when more bytes are needed."""
        length = 0
        for i in range(min(len(self._buf), 10)):
            byte = self._buf[i]
            length |= (byte & 0x7F) << (7 * i)
            if not byte & 0x80:
                if length > self.max_frame_bytes:
                    raise ConnectionError("frame of %d bytes from nielsd is too large" % length)
                end = i + 1 + length
                if len(self._buf) < end:
                    return None
                response = pb.Response()
                response.ParseFromString(bytes(self._buf[i + 1:end]))
                del self._buf[:end]
                return response
        if len(self._buf) >= 10:
            raise ConnectionError("malformed frame length from nielsd")
        return None

    def _recv(self):
        """The next Response, or "cancel" / "stop" when one was requested first."""
        while True:
            response = self._try_parse()
            if response is not None:
                return response
            readable, _, _ = select.select([self._sock, self._wake_r], [], [])
            if self._wake_r in readable:
                kind = self.clear_cancel_request()
                if kind is not None:
                    return kind
                continue
            chunk = self._sock.recv(65536)
            if not chunk:
                raise ConnectionError("nielsd at %s closed the connection" % self.path)
            self._buf += chunk

    def _new_request(self):
        request = pb.Request(request_id=self._next_id)
        self._next_id += 1
        return request

    # ------------------------------------------------------------------ calls

    def call(self, kind, message=None, on_token=None):
        """Sends Request{kind: message}; returns the result message or raises NielsdError."""
        with self._call_lock:
            # A request_cancel() that came before this call (e.g. from the last event of the call
            # before) targets no call: forget it, so it cannot cancel this one.
            self.clear_cancel_request()
            request = self._new_request()
            field = getattr(request, kind)
            if message is not None:
                field.CopyFrom(message)
            else:
                field.SetInParent()
            self._send(request)
            final = None
            cancel_id = 0
            cancel_answered = False
            while final is None or (cancel_id and not cancel_answered):
                response = self._recv()
                if isinstance(response, str):  # request_cancel() or request_stop()
                    if not cancel_id and final is None:
                        cancel = self._new_request()
                        cancel.cancel.target_request_id = request.request_id
                        cancel.cancel.keep_output = response == "stop"
                        cancel_id = cancel.request_id
                        self._send(cancel)
                    continue
                which = response.WhichOneof("kind")
                if response.request_id == request.request_id:
                    if which != "token":
                        final = response
                    elif on_token is not None and final is None:
                        on_token(response.token)
                elif cancel_id and response.request_id == cancel_id and which != "token":
                    cancel_answered = True
                # anything else belongs to no call of ours (a stale id): ignored
        which = final.WhichOneof("kind")
        if which == "error":
            raise NielsdError(pb.ErrorCode.Name(final.error.code), final.error.message)
        if which != kind:
            raise NielsdError("INTERNAL", "expected a %s response, got %s" % (kind, which))
        return getattr(final, kind)

    def info(self):
        return self.call("info")

    def create_session(self, system_prompt=None, tools=None, defer_prefill=False):
        """tools: the session's tools, a ToolSet or an OpenAI-style list (tools_from_openai).
        defer_prefill: answer at once and leave the system prompt to the session's first chat or
        generate, which prefills it with its own prompt (for a session used right away; the
        results are the same)."""
        req = pb.CreateSessionRequest()
        if system_prompt is not None:
            req.system_prompt = system_prompt
        if tools is not None:
            req.tools.CopyFrom(tools if isinstance(tools, pb.ToolSet) else tools_from_openai(tools))
        req.defer_prefill = bool(defer_prefill)
        return self.call("create_session", req)

    def chat(self, session_id, user_text="", on_token=None, max_new_tokens=None, use_kv_cache=None,
             enable_thinking=None, constraint=None, stop_strings=(), messages=(), keep_messages=None,
             append_only=False, tools=None, tool_choice=None, want_logprobs=False, top_logprobs=0,
             sampled_top_logprobs=0, **sampling):
        """One chat turn. With on_token the reply streams (one TokenEvent per token: .text adds to
        the answer, .reasoning to a reasoning model's reasoning; the response has both).
        enable_thinking: the chat template's switch (Qwen3); None leaves the model's default.
        constraint: structured output, json_schema(...), gbnf(...) or any_json(); a reply cut by
        max_new_tokens before it is complete has stop_reason CONSTRAINT_INCOMPLETE.
        stop_strings: the reply ends before the first of these texts (stop_reason STOP_STRING, the
        response's stop_string says which); not with a constraint.
        sampling: temperature, top_k, top_p, repetition_penalty, seed, banned_ids, logit_bias
        ({id: bias}, added to the raw logits; see sampling_message) (niels.v1.Sampling).
        Conversations (proto/PROTOCOL.md "Conversations"): messages (ChatMessage, see message() and
        tool_result()) instead of user_text; keep_messages cuts the conversation first;
        append_only appends without a reply. Tools: tools replaces the session's (ToolSet or
        OpenAI-style list; [] clears them); tool_choice "auto", "none" or "required", or a tool's
        name. The response's tool_calls are the calls the reply made (stop_reason TOOL_CALLS).
        want_logprobs / top_logprobs (0..1000): per reply id a StepInfo (logprob, best alternatives,
        text_bytes) in the response's steps and in each streamed event's step; sampled_top_logprobs
        (0..1000): each step's sampled_top, the best ids of the distribution the id was drawn from
        (after bias, bans, penalty, temperature, top-k, top-p), and sampled_logprob."""
        req = pb.ChatRequest(session_id=session_id, user_text=user_text,
                             sampling=sampling_message(**sampling), stream=on_token is not None,
                             stop_strings=list(stop_strings), messages=list(messages),
                             append_only=append_only, want_logprobs=want_logprobs,
                             top_logprobs=top_logprobs, sampled_top_logprobs=sampled_top_logprobs)
        if keep_messages is not None:
            req.keep_messages = keep_messages
        if tools is not None:
            req.tools.CopyFrom(tools if isinstance(tools, pb.ToolSet) else tools_from_openai(tools))
        if tool_choice is not None:
            if tool_choice in TOOL_CHOICES:
                req.tool_choice.mode = TOOL_CHOICES[tool_choice]
            else:
                req.tool_choice.mode = pb.ToolChoice.NAMED
                req.tool_choice.name = tool_choice
        if constraint is not None:
            req.constraint.CopyFrom(constraint)
        if max_new_tokens is not None:
            req.max_new_tokens = max_new_tokens
        if use_kv_cache is not None:
            req.use_kv_cache = use_kv_cache
        if enable_thinking is not None:
            req.enable_thinking = enable_thinking
        return self.call("chat", req, on_token)

    def generate(self, session_id, input_ids=(), on_token=None, max_new_tokens=None,
                 use_kv_cache=None, stop_ids=(), want_logprobs=False, top_logprobs=0, constraint=None,
                 stop_strings=(), sampled_top_logprobs=0, probes=None, **sampling):
        """The raw form: input_ids are appended and processed, then up to max_new_tokens sampled.
        want_logprobs, top_logprobs, sampled_top_logprobs: per-step values as for chat().
        constraint: as for chat(); the new ids' text follows it.
        stop_strings: generation ends before the first of these texts; new_ids then ends with the
        last id wholly before it (the session too).
        probes: activation statistics (PROTOCOL.md, "Activation statistics"): a dict with "sites"
        (hook site names or * patterns, e.g. ["blocks.*.hook_resid_post"]), "compact" (default
        True), "per_token" (default True) and "aggregate" (default False); the response's
        activations / activation_totals hold them (activation_stats_dicts() makes dicts of them).
        sampling: as for chat(); with logit_bias, steps' logprobs are of the biased logits."""
        req = pb.GenerateRequest(session_id=session_id, input_ids=list(input_ids),
                                 sampling=sampling_message(**sampling), stream=on_token is not None,
                                 stop_ids=list(stop_ids), want_logprobs=want_logprobs,
                                 top_logprobs=top_logprobs, stop_strings=list(stop_strings),
                                 sampled_top_logprobs=sampled_top_logprobs)
        if constraint is not None:
            req.constraint.CopyFrom(constraint)
        if probes is not None:
            sites = probes.get("sites", ())
            req.probes.CopyFrom(pb.ProbeSpec(sites=[sites] if isinstance(sites, str) else list(sites),
                                             full=not probes.get("compact", True),
                                             per_token=probes.get("per_token", True),
                                             aggregate=probes.get("aggregate", False)))
        if max_new_tokens is not None:
            req.max_new_tokens = max_new_tokens
        if use_kv_cache is not None:
            req.use_kv_cache = use_kv_cache
        return self.call("generate", req, on_token)

    def tokenize(self, text, add_special=False, parse_special=False):
        """The ids of text. add_special: the model's BOS in front when its tokenizer adds one
        (InfoResponse.add_bos); parse_special: special-token literals become their ids."""
        return self.call("tokenize", pb.TokenizeRequest(text=text, add_special=add_special,
                                                        parse_special=parse_special))

    def detokenize(self, ids):
        return self.call("detokenize", pb.DetokenizeRequest(ids=list(ids)))

    def get_session(self, session_id):
        return self.call("get_session", pb.GetSessionRequest(session_id=session_id))

    def list_sessions(self):
        return self.call("list_sessions")

    def fork_session(self, session_id):
        return self.call("fork_session", pb.ForkSessionRequest(session_id=session_id))

    def reset_session(self, session_id):
        return self.call("reset_session", pb.ResetSessionRequest(session_id=session_id))

    def rewind_session(self, session_id, keep_messages):
        """Keeps the first keep_messages messages of the conversation (get_session().messages after
        the system prompt; even: whole turns) and drops the rest, to edit, retry or undo a turn."""
        return self.call("rewind_session", pb.RewindSessionRequest(session_id=session_id,
                                                                   keep_messages=keep_messages))

    def delete_session(self, session_id):
        return self.call("delete_session", pb.DeleteSessionRequest(session_id=session_id))

    def cancel(self, target_request_id):
        """The Cancel request for a request of this connection; .found says whether it was in flight.
        (A call of this client blocks until done: use request_cancel() for the call in flight.)"""
        return self.call("cancel", pb.CancelRequest(target_request_id=target_request_id))

    def stats(self):
        return self.call("stats")

    def weight_stats(self, names, compact=True):
        """Statistics of the model's weights (PROTOCOL.md, "Weight statistics"). names: a tensor name
        or a list of them, Hugging Face's ("model.layers.0.mlp.gate_proj.weight") or GGUF's
        ("blk.0.ffn_gate.weight"), "*" matching any run of characters (dots included). Returns one
        dict per tensor, in the model's order: hf_name, gguf_name, shape, dtype, parameters,
        nonfinite, mean, std, min, max, l2_norm; with compact=False also median, abs_mean,
        zeros_percent, near_zero_percent, l1_norm, p5, p25, p50, p75, p95 and histogram
        ({"low", "high", "counts"}: 20 equal bins, the last one closed)."""
        if isinstance(names, str):
            names = [names]
        response = self.call("weight_stats", pb.WeightStatsRequest(names=list(names), full=not compact))
        return [_tensor_stats_dict(t) for t in response.tensors]


_COMPACT_STATS = ("mean", "std", "min", "max", "l2_norm")
_FULL_STATS = ("median", "abs_mean", "zeros_percent", "near_zero_percent", "l1_norm",
               "p5", "p25", "p50", "p75", "p95")


def _tensor_stats_dict(t):
    d = {"hf_name": t.hf_name, "gguf_name": t.gguf_name, "shape": list(t.shape), "dtype": t.dtype,
         "parameters": t.parameters, "nonfinite": t.nonfinite}
    d.update((key, getattr(t, key)) for key in _COMPACT_STATS)
    if t.full:
        d.update((key, getattr(t, key)) for key in _FULL_STATS)
        d["histogram"] = {"low": t.histogram.low, "high": t.histogram.high, "counts": list(t.histogram.counts)}
    return d


def activation_stats_dicts(activations):
    """ActivationStats messages (GenerateResponse.activations or activation_totals, or a
    TokenEvent's) as dicts: site, position (-1 for a total), positions, shape, nonfinite and the
    statistics, as weight_stats() gives them."""
    out = []
    for a in activations:
        d = _tensor_stats_dict(a.stats)
        del d["hf_name"], d["gguf_name"]
        d.update(site=a.site, position=a.position, positions=a.positions)
        out.append(d)
    return out


def run_tool_loop(client, session_id, user_text, functions, max_rounds=8, **chat_args):
    """Asks the model, runs the Python functions it calls (functions: name -> callable taking the
    call's arguments as keyword arguments; its return value, JSON-serialized unless a str, is the
    result), sends the results back and repeats until a reply makes no call or max_rounds replies
    were made. The session must have the functions as its tools (create_session(tools=...)).
    Returns the last ChatResponse. A call to a function that raises gets the error's text as its
    result, so the model can see it."""
    response = client.chat(session_id, user_text, **chat_args)
    for _ in range(max_rounds - 1):
        if not response.tool_calls:
            break
        results = []
        for call in response.tool_calls:
            try:
                value = functions[call.name](**json.loads(call.arguments))
            except Exception as error:  # the model sees what went wrong
                value = "error: %s" % error
            results.append(tool_result(call, value))
        response = client.chat(session_id, messages=results, **chat_args)
    return response
