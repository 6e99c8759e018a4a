#!/usr/bin/python3
"""nielsd's and llama.cpp's structured output side by side: decode tokens/s with and without a JSON
Schema on the same model (a nielsd model directory and its GGUF export, e.g. the base shape from
`nielsd-bench --preset base --write-model-dir DIR` and `niels-export DIR --format gguf OUT.gguf`).

nielsd runs as a process (--threads T, --ephemeral) and is driven through the Python client (Chat,
one session per run, stats.decode_tokens_per_s); llama.cpp through node-llama-cpp 3.21.1
(bench/llama_grammar_bench.mjs). Both: temperature 1, top-k and top-p off, a seed per run, free and
constrained runs alternating, at most MAX tokens. Decode tokens/s = tokens after the first / time
after the first, summed over the runs. Needs scripts/install_references.sh (node-llama-cpp) and the
nielsd_client package (PYTHONPATH=build/client/python).

    bench/constraint_compare.py --nielsd build/daemon/nielsd --model DIR --gguf OUT.gguf \\
        [--runs 8] [--max-new-tokens 128] [--threads 1]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import nielsd_client

SCHEMA = {"type": "object", "properties": {"answer": {"type": "string", "maxLength": 60},
                                           "sure": {"type": "boolean"},
                                           "count": {"type": "integer", "minimum": 0, "maximum": 99}},
          "required": ["answer", "sure", "count"], "additionalProperties": False}


def nielsd_rates(args, tmp):
    sock = os.path.join(tmp, "nielsd.sock")
    daemon = subprocess.Popen([args.nielsd, "--model", args.model, "--socket", sock, "--ephemeral",
                               "--threads", str(args.threads), "--log-level", "error"])
    try:
        for _ in range(200):
            if os.path.exists(sock):
                break
            time.sleep(0.05)
        totals = {"free": [0, 0.0, 0], "schema": [0, 0.0, 0]}
        with nielsd_client.Client(sock) as client:
            for run in range(args.runs):
                for mode in ("free", "schema"):
                    sid = client.create_session().session_id
                    constraint = nielsd_client.json_schema(SCHEMA) if mode == "schema" else None
                    reply = client.chat(sid, "is nielsd a daemon? answer in json", constraint=constraint,
                                        max_new_tokens=args.max_new_tokens, temperature=1.0, top_k=0, seed=100 + run)
                    client.delete_session(sid)
                    n = reply.stats.generated_tokens
                    if n >= 2 and reply.stats.decode_tokens_per_s > 0:
                        totals[mode][0] += n - 1
                        totals[mode][1] += (n - 1) / reply.stats.decode_tokens_per_s
                        totals[mode][2] += 1
        return [{"engine": "nielsd", "mode": m, "runs": t[2], "tokens": t[0], "decode_tok_s": t[0] / t[1]}
                for m, t in totals.items()]
    finally:
        daemon.terminate()
        daemon.wait()


def llama_rates(args, tmp):
    schema_path = os.path.join(tmp, "schema.json")
    with open(schema_path, "w") as f:
        json.dump(SCHEMA, f)
    here = os.path.dirname(os.path.abspath(__file__))
    out = subprocess.run(["node", os.path.join(here, "llama_grammar_bench.mjs"), args.node_modules, args.gguf,
                          schema_path, str(args.runs), str(args.max_new_tokens), str(args.threads)],
                         check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--nielsd", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--gguf", required=True)
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--node-modules", default=os.path.join(
        os.environ.get("NIELS_REFERENCE_DIR", os.path.expanduser("~/.cache/nielsd-reference")), "npm/node_modules"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = nielsd_rates(args, tmp) + llama_rates(args, tmp)
    print("%-10s %-7s %5s %7s %14s" % ("engine", "mode", "runs", "tokens", "decode tok/s"))
    for r in rows:
        print("%-10s %-7s %5d %7d %14.1f" % (r["engine"], r["mode"], r["runs"], r["tokens"], r["decode_tok_s"]))
    for engine in ("nielsd", "llama.cpp"):
        free = next(r for r in rows if r["engine"] == engine and r["mode"] == "free")["decode_tok_s"]
        schema = next(r for r in rows if r["engine"] == engine and r["mode"] == "schema")["decode_tok_s"]
        print("%s: constrained / free = %.2f" % (engine, schema / free))
    return 0


if __name__ == "__main__":
    sys.exit(main())
