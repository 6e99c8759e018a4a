#!/usr/bin/python3
"""converter_roundtrip: a real niels_gpt checkpoint -> niels-convert -> LoadModelDir -> logits.

Builds a tiny niels_gpt model in PyTorch (written here from docs/ARCHITECTURE.md "Model math",
independent of the C++ code), takes one AdamW step so the checkpoint carries a real
optimizer_state, saves it the way niels_gpt training does (model_cfg with an extra `_raw`,
train_cfg, model_state including the tied lm_head.weight, step, best_val_loss), converts it with tools/convert/convert_checkpoint.py, loads the
model directory in C++ through niels-inspect and compares the logits of the full forward and of the
Prefill+Decode path with this file's PyTorch forward (max abs diff <= 1e-5). Negative cases check
that the converter refuses bad checkpoints with a message naming the culprit.

Run by ctest (tests/tools/CMakeLists.txt) with Debian's /usr/bin/python3 (python3-torch):
  converter_roundtrip_test.py --inspect BIN --make-tokenizer BIN --converter SCRIPT --work-dir DIR
Prints one line per case and "converter_roundtrip: N passed, M failed"; exit status 1 on failure.
"""

import argparse
import contextlib
import copy
import importlib.util
import io
import json
import math
import os
import shutil
import subprocess
import sys
import traceback

import torch
from torch import nn
import torch.nn.functional as F

TOLERANCE = 1e-5
SPECIAL_EOT = b"<|ngpt_eot_84a5023f67d74cf29cc4001becde983c|>"

# ----------------------------------------------------------------------------------------------
# The reference model: niels_gpt's architecture, exactly as docs/ARCHITECTURE.md "Model math" states
# it.


class RMSNorm(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, x):
        return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-5) * self.weight


def rope_tables(context, head_dim, theta):
    """cos, sin [T, D/2]: angle = pos * theta^(-2i/D) in float64, then stored as float32."""
    i = torch.arange(head_dim // 2, dtype=torch.float64)
    inv_freq = theta ** (-2.0 * i / head_dim)
    angles = torch.outer(torch.arange(context, dtype=torch.float64), inv_freq)
    return torch.cos(angles).to(torch.float32), torch.sin(angles).to(torch.float32)


def apply_rope(x, cos, sin, halves=False):
    """x [..., n, D]; rotates adjacent pairs (x[2i], x[2i+1]). halves=True is the WRONG variant
    (pairs (x[i], x[i+D/2])), used only to show that the comparison can tell them apart."""
    if halves:
        a, b = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
        return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.heads = cfg["H"]
        self.qkv = nn.Linear(cfg["C"], 3 * cfg["C"], bias=False)
        self.proj = nn.Linear(cfg["C"], cfg["C"], bias=False)

    def forward(self, x, cos, sin, halves):
        B, n, C = x.shape
        D = C // self.heads
        q, k, v = self.qkv(x).split(C, dim=-1)  # each [B, n, C]
        q, k, v = (t.view(B, n, self.heads, D).transpose(1, 2) for t in (q, k, v))  # [B, H, n, D]
        q, k = apply_rope(q, cos, sin, halves), apply_rope(k, cos, sin, halves)
        scores = q @ k.transpose(-1, -2) / math.sqrt(D)  # [B, H, n, n]
        causal = torch.ones(n, n, dtype=torch.bool).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        y = torch.softmax(scores, dim=-1) @ v  # [B, H, n, D]
        return self.proj(y.transpose(1, 2).reshape(B, n, C))


class Mlp(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.fc_a = nn.Linear(cfg["C"], cfg["d_ff"])
        self.fc_g = nn.Linear(cfg["C"], cfg["d_ff"])
        self.fc_out = nn.Linear(cfg["d_ff"], cfg["C"])

    def forward(self, x):
        return self.fc_out(F.silu(self.fc_g(x)) * self.fc_a(x))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln1 = RMSNorm(cfg["C"])
        self.attn = Attention(cfg)
        self.ln2 = RMSNorm(cfg["C"])
        self.mlp = Mlp(cfg)

    def forward(self, x, cos, sin, halves):
        x = x + self.attn(self.ln1(x), cos, sin, halves)
        return x + self.mlp(self.ln2(x))


class NielsGpt(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg["V"], cfg["C"])
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg["L"]))
        self.ln_f = RMSNorm(cfg["C"])
        self.lm_head = nn.Linear(cfg["C"], cfg["V"], bias=False)
        self.lm_head.weight = self.tok_emb.weight  # tied
        cos, sin = rope_tables(cfg["T"], cfg["C"] // cfg["H"], cfg["rope_theta"])
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def forward(self, tokens, halves=False):  # tokens [B, n] -> logits [B, n, V]
        n = tokens.shape[1]
        cos, sin = self.rope_cos[:n], self.rope_sin[:n]
        h = self.tok_emb(tokens)
        for block in self.blocks:
            h = block(h, cos, sin, halves)
        return self.lm_head(self.ln_f(h))


def make_model(cfg, seed):
    """Random model with non-trivial norms and biases, then one real AdamW step."""
    torch.manual_seed(seed)
    model = NielsGpt(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("ln1.weight") or name.endswith("ln2.weight") or name == "ln_f.weight":
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif name.endswith(".bias"):
                p.copy_(0.05 * torch.randn_like(p))
            elif name == "tok_emb.weight":
                p.normal_(0.0, 0.3)
            else:
                p.normal_(0.0, 0.15)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    tokens = torch.randint(0, cfg["V"], (2, cfg["T"]))
    logits = model(tokens[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, cfg["V"]), tokens[:, 1:].reshape(-1))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return model, optimizer, float(loss)


def checkpoint_dict(model, optimizer, loss):
    cfg = model.cfg
    model_cfg = dict(cfg, dropout=0.1, _raw={"model": dict(cfg), "source": "configs/tiny.yaml"})
    return {
        "model_cfg": model_cfg,
        "train_cfg": {"lr": 1e-3, "batch_size": 2, "max_steps": 1, "seed": 1234},
        "model_state": model.state_dict(),
        "optimizer_state": optimizer.state_dict(),
        "step": 1,
        "best_val_loss": loss,
    }


def reference_logits(model, ids, halves=False):
    """Logits [n, V] of `model` for ids, computed in float64 from the float32 weights and RoPE
    tables, so the comparison measures the C++ float32 rounding alone (a float32 PyTorch forward
    is itself a few 1e-6 away from the exact result)."""
    exact = copy.deepcopy(model).double()
    with torch.no_grad():
        return exact(torch.tensor([ids]), halves=halves)[0].to(torch.float32)


def rounded_copy(model, dtype):
    """The model with every parameter rounded through dtype (what a f16/bf16 file holds)."""
    copy = NielsGpt(model.cfg)
    copy.load_state_dict({k: v.to(dtype).to(torch.float32) for k, v in model.state_dict().items()})
    return copy


# ----------------------------------------------------------------------------------------------
# Running the tools


class Tools:
    def __init__(self, args):
        self.inspect = args.inspect
        self.converter = args.converter
        self.work = args.work_dir
        # Most conversions call the converter's main() in this process (importing torch once per
        # run instead of once per case); the first conversion runs it as a program.
        spec = importlib.util.spec_from_file_location("convert_checkpoint", args.converter)
        self.converter_module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(self.converter_module)

    def convert(self, ckpt, spm, out_dir, *extra, as_program=False):
        argv = [ckpt, spm, out_dir, *extra]
        if as_program:
            return subprocess.run([sys.executable, self.converter, *argv], capture_output=True,
                                  text=True, timeout=120)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = self.converter_module.main(argv)
            except SystemExit as e:  # argparse
                code = e.code
        return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())

    def convert_ok(self, ckpt, spm, out_dir, *extra, as_program=False):
        r = self.convert(ckpt, spm, out_dir, *extra, as_program=as_program)
        check(r.returncode == 0, f"converter failed (exit {r.returncode}): {r.stderr.strip()}")
        return r

    def run_inspect(self, model_dir, *extra):
        cmd = [self.inspect, model_dir, "--threads", "1", *extra]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120)

    def logits(self, model_dir, ids, vocab, *extra):
        out = os.path.join(self.work, "logits.f32")
        r = self.run_inspect(model_dir, "--logits", ",".join(map(str, ids)), "--out", out, *extra)
        check(r.returncode == 0, f"niels-inspect failed (exit {r.returncode}): {r.stderr.strip()}")
        with open(out, "rb") as f:
            data = bytearray(f.read())
        check(len(data) == 4 * len(ids) * vocab,
              f"logits file has {len(data)} bytes, expected {4 * len(ids) * vocab}")
        return torch.frombuffer(data, dtype=torch.float32).reshape(len(ids), vocab)


def check(condition, message):
    if not condition:
        raise AssertionError(message)


def read_safetensors(path):
    """Independent reader: (header dict, header length, data bytes)."""
    with open(path, "rb") as f:
        blob = f.read()
    n = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    return header, n, blob[8 + n:]


# ----------------------------------------------------------------------------------------------
# Cases


class Cases:
    def __init__(self, tools, vocab):
        self.tools = tools
        self.cfg = {"V": vocab, "T": 32, "C": 32, "L": 2, "H": 4, "d_ff": 48, "rope_theta": 10000.0}
        self.model, optimizer, loss = make_model(self.cfg, seed=1234)
        self.ckpt_dict = checkpoint_dict(self.model, optimizer, loss)
        self.spm = os.path.join(tools.work, "spm.model")
        self.ckpt = self.save("ckpt.pt", self.ckpt_dict)
        self.dir = os.path.join(tools.work, "tiny-f32")
        g = torch.Generator().manual_seed(7)
        T, V = self.cfg["T"], vocab
        self.sequences = [torch.randint(0, V, (n,), generator=g).tolist() for n in (1, 7, T)]

    def save(self, name, ckpt):
        path = os.path.join(self.tools.work, name)
        torch.save(ckpt, path)
        return path

    def variant(self, name, edit_state):
        """A copy of the checkpoint whose model_state was edited by edit_state(dict)."""
        ckpt = dict(self.ckpt_dict)
        state = {k: v.clone() for k, v in ckpt["model_state"].items()}
        edit_state(state)
        ckpt["model_state"] = state
        return self.save(name, ckpt)

    def expect_refusal(self, ckpt, out_name, *needles, spm=None):
        out_dir = os.path.join(self.tools.work, out_name)
        r = self.tools.convert(ckpt, spm or self.spm, out_dir)
        check(r.returncode == 1, f"converter exit {r.returncode}, expected 1; stderr: {r.stderr.strip()}")
        for needle in needles:
            check(needle in r.stderr, f"message lacks {needle!r}: {r.stderr.strip()}")
        check(not os.path.exists(os.path.join(out_dir, "model.safetensors")),
              "a refused conversion left model.safetensors behind")
        return r.stderr

    # --- the cases ---

    def convert_writes_model_dir(self):
        r = self.tools.convert_ok(self.ckpt, self.spm, self.dir, as_program=True)
        config = json.load(open(os.path.join(self.dir, "config.json"), encoding="utf-8"))
        for key, value in self.cfg.items():
            check(config.get(key) == value, f"config.json {key}={config.get(key)!r}, expected {value!r}")
        check(config.get("dropout") == 0.1, f"config.json dropout={config.get('dropout')!r}")
        check("_raw" not in config, "config.json kept _raw")
        check(config.get("name") == "tiny-f32", f"config.json name={config.get('name')!r}")
        with open(self.spm, "rb") as a, open(os.path.join(self.dir, "tokenizer.model"), "rb") as b:
            check(a.read() == b.read(), "tokenizer.model is not a byte copy of spm.model")
        header, n, data = read_safetensors(os.path.join(self.dir, "model.safetensors"))
        check(n % 8 == 0, f"header length {n} is not a multiple of 8")
        names = [k for k in header if k != "__metadata__"]
        check(names == sorted(names), "tensor names are not sorted")
        state = self.ckpt_dict["model_state"]
        expected = sorted(k for k in state if k != "lm_head.weight")
        check(names == expected, f"tensors {names} != state_dict minus lm_head {expected}")
        offset = 0
        for name in names:
            entry, t = header[name], state[name].contiguous()
            check(entry["dtype"] == "F32" and entry["shape"] == list(t.shape), f"{name}: {entry}")
            begin, end = entry["data_offsets"]
            check(begin == offset and end == begin + 4 * t.numel(), f"{name}: offsets {begin},{end}")
            stored = torch.frombuffer(bytearray(data[begin:end]), dtype=torch.float32).reshape(t.shape)
            check(torch.equal(stored, t), f"{name}: stored values differ from the state_dict")
            offset = end
        check(offset == len(data), f"data section has {len(data)} bytes, tensors cover {offset}")
        again = self.tools.convert(self.ckpt, self.spm, self.dir)
        check(again.returncode == 1 and "--force" in again.stderr, "overwrite without --force accepted")
        return r.stdout.strip()

    def inspect_summary(self):
        r = self.tools.run_inspect(self.dir)
        check(r.returncode == 0, f"niels-inspect summary failed: {r.stderr.strip()}")
        params = sum(p.numel() for p in self.model.parameters())  # the tied head counts once
        check(f"parameters: {params} " in r.stdout, f"summary lacks 'parameters: {params}':\n{r.stdout}")
        check(f"V={self.cfg['V']} T=32 C=32 L=2 H=4" in r.stdout, f"summary config wrong:\n{r.stdout}")
        return f"{params} parameters"

    def full_forward_matches_pytorch(self):
        worst = 0.0
        for ids in self.sequences:
            ref = reference_logits(self.model, ids)
            check(ref.std().item() > 0.5, f"reference logits too flat (std {ref.std().item()})")
            got = self.tools.logits(self.dir, ids, self.cfg["V"])
            diff = (got - ref).abs().max().item()
            check(diff <= TOLERANCE, f"n={len(ids)}: max abs diff {diff:.3g} > {TOLERANCE}")
            worst = max(worst, diff)
            if len(ids) > 1:  # the comparison resolves a RoPE on halves instead of adjacent pairs
                wrong = (got - reference_logits(self.model, ids, halves=True)).abs().max().item()
                check(wrong > 1e-3, f"n={len(ids)}: halves-RoPE reference also matches ({wrong:.3g})")
        return f"max abs diff {worst:.3g}"

    def prefill_decode_matches_pytorch(self):
        worst = 0.0
        runs = [(ids, ()) for ids in self.sequences] + [(self.sequences[-1], ("--prefill", "1"))]
        for ids, extra in runs:
            ref = reference_logits(self.model, ids)
            got = self.tools.logits(self.dir, ids, self.cfg["V"], "--prefill-decode", *extra)
            diff = (got - ref).abs().max().item()
            check(diff <= TOLERANCE, f"n={len(ids)} {extra}: max abs diff {diff:.3g} > {TOLERANCE}")
            worst = max(worst, diff)
        return f"max abs diff {worst:.3g}"

    def half_dtypes_match_rounded_pytorch(self):
        notes = []
        for dtype, torch_dtype, tag in (("f16", torch.float16, "F16"), ("bf16", torch.bfloat16, "BF16")):
            out_dir = os.path.join(self.tools.work, f"tiny-{dtype}")
            self.tools.convert_ok(self.ckpt, self.spm, out_dir, "--dtype", dtype, "--name", f"tiny {dtype}")
            header, _, _ = read_safetensors(os.path.join(out_dir, "model.safetensors"))
            check(header["tok_emb.weight"]["dtype"] == tag, f"{dtype}: stored as {header['tok_emb.weight']}")
            config = json.load(open(os.path.join(out_dir, "config.json"), encoding="utf-8"))
            check(config["name"] == f"tiny {dtype}", f"--name ignored: {config['name']!r}")
            rounded = rounded_copy(self.model, torch_dtype)
            ids = self.sequences[1]
            diff = (self.tools.logits(out_dir, ids, self.cfg["V"]) - reference_logits(rounded, ids)).abs().max().item()
            check(diff <= TOLERANCE, f"{dtype}: max abs diff {diff:.3g} > {TOLERANCE}")
            notes.append(f"{dtype} {diff:.3g}")
        return ", ".join(notes)

    def refuses_untied_lm_head(self):
        def untie(state):
            state["lm_head.weight"][3, 5] += 1e-3
        self.expect_refusal(self.variant("untied.pt", untie), "untied", "lm_head.weight", "tok_emb.weight")

    def refuses_missing_tensor(self):
        def drop(state):
            del state["blocks.1.mlp.fc_g.bias"]
        self.expect_refusal(self.variant("missing.pt", drop), "missing", "blocks.1.mlp.fc_g.bias")

    def refuses_wrong_shape_and_extra_tensor(self):
        def reshape(state):
            state["blocks.0.attn.proj.weight"] = state["blocks.0.attn.proj.weight"][:, :16].clone()
        self.expect_refusal(self.variant("shape.pt", reshape), "shape", "blocks.0.attn.proj.weight",
                            "[32, 16]", "[32, 32]")

        def add_buffer(state):
            state["blocks.0.attn.rope_cache"] = torch.zeros(4)
        extra = self.variant("extra.pt", add_buffer)
        self.expect_refusal(extra, "extra", "blocks.0.attn.rope_cache")
        self.tools.convert_ok(extra, self.spm, os.path.join(self.tools.work, "extra-dropped"),
                              "--drop", r"blocks\.\d+\.attn\.rope_cache")

    def refuses_tokenizer_without_eot(self):
        with open(self.spm, "rb") as f:
            blob = f.read()
        check(SPECIAL_EOT in blob, "the test tokenizer lacks the eot literal")
        broken = os.path.join(self.tools.work, "no-eot.model")
        with open(broken, "wb") as f:  # same length, so the protobuf stays well-formed (the literal
            # is both a piece and, in trainer_spec, a user_defined_symbol: replace both)
            f.write(blob.replace(SPECIAL_EOT, SPECIAL_EOT.replace(b"eot", b"eoX")))
        self.expect_refusal(self.ckpt, "no-eot", SPECIAL_EOT.decode(), spm=broken)
        # niels-inspect reports the loader's Status for the same broken tokenizer.
        bad_dir = os.path.join(self.tools.work, "bad-dir")
        shutil.copytree(self.dir, bad_dir)
        shutil.copyfile(broken, os.path.join(bad_dir, "tokenizer.model"))
        r = self.tools.run_inspect(bad_dir)
        check(r.returncode == 1 and r.stderr.startswith("niels-inspect: ") and "tokenizer.model" in r.stderr,
              f"niels-inspect on a bad dir: exit {r.returncode}, stderr {r.stderr.strip()!r}")


# ----------------------------------------------------------------------------------------------


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--inspect", required=True, help="niels-inspect binary")
    p.add_argument("--make-tokenizer", required=True, help="niels_make_test_tokenizer binary")
    p.add_argument("--converter", required=True, help="tools/convert/convert_checkpoint.py")
    p.add_argument("--work-dir", required=True, help="scratch directory (recreated)")
    args = p.parse_args()
    torch.set_num_threads(1)

    shutil.rmtree(args.work_dir, ignore_errors=True)
    os.makedirs(args.work_dir)
    spm = os.path.join(args.work_dir, "spm.model")
    r = subprocess.run([args.make_tokenizer, spm], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        print(f"converter_roundtrip: cannot make the test tokenizer: {r.stderr.strip()}")
        return 1
    cases = Cases(Tools(args), vocab=int(r.stdout.strip()))

    names = ["convert_writes_model_dir", "inspect_summary", "full_forward_matches_pytorch",
             "prefill_decode_matches_pytorch", "half_dtypes_match_rounded_pytorch",
             "refuses_untied_lm_head", "refuses_missing_tensor", "refuses_wrong_shape_and_extra_tensor",
             "refuses_tokenizer_without_eot"]
    passed = failed = 0
    for name in names:
        try:
            note = getattr(cases, name)()
            print(f"[  OK  ] {name}" + (f": {note}" if note else ""))
            passed += 1
        except AssertionError as e:
            print(f"[ FAIL ] {name}: {e}")
            failed += 1
        except Exception:  # pylint: disable=broad-except
            print(f"[ FAIL ] {name}: unexpected error\n{traceback.format_exc()}")
            failed += 1
    print(f"converter_roundtrip: {passed} passed, {failed} failed")
    if failed == 0:
        shutil.rmtree(args.work_dir, ignore_errors=True)
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
