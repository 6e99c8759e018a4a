#!/usr/bin/python3
"""Draws the README's benchmark figures from the benchmarks' own JSON lines.

Reads every JSON line of the given files (other lines are skipped) and writes, into --out:
  ttft_per_turn.png   nielsd-chat-bench: time to first token per chat turn, for the cached path,
                      the uncached path and the original CLI's re-prefill of the whole history
  throughput.png      nielsd-bench: prefill and decode tokens/s (cached, batch, uncached) and the
                      memory-bandwidth bound of decode
  load_scaling.png    nielsd-load-bench: aggregate tokens/s and time to first token (p50, p99) vs
                      the number of clients, and a short chat's latency idle vs under load
                      (only when the input has such lines)
Each figure names the CPU given with --cpu (default: lscpu's model name) and the input file.

Generate the figures (docs/benchmarks/ keeps the JSON and the CPU they came from; commit all):
    mkdir -p docs/benchmarks
    build/bench/nielsd-bench --preset personal --threads 2 --json > docs/benchmarks/model_bench.jsonl
    build/bench/nielsd-chat-bench --preset personal --threads 2 --json > docs/benchmarks/chat_bench.jsonl
    build/bench/nielsd-load-bench --json > docs/benchmarks/load_bench.jsonl
    lscpu > docs/benchmarks/lscpu.txt
    scripts/plot_benchmarks.py docs/benchmarks/*.jsonl --cpu-from docs/benchmarks/lscpu.txt --out docs
Needs Debian's python3-matplotlib.
"""

import argparse
import json
import os
import subprocess
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read_lines(paths):
    records = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if not line.startswith("{"):
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue
                record["_file"] = os.path.basename(path)
                records.append(record)
    return records


def cpu_name(lscpu_text):
    """'AMD EPYC (family 25 model 1), 2 CPUs, KVM guest' from lscpu's output."""
    fields = {}
    for line in lscpu_text.splitlines():
        if ":" in line:
            key, value = line.split(":", 1)
            fields.setdefault(key.strip().lower(), value.strip())
    name = fields.get("model name", "unknown CPU")
    if "cpu family" in fields and "model" in fields:
        name += " (family %s model %s)" % (fields["cpu family"], fields["model"])
    if "cpu(s)" in fields:
        name += ", %s CPUs" % fields["cpu(s)"]
    if "hypervisor vendor" in fields:
        name += ", %s guest" % fields["hypervisor vendor"]
    return name


def caption(fig, cpu, sources):
    fig.text(0.01, 0.01, "measured on %s; from %s" % (cpu, ", ".join(sorted(sources))),
             fontsize=7, color="0.4")


def plot_ttft(records, cpu, out):
    chat = [r for r in records if r.get("metric") == "ttft_ms" and "turn" in r and "path" in r]
    if not chat:
        return None
    series = defaultdict(dict)
    for r in chat:
        series[r["path"]][int(r["turn"])] = float(r["value"])
    labels = {"cached": "cached (nielsd default)", "uncached": "uncached (--no-kv-cache)",
              "reprefill": "re-prefill every turn (original CLI)"}
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for path, style in (("reprefill", "s-"), ("uncached", "^-"), ("cached", "o-")):
        if path in series:
            turns = sorted(series[path])
            ax.plot(turns, [series[path][t] for t in turns], style, label=labels[path])
    ax.set_xlabel("chat turn")
    ax.set_ylabel("time to first token (ms, median)")
    ax.set_xticks(sorted({t for s in series.values() for t in s}))
    ax.set_ylim(bottom=0)
    preset = chat[0].get("preset", "")
    ax.set_title("Time to first token per turn (%s model)" % preset)
    ax.grid(alpha=0.3)
    ax.legend()
    caption(fig, cpu, {r["_file"] for r in chat})
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    path = os.path.join(out, "ttft_per_turn.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_throughput(records, cpu, out):
    model = {r["metric"]: r for r in records if "metric" in r and "turn" not in r}
    bars = [("prefill", "prefill_tok_s"), ("decode\n(cached)", "decode_tok_s"),
            ("decode, batch\n(all sessions)", "batched_decode_tok_s"),
            ("decode\n(uncached)", "uncached_decode_tok_s")]
    bars = [(label, model[key]) for label, key in bars if key in model]
    if not bars:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.2))
    values = [float(r["value"]) for _, r in bars]
    colors = ["#4c72b0", "#55a868", "#8172b2", "#c44e52"][:len(bars)]
    drawn = ax.bar([label for label, _ in bars], values, color=colors)
    for rect, value in zip(drawn, values):
        ax.annotate("%.0f" % value, (rect.get_x() + rect.get_width() / 2, value), ha="center", va="bottom",
                    fontsize=9)
    if "decode_bound_tok_s" in model:
        bound = float(model["decode_bound_tok_s"]["value"])
        ax.axhline(bound, color="0.3", linestyle="--", linewidth=1)
        ax.annotate("memory-bandwidth bound of one decode stream: %.0f tokens/s" % bound, (0.99, bound),
                    xycoords=("axes fraction", "data"), ha="right", va="bottom", fontsize=8, color="0.3",
                    bbox=dict(facecolor="white", edgecolor="none", alpha=0.85, pad=1))
    ax.set_ylabel("tokens/s (median)")
    ax.set_title("Prefill and decode throughput (%s model)" % bars[0][1].get("preset", ""))
    ax.grid(axis="y", alpha=0.3)
    caption(fig, cpu, {r["_file"] for _, r in bars})
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    path = os.path.join(out, "throughput.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_load(records, cpu, out):
    # With --rounds the bench prints every run and then the medians per N: plot the medians.
    medians = [r for r in records if r.get("bench") == "load_median"]
    load = sorted(medians or (r for r in records if r.get("bench") == "load"), key=lambda r: r["clients"])
    short = [r for r in records if r.get("bench") == "short_chat"]
    if not load:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.2))
    clients = [int(r["clients"]) for r in load]
    ax.plot(clients, [float(r["aggregate_tok_s"]) for r in load], "o-", color="#4c72b0",
            label="aggregate tokens/s")
    ax.set_xlabel("concurrent clients")
    ax.set_ylabel("aggregate decode tokens/s", color="#4c72b0")
    ax.set_xticks(clients)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax2 = ax.twinx()
    ax2.plot(clients, [float(r["ttft_p50_ms"]) for r in load], "s--", color="#c44e52", label="TTFT p50")
    ax2.plot(clients, [float(r["ttft_p99_ms"]) for r in load], "^:", color="#c44e52", label="TTFT p99")
    ax2.set_ylabel("time to first token (ms)", color="#c44e52")
    ax2.set_ylim(bottom=0)
    handles = ax.get_legend_handles_labels()
    handles2 = ax2.get_legend_handles_labels()
    ax.legend(handles[0] + handles2[0], handles[1] + handles2[1], loc="upper left")
    title = "Throughput vs number of clients"
    if short:
        by = {r["condition"]: float(r["latency_ms"]) for r in short}
        parts = ["%s %.0f ms" % (c.replace("_", " "), by[c]) for c in ("idle", "under_load") if c in by]
        title += "\nshort chat latency: " + ", ".join(parts)
    ax.set_title(title)
    caption(fig, cpu, {r["_file"] for r in load + short})
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    path = os.path.join(out, "load_scaling.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("inputs", nargs="+", help="files of JSON lines from the benchmarks")
    parser.add_argument("--out", default="docs", help="directory for the PNGs")
    parser.add_argument("--cpu", help="the CPU the numbers were measured on")
    parser.add_argument("--cpu-from", help="an lscpu output file to take the CPU name from")
    args = parser.parse_args()
    if args.cpu:
        cpu = args.cpu
    elif args.cpu_from:
        with open(args.cpu_from, encoding="utf-8") as f:
            cpu = cpu_name(f.read())
    else:
        cpu = cpu_name(subprocess.run(["lscpu"], capture_output=True, text=True).stdout)
    records = read_lines(args.inputs)
    os.makedirs(args.out, exist_ok=True)
    written = [p for p in (plot_ttft(records, cpu, args.out), plot_throughput(records, cpu, args.out),
                           plot_load(records, cpu, args.out)) if p]
    if not written:
        print("plot_benchmarks: no benchmark lines in the input", file=sys.stderr)
        return 1
    for path in written:
        print("wrote", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
