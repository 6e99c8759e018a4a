#!/usr/bin/python3
"""Weight statistics of a live nielsd (through the Python client, nielsd_client.Client.weight_stats)
and of niels-inspect --weight-stats, against numpy on the model file read independently: a niels
model directory's or a Hugging Face directory's model.safetensors, or a GGUF file (read with
tests/tools/gguf_read.py, q8_0 and q4_0 dequantized here from ggml's block layout). With
--served-dtype the daemon runs with --dtype: the matrices are rounded here as it rounds them (bf16:
to nearest even). Run by tests/integration/weight_stats_test.cc.

    weight_stats_reference.py --socket PATH --file MODEL_FILE --format niels|hf|gguf \
        --inspect NIELS_INSPECT --model MODEL_PATH --tools-dir tests/tools [--served-dtype bf16]

Tolerances: every statistic within 1e-5 x the tensor's RMS (norms: x sqrt(n) and x n), counts,
percentages and histograms exact (up to niels-inspect's 9 printed digits). Exit status 0 when everything matches; 1 with a line per mismatch.
"""

import argparse
import json
import struct
import subprocess
import sys

import numpy as np

import nielsd_client

COMPACT = ("mean", "std", "min", "max", "l2_norm")
FULL = ("median", "abs_mean", "zeros_percent", "near_zero_percent", "l1_norm", "p5", "p25", "p50", "p75", "p95")
FAILURES = []


def check(condition, message):
    if not condition:
        FAILURES.append(message)


# ---------------------------------------------------------------- the model file, independently

def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + n])
    base = 8 + n
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = data[base + begin:base + end]
        if info["dtype"] == "BF16":  # the upper half of a float32
            values = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            values = np.frombuffer(raw, dtype={"F32": "<f4", "F16": "<f2"}[info["dtype"]])
        tensors[name] = (info["dtype"].lower(), list(info["shape"]), values.astype(np.float64))
    return tensors


def round_to_bf16(x):
    """float32 -> bf16 -> float32, round to nearest, ties to even (finite values)."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return rounded.astype(np.uint32).view(np.float32).astype(np.float64)


def served_as(tensors, dtype):
    """The values as `nielsd --dtype dtype` serves them: matrices converted, 1-D tensors f32."""
    out = {}
    for name, (stored, shape, x) in tensors.items():
        if len(shape) == 2 and dtype == "bf16":
            out[name] = ("bf16", shape, round_to_bf16(x))
        elif len(shape) == 2 and dtype == "f32":
            out[name] = ("f32", shape, x)
        else:
            out[name] = ("f32", shape, x) if len(shape) == 1 else (stored, shape, x)
    return out


def dequantize(ggml_type, raw):
    if ggml_type == 0:  # f32
        return np.frombuffer(raw, dtype="<f4"), "f32"
    if ggml_type == 1:  # f16
        return np.frombuffer(raw, dtype="<f2").astype(np.float32), "f16"
    if ggml_type == 8:  # q8_0: per 32 values an f16 scale d, then 32 int8 q; x = d * q
        blocks = np.frombuffer(raw, dtype=np.dtype([("d", "<f2"), ("q", "i1", 32)]))
        return (blocks["d"].astype(np.float32)[:, None] * blocks["q"].astype(np.float32)).reshape(-1), "q8_0"
    if ggml_type == 2:  # q4_0: an f16 scale d, then 16 bytes: value j in the low nibble of byte j,
        # value j + 16 in its high nibble; x = d * (nibble - 8)
        blocks = np.frombuffer(raw, dtype=np.dtype([("d", "<f2"), ("q", "u1", 16)]))
        nibbles = np.concatenate([blocks["q"] & 0x0F, blocks["q"] >> 4], axis=1).astype(np.float32) - 8
        return (blocks["d"].astype(np.float32)[:, None] * nibbles).reshape(-1), "q4_0"
    raise ValueError("ggml type %d is not read by this test" % ggml_type)


def read_gguf_tensors(path, tools_dir):
    sys.path.insert(0, tools_dir)
    from gguf_read import read_gguf  # noqa: E402  (standard library only, written from the spec)
    _, tensors = read_gguf(path)
    out = {}
    for name, (ggml_type, dims, raw) in tensors.items():
        values, dtype = dequantize(ggml_type, raw)
        out[name] = (dtype, list(reversed(dims)), values.astype(np.float64))  # ne0 (columns) first in GGUF
    return out


# niels_gpt's checkpoint names by the Hugging Face names nielsd reports (written out here, apart
# from nielsd's own table).
def niels_file_name(hf_name):
    top = {"model.embed_tokens.weight": "tok_emb.weight", "model.norm.weight": "ln_f.weight"}
    if hf_name in top:
        return top[hf_name]
    if hf_name.startswith("blocks."):  # the fused qkv has no Hugging Face name: its own
        return hf_name
    parts = hf_name.split(".")
    layer, rest = parts[2], ".".join(parts[3:])
    block = {"input_layernorm.weight": "ln1.weight", "self_attn.o_proj.weight": "attn.proj.weight",
             "post_attention_layernorm.weight": "ln2.weight",
             "mlp.gate_proj.weight": "mlp.fc_g.weight", "mlp.gate_proj.bias": "mlp.fc_g.bias",
             "mlp.up_proj.weight": "mlp.fc_a.weight", "mlp.up_proj.bias": "mlp.fc_a.bias",
             "mlp.down_proj.weight": "mlp.fc_out.weight", "mlp.down_proj.bias": "mlp.fc_out.bias"}
    return "blocks.%s.%s" % (layer, block[rest])


# ---------------------------------------------------------------- numpy's statistics

def reference(x):
    lo, hi = x.min(), x.max()
    counts, edges = np.histogram(x, bins=20, range=(lo, hi))
    p = np.percentile(x, [5, 25, 50, 75, 95])
    return {
        "mean": x.mean(), "std": x.std(), "min": lo, "max": hi, "l2_norm": np.sqrt(np.sum(x * x)),
        "median": np.median(x), "abs_mean": np.abs(x).mean(), "zeros_percent": 100.0 * np.mean(x == 0),
        "near_zero_percent": 100.0 * np.mean(np.abs(x) < 1e-6), "l1_norm": np.abs(x).sum(),
        "p5": p[0], "p25": p[1], "p50": p[2], "p75": p[3], "p95": p[4],
        "histogram": {"low": edges[0], "high": edges[-1], "counts": [int(c) for c in counts]},
    }


def tolerance(key, x, want):
    """1e-5 x RMS (norms: x sqrt(n), x n); percentages a count's exactness, with room for the 9
    significant digits niels-inspect prints."""
    if key.endswith("_percent"):
        return 1e-9 + 1e-8 * abs(want)
    rms = float(np.sqrt(np.mean(x * x)))
    scale = {"l2_norm": np.sqrt(x.size), "l1_norm": x.size}.get(key, 1.0)
    return 1e-5 * rms * scale + 1e-30


def compare(where, got, x, full):
    want = reference(x)
    for key in COMPACT + (FULL if full else ()):
        check(key in got, "%s: no %s" % (where, key))
        if key in got:
            check(abs(got[key] - want[key]) <= tolerance(key, x, want[key]),
                  "%s: %s = %r, numpy %r" % (where, key, got[key], want[key]))
    if full:
        h = got.get("histogram")
        check(h is not None and h["counts"] == want["histogram"]["counts"],
              "%s: histogram %r, numpy %r" % (where, h and h["counts"], want["histogram"]["counts"]))
        if h is not None:
            for edge in ("low", "high"):
                check(abs(h[edge] - want["histogram"][edge]) <= tolerance("min", x, 0),
                      "%s: histogram %s %r, numpy %r" % (where, edge, h[edge], want["histogram"][edge]))
    else:
        check("median" not in got and "histogram" not in got, "%s: compact has full statistics" % where)


# ---------------------------------------------------------------- the daemon, through the client

def check_daemon(client, tensors, file_name):
    compact = client.weight_stats("model.layers.*.mlp.down_proj.weight", compact=True)
    layers = sum(1 for name in tensors if file_name_is_down(name))
    check(len(compact) == layers, "down_proj: %d tensors, the file has %d" % (len(compact), layers))
    check([t["hf_name"] for t in compact] == ["model.layers.%d.mlp.down_proj.weight" % i for i in range(layers)],
          "down_proj names: %r" % [t["hf_name"] for t in compact])
    for t in compact:
        dtype, shape, x = tensors[file_name(t)]
        compare(t["hf_name"] + " (compact)", t, x, full=False)
    everything = client.weight_stats(["*"], compact=False)
    check(len(everything) == len(tensors), "*: %d tensors, the file has %d" % (len(everything), len(tensors)))
    for t in everything:
        name = file_name(t)
        check(name in tensors, "%s: not in the file" % name)
        if name not in tensors:
            continue
        dtype, shape, x = tensors[name]
        check(t["shape"] == shape, "%s: shape %r, file %r" % (name, t["shape"], shape))
        check(t["parameters"] == x.size, "%s: %d parameters, file %d" % (name, t["parameters"], x.size))
        check(t["dtype"] == dtype, "%s: dtype %s, file %s" % (name, t["dtype"], dtype))
        check(t["nonfinite"] == 0, "%s: %d nonfinite" % (name, t["nonfinite"]))
        compare(name, t, x, full=True)
    # Both namings select the same tensor; an unknown name is refused naming the field.
    by_gguf = client.weight_stats("blk.0.ffn_gate.weight", compact=True)
    by_hf = client.weight_stats("model.layers.0.mlp.gate_proj.weight", compact=True)
    check(by_gguf == by_hf and len(by_hf) == 1, "blk.0.ffn_gate.weight and its HF name differ: %r %r" % (by_gguf, by_hf))
    try:
        client.weight_stats(["model.layers.0.*", "no.such.tensor"])
        check(False, "an unknown name was not refused")
    except nielsd_client.NielsdError as e:
        check(e.code == "INVALID_ARGUMENT" and "weight_stats.names[1]" in e.message, "refusal: %s" % e)


def file_name_is_down(name):
    return name.endswith(("mlp.fc_out.weight", "ffn_down.weight", "mlp.down_proj.weight"))


# ---------------------------------------------------------------- niels-inspect

def parse_inspect(text):
    """niels-inspect --weight-stats --full output -> [{hf_name, gguf_name, ..., histogram}]."""
    out = []
    for line in text.splitlines():
        if not line.startswith("  "):
            head, rest = line.split(" (", 1)
            out.append({"hf_name": head, "gguf_name": rest.split(")", 1)[0]})
        elif line.startswith("  histogram ["):
            edges, counts = line.strip()[len("histogram ["):].split("]:")
            low, high = (float(v) for v in edges.split(", "))
            out[-1]["histogram"] = {"low": low, "high": high, "counts": [int(c) for c in counts.split()]}
        else:
            for item in line.split():
                key, value = item.split("=")
                out[-1][key] = float(value)
    return out


def check_inspect(inspect, model, tensors, file_name, served_dtype):
    dtype = ["--dtype", served_dtype] if served_dtype else []
    result = subprocess.run([inspect, model, "--weight-stats", "model.layers.0.*", "--weight-stats", "*embd*",
                             "--full"] + dtype, capture_output=True, text=True)
    check(result.returncode == 0, "niels-inspect exited %d: %s" % (result.returncode, result.stderr))
    printed = parse_inspect(result.stdout)
    check(len(printed) >= 2, "niels-inspect printed %d tensors:\n%s" % (len(printed), result.stdout))
    check(printed and printed[0]["hf_name"] == "model.embed_tokens.weight", "niels-inspect's first: %r" % printed[:1])
    for t in printed:
        x = tensors[file_name(t)][2]
        compare("niels-inspect " + t["hf_name"], t, x, full=True)
    bad = subprocess.run([inspect, model, "--weight-stats", "nothing.here"], capture_output=True, text=True)
    check(bad.returncode == 1 and "--weight-stats[0]" in bad.stderr, "niels-inspect on a bad name: %r" % bad.stderr)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--socket", required=True)
    parser.add_argument("--file", required=True)
    parser.add_argument("--format", choices=("niels", "hf", "gguf"), required=True)
    parser.add_argument("--inspect", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--tools-dir", required=True)
    parser.add_argument("--served-dtype", choices=("f32", "bf16"))
    args = parser.parse_args()
    if args.format == "niels":
        tensors = read_safetensors(args.file)
        def file_name(t):
            return niels_file_name(t["hf_name"])
    elif args.format == "hf":
        tensors = read_safetensors(args.file)
        def file_name(t):
            return t["hf_name"]
    else:
        tensors = read_gguf_tensors(args.file, args.tools_dir)
        def file_name(t):
            return t["gguf_name"]
    if args.served_dtype:
        tensors = served_as(tensors, args.served_dtype)
    client = nielsd_client.Client(args.socket)
    try:
        check_daemon(client, tensors, file_name)
    finally:
        client.close()
    check_inspect(args.inspect, args.model, tensors, file_name, args.served_dtype)
    for failure in FAILURES:
        print("FAIL " + failure)
    print("checked %d tensors of %s: %d failures" % (len(tensors), args.file, len(FAILURES)))
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
