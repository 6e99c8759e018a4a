// Reads a GGUF file with node-llama-cpp's GGUF parser (readGgufFileInfo) and prints what it found,
// for tests/daemon/formats/gguf_reference_test.cc to compare with nielsd's reader.
//
//   node gguf_dump.mjs NODE_MODULES_DIR FILE.gguf OUT.json
//
// OUT: {"version": n, "tensorCount": "n",
//       "metadata": {"dotted.key": value, ...},       values: numbers; 64-bit integers and floats
//                                                      as strings ("i:<decimal>" for integers that
//                                                      arrived as bigint); arrays as arrays
//       "tensors": [{"name", "dims": ["n", ...] (GGUF order), "type": id, "offset": "n",
//                    "fileOffset": "n"}]}
// node-llama-cpp returns metadata as a nested object split at the dots of the keys; it is
// flattened back here (so keys must not be prefixes of other keys, which real files respect).
// Exit status 0 on success, 1 with the error on stderr.

import {writeFileSync} from "node:fs";
import {join} from "node:path";
import {pathToFileURL} from "node:url";

const [modulesDir, ggufPath, outPath] = process.argv.slice(2);
const {readGgufFileInfo} = await import(pathToFileURL(join(modulesDir, "node-llama-cpp", "dist", "index.js")).href);

function plain(value) {
  if (typeof value === "bigint") return "i:" + value.toString();
  if (Array.isArray(value)) return value.map(plain);
  return value;
}

function flatten(prefix, node, out) {
  for (const [key, value] of Object.entries(node)) {
    const name = prefix === "" ? key : prefix + "." + key;
    if (value !== null && typeof value === "object" && !Array.isArray(value)) flatten(name, value, out);
    else out[name] = plain(value);
  }
  return out;
}

const info = await readGgufFileInfo(ggufPath, {sourceType: "filesystem", logWarnings: false, spliceSplitFiles: false});
const result = {
  version: info.version,
  tensorCount: String(info.tensorCount),
  metadata: flatten("", info.metadata, {}),
  tensors: (info.fullTensorInfo ?? info.tensorInfo ?? []).map((t) => ({
    name: t.name,
    dims: t.dimensions.map(String),
    type: t.ggmlType,
    offset: String(t.offset),
    fileOffset: String(t.fileOffset),
  })),
};
writeFileSync(outPath, JSON.stringify(result));
