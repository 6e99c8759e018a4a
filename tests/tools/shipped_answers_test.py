#!/usr/bin/python3
"""shipped_answers_q8_0 ctest: the shipped demo model's answers with Q8_0 weights.

integration_test's shipped_model_test.cc holds the shipped model (models/niels-demo) to its answers:
paraphrased corpus questions get a reply with the corpus answer's key phrase and without
"i don't know"; questions outside the corpus get "i don't know". This test asks the same questions
(read from that file: kCorpusProbes, kOutOfCorpus, kIdk) of the model with Q8_0 weights:
  1. niels-export writes the model as an f32 GGUF and niels-quantize makes its Q8_0 file;
  2. a real nielsd serving models/niels-demo answers every question greedily in a fresh session
     with its default system prompt (InfoResponse.default_system_prompt, what niels-chat uses);
  3. niels_chat_answers (chat_answers.cc: nielsd's ChatFormat, banned ids, stop ids and forward pass;
     nielsd cannot serve the GGUF itself, whose SentencePiece vocabulary LoadModel refuses) must give
     exactly nielsd's replies with the model's own f32 weights and with the f32 GGUF's -- so it is
     nielsd's Chat path, and the GGUF harness runs the exported weights as nielsd does;
  4. with the Q8_0 GGUF's weights its replies must pass shipped_model_test.cc's checks. How many
     replies are unchanged from f32 is printed.

    shipped_answers_test.py --nielsd NIELSD --answers NIELS_CHAT_ANSWERS --quantize NIELS_QUANTIZE \\
        --work-dir DIR        (PYTHONPATH: the Python client package, NIELS_PYTHON_PACKAGE_DIR)
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
SHIPPED_TEST = os.path.join(REPO, "tests", "integration", "shipped_model_test.cc")
DEMO = os.path.join(REPO, "models", "niels-demo")
STRING = r'"((?:[^"\\]|\\.)*)"'


def cpp_string(literal):
    return json.loads(f'"{literal}"')


def shipped_probes():
    """kCorpusProbes [(question, key)], kOutOfCorpus [question] and kIdk of shipped_model_test.cc."""
    with open(SHIPPED_TEST) as f:
        source = f.read()

    def block(name):
        match = re.search(name + r"\s*=\s*\{(.*?)\n\};", source, re.S)
        if match is None:
            raise RuntimeError(f"{SHIPPED_TEST}: no {name}")
        return match.group(1)

    probes = [(cpp_string(q), cpp_string(k)) for q, k in re.findall(r"\{" + STRING + r",\s*" + STRING + r"\}",
                                                                    block("kCorpusProbes"))]
    out_of_corpus = [cpp_string(q) for q in re.findall(STRING, block("kOutOfCorpus"))]
    idk = cpp_string(re.search(r"kIdk\s*=\s*" + STRING, source).group(1))
    if len(probes) < 4 or len(out_of_corpus) < 2:
        raise RuntimeError(f"{SHIPPED_TEST}: read only {len(probes)} probes and {len(out_of_corpus)} other questions")
    return probes, out_of_corpus, idk


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd[:3]))} ... failed ({p.returncode}): {p.stderr.strip()}")
    return p.stdout


def tool_replies(args, questions_file, system, weights=None):
    out = os.path.join(args.work_dir, "replies.json")
    run([args.answers, DEMO, questions_file, "--system", system, "--out", out] +
        ([] if weights is None else ["--weights", weights]))
    with open(out) as f:
        return json.load(f)["replies"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--nielsd", required=True)
    p.add_argument("--answers", required=True)
    p.add_argument("--quantize", required=True)
    p.add_argument("--work-dir", required=True)
    args = p.parse_args()
    os.makedirs(args.work_dir, exist_ok=True)
    start = time.monotonic()
    probes, out_of_corpus, idk = shipped_probes()
    questions = [q for q, _ in probes] + out_of_corpus
    questions_file = os.path.join(args.work_dir, "questions.json")
    with open(questions_file, "w") as f:
        json.dump(questions, f)

    f32, q8 = os.path.join(args.work_dir, "niels-demo-f32.gguf"), os.path.join(args.work_dir, "niels-demo-q8_0.gguf")
    run([sys.executable, os.path.join(REPO, "tools", "export", "niels_export.py"), DEMO, "--format", "gguf", f32,
         "--dtype", "f32", "--force"])
    run([args.quantize, f32, q8, "--type", "q8_0", "--threads", "1", "--quiet"])

    from export_support import Nielsd  # noqa: E402 (imports nielsd_client from PYTHONPATH)
    with Nielsd(args.nielsd, DEMO, args.work_dir) as server:
        c = server.client
        system = c.info().default_system_prompt
        daemon = [c.chat(c.create_session(system_prompt=system).session_id, q, temperature=0.0).reply
                  for q in questions]

    failures = []
    for label, weights in (("the model's f32 weights", None), ("the f32 GGUF", f32)):
        ours = tool_replies(args, questions_file, system, weights)
        for q, a, b in zip(questions, daemon, ours):
            if a != b:
                failures.append(f"niels_chat_answers with {label} replies {b!r} to {q!r}; nielsd replied {a!r}")
    q8_replies = tool_replies(args, questions_file, system, q8)
    before = len(failures)
    for (q, key), reply in zip(probes, q8_replies):
        if key not in reply or idk in reply:
            failures.append(f"Q8_0: {q!r} -> {reply!r} (expected {key!r} and not {idk!r})")
    for q, reply in zip(out_of_corpus, q8_replies[len(probes):]):
        if idk not in reply:
            failures.append(f"Q8_0: {q!r} -> {reply!r} (expected {idk!r})")
    same = sum(a == b for a, b in zip(daemon, q8_replies))
    for failure in failures:
        print("FAIL:", failure)
    passed = len(questions) - (len(failures) - before)
    print(f"Q8_0: {passed}/{len(questions)} answers pass shipped_model_test.cc's checks "
          f"({len(probes)} corpus probes, {len(out_of_corpus)} outside the corpus); {same}/{len(questions)} replies "
          f"identical to f32's; niels_chat_answers = nielsd on f32 ({time.monotonic() - start:.1f} s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
