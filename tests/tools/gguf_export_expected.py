#!/usr/bin/python3
"""What niels-export's GGUF writer (tools/export/niels_export.py) puts into a file, from its inputs.

    gguf_export_expected.py MODEL_DIR f32|f16 OUT.gguf EXPECTED.json TENSORS.bin

Exports MODEL_DIR to OUT.gguf with niels-export, and writes beside it what the file must hold,
taken from the exporter's own lists before they are encoded: EXPECTED.json
{"metadata": [[key, gguf type id, value]], "tensors": [[name, ggml type id, [shape row-major],
offset in TENSORS.bin, bytes]]}, and TENSORS.bin (every tensor's bytes, concatenated).
tests/daemon/formats/gguf_reference_test.cc reads OUT.gguf with nielsd's GGUF reader and compares.
Python 3 + numpy (Debian python3-numpy) only.
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools", "export"))
import niels_export  # noqa: E402


def main():
    model_dir, dtype, out, expected_path, tensors_path = sys.argv[1:6]
    subprocess.run([sys.executable, os.path.join(ROOT, "tools/export/niels_export.py"), model_dir,
                    "--format", "gguf", out, "--dtype", dtype, "--force"], check=True,
                   stdout=subprocess.DEVNULL)
    cfg, tensors, tok = niels_export.load_model(model_dir)
    metadata = []
    for key, vtype, value in niels_export.gguf_metadata(cfg, tok, dtype):
        if vtype == niels_export.GGUF_ARRAY:
            etype, items = value
            value = [etype, [float(x) if etype == niels_export.GGUF_F32 else x for x in items]]
        metadata.append([key, vtype, value])
    entries = []
    offset = 0
    with open(tensors_path, "wb") as f:
        for name, a in niels_export.gguf_tensors(cfg, tensors, dtype):
            data = a.tobytes()
            ggml = niels_export.gguf_file.GGML_F32 if a.dtype.itemsize == 4 else niels_export.gguf_file.GGML_F16
            entries.append([name, ggml, list(a.shape), offset, len(data)])
            f.write(data)
            offset += len(data)
    with open(expected_path, "w") as f:
        json.dump({"metadata": metadata, "tensors": entries}, f)


if __name__ == "__main__":
    main()
