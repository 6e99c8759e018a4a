"""A small client for nielsd (see proto/PROTOCOL.md), built on the generated protobuf module.

Frames are protobuf's delimited format: a base-128 varint length, then a niels.v1.Request (to the
daemon) or niels.v1.Response (from it). One call at a time; stream events go to a callback.

The generated module `niels/v1/nielsd_pb2.py` is never committed. It is found, in this order, on
sys.path (e.g. PYTHONPATH=<build>/client/python), in $NIELSD_PY_PROTO_DIR, or generated on the fly
with `protoc --python_out` from the repository's proto/ directory into a temporary directory.
"""

import atexit
import os
import shutil
import socket
import subprocess
import sys
import tempfile


def _import_pb2():
    try:
        from niels.v1 import nielsd_pb2  # noqa: F401
        return nielsd_pb2
    except ImportError:
        pass
    candidates = [os.environ.get("NIELSD_PY_PROTO_DIR", "")]
    here = os.path.dirname(os.path.abspath(__file__))
    proto_root = os.path.normpath(os.path.join(here, "..", "..", "proto"))
    if os.path.exists(os.path.join(proto_root, "niels", "v1", "nielsd.proto")):
        out = tempfile.mkdtemp(prefix="nielsd-pb2-")
        atexit.register(shutil.rmtree, out, True)
        subprocess.run(["protoc", "--python_out=" + out, "-I", proto_root,
                        os.path.join(proto_root, "niels", "v1", "nielsd.proto")], check=True)
        candidates.append(out)
    for directory in candidates:
        if directory and os.path.exists(os.path.join(directory, "niels", "v1", "nielsd_pb2.py")):
            sys.path.insert(0, directory)
            from niels.v1 import nielsd_pb2  # noqa: F811
            return nielsd_pb2
    raise ImportError("niels/v1/nielsd_pb2.py not found: set PYTHONPATH or NIELSD_PY_PROTO_DIR")


pb = _import_pb2()


def default_socket_path(flag=None):
    """--socket > $NIELSD_SOCKET > $XDG_RUNTIME_DIR/nielsd/nielsd.sock > /run/nielsd/nielsd.sock."""
    if flag:
        return flag
    if os.environ.get("NIELSD_SOCKET"):
        return os.environ["NIELSD_SOCKET"]
    if os.environ.get("XDG_RUNTIME_DIR"):
        return os.path.join(os.environ["XDG_RUNTIME_DIR"], "nielsd", "nielsd.sock")
    return "/run/nielsd/nielsd.sock"


class NielsdError(Exception):
    """An Error response: `code` is the niels.v1.ErrorCode name, e.g. "NOT_FOUND"."""

    def __init__(self, code, message):
        super().__init__("%s: %s" % (code, message))
        self.code = code
        self.message = message


def encode_varint(value):
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
        self._buf = b""
        self._next_id = 1

    def close(self):
        self._sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------------ framing

    def _read_exact(self, n):
        while len(self._buf) < n:
            chunk = self._sock.recv(65536)
            if not chunk:
                raise ConnectionError("nielsd at %s closed the connection" % self.path)
            self._buf += chunk
        data, self._buf = self._buf[:n], self._buf[n:]
        return data

    def _read_varint(self):
        value = 0
        for i in range(5):
            byte = self._read_exact(1)[0]
            value |= (byte & 0x7F) << (7 * i)
            if not byte & 0x80:
                return value
        raise ConnectionError("malformed frame length from nielsd")

    def _recv(self):
        length = self._read_varint()
        if length > self.max_frame_bytes:
            raise ConnectionError("frame of %d bytes from nielsd is too large" % length)
        response = pb.Response()
        response.ParseFromString(self._read_exact(length))
        return response

    def _send(self, request):
        body = request.SerializeToString()
        self._sock.sendall(encode_varint(len(body)) + body)

    # ------------------------------------------------------------------ calls

    def call(self, kind, message=None, on_token=None):
        """Sends Request{kind: message}; returns the result message or raises NielsdError."""
        request = pb.Request(request_id=self._next_id)
        self._next_id += 1
        field = getattr(request, kind)
        if message is not None:
            field.CopyFrom(message)
        else:
            field.SetInParent()
        self._send(request)
        while True:
            response = self._recv()
            if response.request_id != request.request_id:
                continue  # not ours (a stale id): ignored
            which = response.WhichOneof("kind")
            if which == "token":
                if on_token is not None:
                    on_token(response.token)
                continue
            if which == "error":
                raise NielsdError(pb.ErrorCode.Name(response.error.code), response.error.message)
            if which != kind:
                raise NielsdError("INTERNAL", "expected a %s response, got %s" % (kind, which))
            return getattr(response, kind)

    def info(self):
        return self.call("info")

    def create_session(self, system_prompt=None):
        req = pb.CreateSessionRequest()
        if system_prompt is not None:
            req.system_prompt = system_prompt
        return self.call("create_session", req)

    def chat(self, session_id, user_text, on_token=None, max_new_tokens=None, use_kv_cache=None,
             **sampling):
        req = pb.ChatRequest(session_id=session_id, user_text=user_text,
                             sampling=pb.Sampling(**sampling), stream=on_token is not None)
        if max_new_tokens is not None:
            req.max_new_tokens = max_new_tokens
        if use_kv_cache is not None:
            req.use_kv_cache = use_kv_cache
        return self.call("chat", req, on_token)

    def generate(self, session_id, input_ids=(), on_token=None, max_new_tokens=None,
                 use_kv_cache=None, stop_ids=(), want_logprobs=False, top_logprobs=0, **sampling):
        req = pb.GenerateRequest(session_id=session_id, input_ids=list(input_ids),
                                 sampling=pb.Sampling(**sampling), stream=on_token is not None,
                                 stop_ids=list(stop_ids), want_logprobs=want_logprobs,
                                 top_logprobs=top_logprobs)
        if max_new_tokens is not None:
            req.max_new_tokens = max_new_tokens
        if use_kv_cache is not None:
            req.use_kv_cache = use_kv_cache
        return self.call("generate", req, on_token)

    def tokenize(self, text):
        return self.call("tokenize", pb.TokenizeRequest(text=text))

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

    def delete_session(self, session_id):
        return self.call("delete_session", pb.DeleteSessionRequest(session_id=session_id))

    def stats(self):
        return self.call("stats")
