#!/usr/bin/python3
"""export_quant ctest: niels-export's --quant and its Hugging Face input.

1. A random-weight niels_gpt directory (the demo model's tokenizer, C 256, d_ff 512) and a
   random-weight Llama 3.2 Hugging Face directory (make_family_model.py: the real tokenizer, hidden
   256, ffn 512, head_dim 64, f16), each exported with --dtype f16 and with --quant q8_0 and q4_k_m:
   - each quantized file equals niels-quantize applied to the f16 export, byte for byte;
   - llama.cpp (node-llama-cpp 3.21.1, quantize_compare.mjs) loads every file, and nielsd's
     teacher-forced logits on each file (niels_gguf_logits) are within quantize_reference's
     tolerances of llama.cpp's, and closest to llama.cpp's on the same file (its compare_logits).
2. niels-export of Hugging Face directories against make_family_model.py's GGUF (what
   convert_hf_to_gguf.py writes; the file family_llamacpp holds nielsd's HF loader and llama.cpp to):
   llama (rope_freqs, q/k permuted), qwen2 (biases, untied) and qwen3 (q/k norms), f16; and the llama
   directory in 3 shards. Every key and value equal but general.name and the general.sampling.* keys
   make_family_model leaves out (checked against generation_config.json instead); every tensor's
   type, dims and bytes equal, in the same order (rope_freqs.weight: float32 arithmetic of convert's
   formula, within 4 ulp of make_family_model's float64 one).
3. Bad inputs: exit 1, one "niels-export: error:" line naming the problem, OUT not written and no
   temporary file left: a missing tensor (HF and niels), an unsupported architecture, an unknown
   --quant, --format hf-llama of an HF directory, a missing quantizer; niels-quantize given a directory.

    export_quant_test.py --exporter niels_export.py --quantize BIN --logits BIN --work-dir DIR [--npm DIR]

Needs node and the packages of scripts/install_references.sh (fails, naming it, when missing).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import make_family_model as mfm  # noqa: E402
import quant_accuracy as qa  # noqa: E402
import quantize_reference_test as qr  # noqa: E402
from gguf_read import read_gguf  # noqa: E402

TYPES = ("q8_0", "q4_k_m")
NIELS = {"V": 1024, "T": 256, "C": 256, "L": 2, "H": 4, "d_ff": 512, "rope_theta": 10000.0, "name": "random-256"}
HF_LLAMA = ["llama", "--hidden", "256", "--layers", "2", "--ffn", "512", "--head-dim", "64"]
# quantize_reference's prompts: ids drawn from these ranges (the niels vocabulary's first 4 are special).
qr.MODELS["niels-random"] = (None, (4, 1024))
qr.MODELS["hf-llama"] = (None, (0, 128000))


def run(cmd):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=600)


def export(args, src, out, *extra):
    p = run([sys.executable, args.exporter, src, "--format", "gguf", out, "--dtype", "f16", "--force", *extra])
    if p.returncode != 0:
        raise RuntimeError(f"niels-export {src} {' '.join(extra)}: {p.stderr.strip()}")
    return out


def make_niels(work):
    d = os.path.join(work, "niels-random")
    os.makedirs(d, exist_ok=True)
    shutil.copyfile(os.path.join(REPO, "models", "niels-demo", "tokenizer.model"), os.path.join(d, "tokenizer.model"))
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(NIELS, f)
    qa.es.write_safetensors(os.path.join(d, "model.safetensors"), qa.base_tensors(NIELS, 27))
    return d


def quantized_files(args, name, src, work, failures):
    """The f16 export and each --quant export; each --quant file == niels-quantize(f16 export)."""
    f16 = export(args, src, os.path.join(work, f"{name}-f16.gguf"))
    files = [("f16", f16, True)]
    for t in TYPES:
        ours = export(args, src, os.path.join(work, f"{name}-{t}.gguf"), "--quant", t, "--quantizer", args.quantize,
                      "--threads", "1")
        ref = os.path.join(work, f"{name}-{t}-ref.gguf")
        p = run([args.quantize, f16, ref, "--type", t, "--threads", "1", "--quiet"])
        failures.check(p.returncode == 0, f"[{name} {t}] niels-quantize: {p.stderr.strip()}")
        with open(ours, "rb") as a, open(ref, "rb") as b:
            same = a.read() == b.read()
        failures.check(same, f"[{name} {t}] --quant differs from niels-quantize of the f16 export")
        types = sorted({v[0] for v in read_gguf(ours)[1].values()})
        print(f"{name} {t}: {os.path.getsize(ours)} bytes, equal to niels-quantize(f16 export) {same}, "
              f"ggml types {types}", flush=True)
        files.append((t, ours, True))
        os.unlink(ref)
    return files


def check_against_llamacpp(args, failures, summary):
    for name in ("niels-random", "hf-llama"):
        work = os.path.join(args.work_dir, name + "-work")
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
        if name == "niels-random":
            src = make_niels(work)
        else:
            src = os.path.join(work, "hf")
            mfm.main([HF_LLAMA[0], src, "--dtype", "f16", "--npm", args.npm, *HF_LLAMA[1:]])
        files = quantized_files(args, name, src, work, failures)
        qr.compare_logits(args, name, name, files, work, failures, summary)
        shutil.rmtree(work, ignore_errors=True)


def compare_with_convert(ref_path, ours_path, hf_dir, label, failures):
    """ours against make_family_model's GGUF: keys, values, tensors (see the docstring)."""
    ref_kv, ref_t = read_gguf(ref_path)
    our_kv, our_t = read_gguf(ours_path)
    with open(os.path.join(hf_dir, "generation_config.json")) as f:
        gen = json.load(f)
    sampling = {"general.sampling.top_k": gen.get("top_k"), "general.sampling.top_p": gen.get("top_p"),
                "general.sampling.temp": gen.get("temperature"),
                "general.sampling.penalty_repeat": gen.get("repetition_penalty")}
    for key, value in sampling.items():
        got = our_kv.get(key, (None, None))[1]
        ok = got == value if value is None or isinstance(value, int) else abs(got - value) < 1e-6 * abs(value)
        failures.check(ok, f"[{label}] {key} = {got}, generation_config.json says {value}")
    skip = {"general.name"} | set(sampling)
    ref_keys = [k for k in ref_kv if k not in skip]
    our_keys = [k for k in our_kv if k not in skip]
    failures.check(ref_keys == our_keys, f"[{label}] keys differ: {set(ref_keys) ^ set(our_keys)} or their order")
    differ = [k for k in ref_keys if k in our_kv and ref_kv[k] != our_kv[k]]
    failures.check(not differ, f"[{label}] values differ: {differ[:5]}")
    failures.check(list(ref_t) == list(our_t), f"[{label}] tensor names or order differ")
    bad = []
    for name, (typ, dims, data) in ref_t.items():
        ours = our_t.get(name)
        if name == "rope_freqs.weight" and ours and ours[:2] == (typ, dims):
            a, b = np.frombuffer(data, "<f4"), np.frombuffer(ours[2], "<f4")
            if np.max(np.abs(a - b) / np.abs(a)) > 4 * 2.0 ** -23:
                bad.append(name)
        elif ours != (typ, dims, data):
            bad.append(name)
    failures.check(not bad, f"[{label}] tensors differ: {bad[:5]}")
    print(f"{label}: {len(ref_keys)} keys and {len(ref_t)} tensors as make_family_model's GGUF "
          f"({'equal' if not (bad or differ) else 'DIFFERENT'})", flush=True)


def check_convert(args, failures):
    work = os.path.join(args.work_dir, "convert")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    for arch in ("llama", "qwen2", "qwen3"):
        hf, ref = os.path.join(work, f"hf-{arch}"), os.path.join(work, f"ref-{arch}.gguf")
        mfm.main([arch, hf, "--dtype", "f16", "--gguf", ref, "--npm", args.npm])
        ours = export(args, hf, os.path.join(work, f"ours-{arch}.gguf"))
        compare_with_convert(ref, ours, hf, arch, failures)
        if arch == "llama":
            sharded = os.path.join(work, "hf-llama-3shards")
            mfm.main([arch, sharded, "--dtype", "f16", "--shards", "3", "--npm", args.npm])
            ours3 = export(args, sharded, os.path.join(work, "ours-llama-3shards.gguf"))
            a_kv, a_t = read_gguf(ours)
            b_kv, b_t = read_gguf(ours3)
            a_kv.pop("general.name")
            b_kv.pop("general.name")
            same = a_kv == b_kv and a_t == b_t  # dict equality: every tensor, in any order
            failures.check(same, "[llama 3 shards] keys or tensors differ from the one-file directory's")
            print(f"llama in 3 shards: keys and tensors equal to the one-file export: {same}", flush=True)
        os.unlink(ref)
    return os.path.join(work, "hf-llama")


def rewrite_safetensors(path, drop):
    """path without tensor `drop` (the header rewritten; the data block as it was)."""
    with open(path, "rb") as f:
        data = f.read()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    del header[drop]
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + data[8 + n:])


def copy_dir(src, dst):
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    return dst


def check_errors(args, hf_dir, failures):
    work = os.path.join(args.work_dir, "errors")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    niels_dir = make_niels(os.path.join(work, "src"))
    hf_missing = copy_dir(hf_dir, os.path.join(work, "hf-missing"))
    rewrite_safetensors(os.path.join(hf_missing, "model.safetensors"), "model.layers.1.mlp.up_proj.weight")
    niels_missing = copy_dir(niels_dir, os.path.join(work, "niels-missing"))
    rewrite_safetensors(os.path.join(niels_missing, "model.safetensors"), "blocks.1.mlp.fc_a.weight")
    gemma = copy_dir(hf_dir, os.path.join(work, "hf-gemma"))
    with open(os.path.join(gemma, "config.json")) as f:
        config = json.load(f)
    config["architectures"] = ["GemmaForCausalLM"]
    with open(os.path.join(gemma, "config.json"), "w") as f:
        json.dump(config, f)
    out_dir = os.path.join(work, "out")
    os.makedirs(out_dir)
    out = os.path.join(out_dir, "model.gguf")
    quant = ["--quant", "q8_0", "--quantizer", args.quantize]
    cases = [
        ("HF missing tensor", [hf_missing, "--format", "gguf", out, *quant], "missing tensor 'model.layers.1.mlp.up_proj.weight'"),
        ("niels missing tensor", [niels_missing, "--format", "gguf", out, *quant], "missing tensor 'blocks.1.mlp.fc_a.weight'"),
        ("architecture", [gemma, "--format", "gguf", out, *quant], "GemmaForCausalLM"),
        ("unknown --quant", [hf_dir, "--format", "gguf", out, "--quant", "q3_k_m"], "invalid choice: 'q3_k_m'"),
        ("HF to hf-llama", [hf_dir, "--format", "hf-llama", os.path.join(out_dir, "hf")], "exports to --format gguf only"),
        ("no quantizer", [hf_dir, "--format", "gguf", out, "--quant", "q8_0", "--quantizer", os.path.join(work, "nope")],
         "not an executable file"),
    ]
    for label, argv, expect in cases:
        p = run([sys.executable, args.exporter, *argv])
        lines = p.stderr.splitlines()
        ok = (p.returncode == 1 and len(lines) == 1 and lines[0].startswith("niels-export: error: ")
              and expect in lines[0] and os.listdir(out_dir) == [])
        failures.check(ok, f"[error: {label}] exit {p.returncode}, stderr {p.stderr!r}, left {os.listdir(out_dir)}")
        print(f"error {label}: exit {p.returncode}: {lines[0] if lines else ''}", flush=True)
    p = run([args.quantize, hf_dir, out, "--type", "q8_0"])
    lines = p.stderr.splitlines()
    failures.check(p.returncode == 1 and len(lines) == 1 and "niels-export" in lines[0] and os.listdir(out_dir) == [],
                   f"[niels-quantize DIR] exit {p.returncode}, stderr {p.stderr!r}")
    print(f"niels-quantize DIR: exit {p.returncode}: {lines[0] if lines else ''}", flush=True)
    shutil.rmtree(work, ignore_errors=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--exporter", required=True)
    p.add_argument("--quantize", required=True)
    p.add_argument("--logits", required=True)
    p.add_argument("--work-dir", required=True)
    p.add_argument("--npm", default=mfm.default_npm())
    args = p.parse_args()
    if not os.path.exists(os.path.join(args.npm, "node-llama-cpp", "package.json")):
        print(f"{args.npm} lacks node-llama-cpp: run scripts/install_references.sh")
        return 1
    os.makedirs(args.work_dir, exist_ok=True)
    failures, summary = qr.Failures(), []
    hf_llama = check_convert(args, failures)
    check_errors(args, hf_llama, failures)
    check_against_llamacpp(args, failures, summary)
    shutil.rmtree(os.path.join(args.work_dir, "convert"), ignore_errors=True)
    print("\n".join(["summary:"] + summary))
    print("CPU seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in sorted(qr.CPU.items())) + f"; total {qr.cpu_now():.1f}")
    if failures.items:
        print(f"{len(failures.items)} check(s) failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
