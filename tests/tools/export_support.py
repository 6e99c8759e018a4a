"""Shared by the niels-export tests: random model directories, a real nielsd process, nielsd's own
logits through niels-inspect. Standard library and numpy only, plus the repository's Python client
for Nielsd: the package CMake stages in the build tree (NIELS_PYTHON_PACKAGE_DIR, on PYTHONPATH).
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tools", "export"))


def write_safetensors(path, tensors):
    """name -> float32 array, as a safetensors file (sorted names, 8-byte padded header)."""
    header, offset = {}, 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name], dtype="<f4")
        tensors[name] = a
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text)
        for name in sorted(tensors):
            f.write(tensors[name].tobytes())


def random_tensors(cfg, seed, std):
    """niels_gpt state_dict names; matrices and biases normal(0, std), norms 1 + normal(0, 0.1)."""
    rng = np.random.default_rng(seed)
    V, C, F = cfg["V"], cfg["C"], cfg["d_ff"]

    def mat(*shape):
        return rng.normal(0.0, std, size=shape).astype(np.float32)

    def norm():
        return (1.0 + rng.normal(0.0, 0.1, size=(C,))).astype(np.float32)

    t = {"tok_emb.weight": mat(V, C), "ln_f.weight": norm()}
    for i in range(cfg["L"]):
        p = f"blocks.{i}."
        t.update({p + "ln1.weight": norm(), p + "ln2.weight": norm(),
                  p + "attn.qkv.weight": mat(3 * C, C), p + "attn.proj.weight": mat(C, C),
                  p + "mlp.fc_a.weight": mat(F, C), p + "mlp.fc_a.bias": mat(F),
                  p + "mlp.fc_g.weight": mat(F, C), p + "mlp.fc_g.bias": mat(F),
                  p + "mlp.fc_out.weight": mat(C, F), p + "mlp.fc_out.bias": mat(C)})
    return t


def make_random_model(model_dir, make_tokenizer, seed, std, C=64, L=2, H=4, d_ff=128, T=128, tokenizer_args=()):
    """A complete model directory: random weights and the tests' tiny SentencePiece tokenizer, or
    the one niels_make_test_tokenizer trains with `tokenizer_args` (e.g. --unigram CORPUS)."""
    os.makedirs(model_dir, exist_ok=True)
    tokenizer = os.path.join(model_dir, "tokenizer.model")
    out = subprocess.run([make_tokenizer, tokenizer, *tokenizer_args], check=True, capture_output=True, text=True)
    cfg = {"V": int(out.stdout.strip()), "T": T, "C": C, "L": L, "H": H, "d_ff": d_ff,
           "rope_theta": 10000.0, "name": f"random-std{std}"}
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump(cfg, f)
    write_safetensors(os.path.join(model_dir, "model.safetensors"), random_tensors(cfg, seed, std))
    return cfg


def _varint_bytes(v):
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _field_bytes(number, wire, value):
    tag = _varint_bytes(number << 3 | wire)
    if wire == 0:
        return tag + _varint_bytes(value)
    if wire == 2:
        return tag + _varint_bytes(len(value)) + value
    return tag + value


def _set_fields(message, values):
    """A protobuf message with the fields {number: int (varint) or bytes} set (replaced or added)."""
    from niels_tools import spm_model  # noqa: E402 (on sys.path with tools/export's niels_export)
    kept = b"".join(_field_bytes(f, w, v) for f, w, v in spm_model._fields(message) if f not in values)
    return kept + b"".join(_field_bytes(f, 2 if isinstance(v, bytes) else 0, v) for f, v in values.items())


def edit_tokenizer(model_dir, trainer=None, normalizer=None, piece_types=None):
    """Rewrites a model directory's tokenizer.model in place (sentencepiece_model.proto field numbers):
    `trainer` / `normalizer` {field: int or bytes} set in ModelProto.trainer_spec (2) / normalizer_spec (3),
    `piece_types` {piece text: type} retypes those pieces (SentencePiece.type = 3)."""
    import niels_export  # noqa: E402,F401 (puts niels_tools on sys.path)
    from niels_tools import spm_model  # noqa: E402
    path = os.path.join(model_dir, "tokenizer.model")
    with open(path, "rb") as f:
        data = f.read()
    out = b""
    for field, wire, value in spm_model._fields(data):
        if field == 1 and piece_types:
            text = next(v for f, _, v in spm_model._fields(value) if f == 1).decode("utf-8")
            if text in piece_types:
                value = _set_fields(value, {3: piece_types[text]})
        elif field == 2 and trainer:
            value = _set_fields(value, trainer)
        elif field == 3 and normalizer:
            value = _set_fields(value, normalizer)
        out += _field_bytes(field, wire, value)
    with open(path, "wb") as f:
        f.write(out)


def inspect_logits(inspect, model_dir, ids, out_path):
    """nielsd's model code (LoadModelDir + full forward) -> logits [len(ids), V] as float32."""
    subprocess.run([inspect, model_dir, "--logits", ",".join(map(str, ids)), "--out", out_path],
                   check=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    logits = np.fromfile(out_path, dtype="<f4")
    return logits.reshape(len(ids), -1)


def run_export(exporter, *args):
    """Runs niels-export; returns (exit code, stdout, stderr)."""
    p = subprocess.run([sys.executable, exporter, *args], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


class Nielsd:
    """A real nielsd serving `model_dir` on a socket in `work_dir` (its sessions in work_dir/state);
    a connected Client in .client."""

    def __init__(self, nielsd, model_dir, work_dir):
        self.socket_path = os.path.join(work_dir, "nielsd.sock")
        if os.path.exists(self.socket_path):
            os.unlink(self.socket_path)
        self.log = open(os.path.join(work_dir, "nielsd.log"), "w")
        # Its own state directory: the default one is locked by any other nielsd of this user.
        self.proc = subprocess.Popen([nielsd, "--model", model_dir, "--socket", self.socket_path,
                                      "--state-dir", os.path.join(work_dir, "state"),
                                      "--threads", "1", "--log-level", "warn"],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nielsd exited with {self.proc.returncode}; see {self.log.name}")
            try:
                with socket.socket(socket.AF_UNIX) as s:
                    s.connect(self.socket_path)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("nielsd did not listen within 120 s")
                time.sleep(0.05)
        import nielsd_client  # noqa: E402 (needs the sys.path set above)
        self.client = nielsd_client.Client(self.socket_path)

    def greedy(self, prompt_ids, max_new):
        """nielsd's greedy continuation of raw token ids (stops after eot, which is included)."""
        c = self.client
        sid = c.create_session().session_id
        r = c.generate(sid, input_ids=prompt_ids, max_new_tokens=max_new, temperature=0.0)
        return list(r.new_ids)

    def chat(self, system, user, max_new, eot):
        """One greedy chat turn; returns (prompt ids before the reply, reply ids + [eot] if it ended)."""
        import nielsd_client  # noqa: E402
        c = self.client
        sid = c.create_session(system_prompt=system).session_id
        r = c.chat(sid, user, max_new_tokens=max_new, temperature=0.0)
        history = list(c.get_session(sid).token_ids)
        reply = list(r.reply_ids)
        n = len(reply)
        start = next(i for i in range(len(history) - n, -1, -1) if history[i:i + n] == reply)
        ended = r.stop_reason == nielsd_client.pb.EOT
        return history[:start], reply + ([eot] if ended else [])

    def close(self):
        self.client.close()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def read_model_tensors(model_dir):
    """A model directory's model.safetensors as name -> float32 array (niels-export's reader)."""
    import niels_export  # noqa: E402
    return dict(niels_export.read_safetensors(os.path.join(model_dir, "model.safetensors")))
