// A GGUF file with a SentencePiece vocabulary (tokenizer.ggml.model "llama"):
//   - the shipped demo model exported by niels-export (tools/export, run here) loads with LoadModel
//     as its niels directory does: bitwise the same logits, the same pieces and special ids, the
//     same chat format and chat ids; on the 10000 lines of tests/tools/tokenizer_corpus.py its ids
//     are SentencePiece's own on the original tokenizer.model with the normalizer llama.cpp runs
//     (identity, no whitespace removal: the file's normalizer_spec rewritten), and equal the
//     directory's on every line the directory's nmt_nfkc normalizer leaves alone;
//   - a Llama-2-shaped vocabulary (family_model.h) loads with its BOS rule, special tokens and
//     template, and every bad tokenizer key is refused naming the key.
// Reference for llama.cpp itself: the export_gguf ctest (tests/tools) tokenizes the same GGUF with
// node-llama-cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/formats/gguf_file.h"
#include "daemon/loaders/model_loader.h"
#include "daemon/model/transformer.h"
#include "daemon/text/chat_format.h"
#include "daemon/text/jinja_chat_format.h"
#include "tests/support/family_model.h"
#include "tests/support/temp_files.h"

namespace niels::daemon::loaders {
namespace {

using formats::GgufWriteValue;
using model::Architecture;

const std::filesystem::path kDemo = NIELS_SOURCE_DIR "/models/niels-demo";

// Runs a shell command; its stdout. Throws (a test failure) when it fails.
std::string RunCommand(const std::string& command) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(::popen(command.c_str(), "r"), ::pclose);
  if (!pipe) throw std::runtime_error("cannot run: " + command);
  std::string out;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe.get())) > 0;) out.append(buffer, n);
  if (::pclose(pipe.release()) != 0) throw std::runtime_error("failed: " + command + "\n" + out);
  return out;
}

// --- protobuf wire format, just enough to rewrite one field of tokenizer.model ---
void Varint(std::string& out, uint64_t v) {
  for (; v >= 0x80; v >>= 7) out.push_back(static_cast<char>((v & 0x7f) | 0x80));
  out.push_back(static_cast<char>(v));
}
uint64_t ReadVarint(const std::string& s, size_t& pos) {
  uint64_t v = 0;
  for (int shift = 0;; shift += 7) {
    const auto byte = static_cast<uint8_t>(s.at(pos++));
    v |= uint64_t{byte & 0x7fu} << shift;
    if (!(byte & 0x80)) return v;
  }
}

// `model` (a serialized ModelProto) with normalizer_spec (field 3) replaced by llama.cpp's rule for
// its llama vocabulary: name "identity" (1), add_dummy_prefix (3) true, remove_extra_whitespaces (4)
// false, escape_whitespaces (5) true (sentencepiece_model.proto).
std::string WithIdentityNormalizer(const std::string& model) {
  std::string out;
  for (size_t pos = 0; pos < model.size();) {
    const size_t start = pos;
    const uint64_t tag = ReadVarint(model, pos);
    switch (tag & 7) {
      case 0: ReadVarint(model, pos); break;
      case 1: pos += 8; break;
      case 5: pos += 4; break;
      case 2: pos += ReadVarint(model, pos); break;
      default: throw std::runtime_error("unexpected wire type in tokenizer.model");
    }
    if ((tag >> 3) != 3) out.append(model, start, pos - start);
  }
  const std::string spec = std::string("\x0a\x08identity", 10) + std::string("\x18\x01\x20\x00\x28\x01", 6);
  Varint(out, (3 << 3) | 2);
  Varint(out, spec.size());
  return out + spec;
}

class DemoGgufTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new niels::testing::TempDir("niels_demo_gguf_");
    gguf_ = new std::filesystem::path(*dir_ / "niels-demo.gguf");
    // The demo's matrices are f16; so are the export's (norms and biases become f32 in both).
    RunCommand("/usr/bin/python3 " NIELS_SOURCE_DIR "/tools/export/niels_export.py " + kDemo.string() + " --format gguf " +
        gguf_->string() + " --dtype f16 2>&1");
    // 10000 lines (edit name, text), tokenizer_corpus.py's mix of prose and edits.
    const std::filesystem::path lines = *dir_ / "lines.json";
    RunCommand("cd " NIELS_SOURCE_DIR "/tests/tools && /usr/bin/python3 -c 'import json, tokenizer_corpus as tc; "
        "json.dump(tc.test_lines(\"../../data/corpus/niels_corpus.jsonl\", [\"../../README.md\", "
        "\"../../docs/ARCHITECTURE.md\"], 10000, seed=3), open(\"" +
        lines.string() + "\", \"w\"))'");
    corpus_ = new nlohmann::json(nlohmann::json::parse(niels::testing::ReadFile(lines)));
  }
  static void TearDownTestSuite() {
    delete corpus_;
    delete gguf_;
    delete dir_;
  }

  static std::unique_ptr<Model> Load(const std::filesystem::path& path) {
    auto model = LoadModel(path);
    if (!model.ok()) throw std::runtime_error(model.status().ToString());
    return std::move(model).value();
  }

  static niels::testing::TempDir* dir_;
  static std::filesystem::path* gguf_;
  static nlohmann::json* corpus_;
};

niels::testing::TempDir* DemoGgufTest::dir_ = nullptr;
std::filesystem::path* DemoGgufTest::gguf_ = nullptr;
nlohmann::json* DemoGgufTest::corpus_ = nullptr;

TEST_F(DemoGgufTest, LoadsAsTheDirectoryWithBitwiseTheSameLogits) {
  const auto dir = Load(kDemo);
  const auto gguf = Load(*gguf_);
  EXPECT_EQ(gguf->format, ModelFormat::kGguf);
  EXPECT_EQ(gguf->config.vocab_size, dir->config.vocab_size);
  EXPECT_EQ(gguf->config.context, dir->config.context);
  // The tokenizer: every id alike.
  ASSERT_EQ(gguf->tokenizer->vocab_size(), dir->tokenizer->vocab_size());
  for (int32_t id = 0; id < dir->tokenizer->vocab_size(); ++id) {
    ASSERT_EQ(gguf->tokenizer->Piece(id), dir->tokenizer->Piece(id)) << id;
    ASSERT_EQ(gguf->tokenizer->IsSpecial(id), dir->tokenizer->IsSpecial(id)) << id;
    ASSERT_EQ(gguf->tokenizer->IsTextPiece(id), dir->tokenizer->IsTextPiece(id)) << id;
    const text::TextBytes a = gguf->tokenizer->Bytes(id), b = dir->tokenizer->Bytes(id);
    ASSERT_TRUE(a.is_text == b.is_text && a.bytes == b.bytes && a.at_start == b.at_start) << id;
  }
  // Special tokens, stop ids, BOS rule, chat template: the directory's.
  EXPECT_EQ(gguf->special.sys, dir->special.sys);
  EXPECT_EQ(gguf->special.usr, dir->special.usr);
  EXPECT_EQ(gguf->special.asst, dir->special.asst);
  EXPECT_EQ(gguf->special.eot, dir->special.eot);
  EXPECT_GE(dir->special.eot, 0);
  EXPECT_EQ(gguf->stop_ids, dir->stop_ids);
  EXPECT_EQ(gguf->add_bos_id, dir->add_bos_id);
  EXPECT_EQ(gguf->chat_template, dir->chat_template);
  EXPECT_EQ(gguf->bos_token, dir->bos_token);
  EXPECT_EQ(gguf->eos_token, dir->eos_token);

  // Logits of a real conversation's ids.
  const text::SpecialTokens& s = dir->special;
  std::vector<int32_t> ids;
  for (const auto& [role, text] : std::vector<std::pair<int32_t, const char*>>{
           {s.sys, "You are a helpful assistant."}, {s.usr, "how do i start nielsd?"}, {s.asst, "Run nielsd --model DIR."}}) {
    const std::vector<int32_t> encoded = dir->tokenizer->Encode(text).value();
    ids.push_back(role);
    ids.insert(ids.end(), encoded.begin(), encoded.end());
    ids.push_back(s.eot);
  }
  const std::vector<float> from_dir = dir->transformer->Forward(ids);
  const std::vector<float> from_gguf = gguf->transformer->Forward(ids);
  ASSERT_EQ(from_dir.size(), ids.size() * static_cast<size_t>(dir->config.vocab_size));
  size_t differ = 0;
  for (size_t i = 0; i < from_dir.size(); ++i) differ += from_dir[i] != from_gguf[i];
  EXPECT_EQ(differ, 0u) << "of " << from_dir.size() << " logits over " << ids.size() << " positions";
}

TEST_F(DemoGgufTest, TokenizesTheCorpusAsSentencePieceWithLlamaCppsNormalizer) {
  const auto dir = Load(kDemo);
  const auto gguf = Load(*gguf_);
  const std::filesystem::path identity_path = *dir_ / "identity.model";
  niels::testing::WriteFile(identity_path, WithIdentityNormalizer(niels::testing::ReadFile(kDemo / "tokenizer.model")));
  auto identity = text::SentencePieceTokenizer::Load(identity_path);
  ASSERT_TRUE(identity.ok()) << identity.status().ToString();

  std::map<std::string, std::array<int, 3>> per_edit;  // lines; equal to the directory's; normalizer differs
  size_t lines = 0, same_as_dir = 0, normalizer_differs = 0;
  for (const auto& line : *corpus_) {
    const std::string edit = line[0], text = line[1];
    const std::vector<int32_t> ours = gguf->tokenizer->Encode(text).value();
    const std::vector<int32_t> reference = (*identity)->Encode(text).value();
    const std::vector<int32_t> original = dir->tokenizer->Encode(text).value();
    ASSERT_EQ(ours, reference) << "line " << lines << " (" << edit << "): " << text;
    auto& row = per_edit[edit];
    ++lines, ++row[0];
    if (ours == original) ++same_as_dir, ++row[1];
    if (reference != original) ++normalizer_differs, ++row[2];
    // Every difference from the directory is one its nmt_nfkc normalizer makes.
    EXPECT_TRUE(ours == original || reference != original) << text;
  }
  std::string summary;
  for (const auto& [edit, row] : per_edit) summary += " " + edit + " " + std::to_string(row[1]) + "/" + std::to_string(row[0]);
  std::printf("[ demo GGUF ] %zu lines: all equal SentencePiece with llama.cpp's normalizer; %zu equal the niels "
              "directory's ids, %zu differ where its nmt_nfkc normalizer changes the text (per edit, equal/lines:%s)\n",
              lines, same_as_dir, normalizer_differs, summary.c_str());
  EXPECT_EQ(lines, 10000u);
  EXPECT_EQ(same_as_dir + normalizer_differs, lines);
  // Measured: about half equal the directory's (5452 of 10000; 2917 of the 3334 unedited lines, the
  // others hold whitespace runs, leading spaces or characters NFKC changes; the lines come from
  // README.md and ARCHITECTURE.md, so the counts move with them). Both kinds must occur.
  EXPECT_GT(same_as_dir, lines / 4);
  EXPECT_GT(normalizer_differs, 0u) << "the corpus no longer exercises the normalizer";

  // Rendered text with the markers, and decoding.
  for (const std::string text : {"<|ngpt_usr_84a5023f67d74cf29cc4001becde983c|>hi there<|ngpt_eot_84a5023f67d74cf29cc4001becde983c|>",
                                 "<s> a <unk> b </s><|ngpt_asst_84a5023f67d74cf29cc4001becde983c|>"}) {
    const std::vector<int32_t> rendered = gguf->tokenizer->EncodeRendered(text).value();
    EXPECT_EQ(rendered, dir->tokenizer->EncodeRendered(text).value()) << text;
    EXPECT_EQ(gguf->tokenizer->Decode(rendered), dir->tokenizer->Decode(rendered)) << text;
  }
}

TEST_F(DemoGgufTest, ChatAsTheDirectoryAndAsTheFilesTemplate) {
  const auto dir = Load(kDemo);
  const auto gguf = Load(*gguf_);
  auto source = [](const Model& m) {
    return text::ChatFormatSource{m.tokenizer.get(), m.special, m.stop_ids, m.chat_template, m.bos_token, m.eos_token,
                                  m.add_bos_id};
  };
  auto from_dir = text::MakeChatFormat(source(*dir));
  auto from_gguf = text::MakeChatFormat(source(*gguf));
  ASSERT_TRUE(from_dir.ok() && from_gguf.ok());
  EXPECT_EQ((*from_gguf)->kind(), text::ChatFormat::Kind::kTokenNative);
  EXPECT_EQ((*from_gguf)->stop_ids(), (*from_dir)->stop_ids());
  EXPECT_EQ((*from_gguf)->banned_ids(), (*from_dir)->banned_ids());
  // The file's own Jinja template (what llama.cpp renders) with the GGUF's tokenizer.
  auto file = formats::GgufFile::Open(*gguf_);
  ASSERT_TRUE(file.ok());
  text::ChatFormatSource jinja_source = source(*gguf);
  jinja_source.chat_template = std::string((*file)->GetString("tokenizer.chat_template").value());
  auto jinja = text::JinjaChatFormat::Create(jinja_source);
  ASSERT_TRUE(jinja.ok()) << jinja.status().ToString();

  const std::vector<std::pair<std::optional<std::string>, std::string>> chats = {
      {"You are a helpful assistant.", "how do i start nielsd?"},
      {std::nullopt, "what is a kv cache?"},
      {"Answer briefly.", "which socket does niels-chat use by default? <|ngpt_eot_84a5023f67d74cf29cc4001becde983c|>"}};
  for (const auto& [system, user] : chats) {
    const std::vector<int32_t> start = (*from_dir)->SessionStart(system).value();
    EXPECT_EQ((*from_gguf)->SessionStart(system).value(), start) << user;
    const std::vector<int32_t> turn = (*from_dir)->EncodeTurn(system, {}, user, {}).value().ids;
    EXPECT_EQ((*from_gguf)->EncodeTurn(system, {}, user, {}).value().ids, turn) << user;
    std::vector<int32_t> whole = start;
    whole.insert(whole.end(), turn.begin(), turn.end());
    const auto rendered = (*jinja)->EncodeTurn(system, {}, user, {});
    ASSERT_TRUE(rendered.ok()) << rendered.status().ToString();
    // The template reads a literal marker in a message as the marker (llama.cpp does too); the
    // token-native format keeps it text. Equal otherwise.
    if (user.find("<|ngpt_") == std::string::npos) {
      EXPECT_EQ(rendered->ids, whole) << user;
    }
  }
}

// --- a Llama-2-shaped SentencePiece vocabulary, and what is refused ---

constexpr int64_t kSpmVocab = 352;

class SentencePieceGgufTest : public ::testing::Test {
 protected:
  using VocabularyEdit = std::function<void(testing::SentencePieceTokens&)>;
  using FileEdit = std::function<void(testing::GgufModelFiles&)>;

  SentencePieceGgufTest() : config_(testing::TinyFamilyConfig(Architecture::kLlama)) {
    config_.vocab_size = kSpmVocab;
    weights_ = testing::TinyFamilyWeights(config_, 5);
  }
  std::filesystem::path Gguf(const VocabularyEdit& vocabulary_edit, const FileEdit& file_edit = {}) {
    testing::GgufModelFiles files = testing::MakeGgufModel(config_, weights_);
    testing::SentencePieceTokens vocabulary = testing::TinySentencePieceTokens(kSpmVocab);
    if (vocabulary_edit) vocabulary_edit(vocabulary);
    testing::UseSentencePieceVocabulary(files, vocabulary);
    if (file_edit) file_edit(files);
    const std::filesystem::path path = dir_ / ("m" + std::to_string(count_++) + ".gguf");
    files.Write(path);
    return path;
  }
  void ExpectRefused(const VocabularyEdit& vocabulary_edit, const FileEdit& file_edit,
                     const std::vector<std::string>& mentions) {
    const auto path = Gguf(vocabulary_edit, file_edit);
    auto model = LoadModel(path);
    ASSERT_FALSE(model.ok()) << mentions.front();
    EXPECT_EQ(model.status().code(), common::StatusCode::kInvalidArgument);
    std::vector<std::string> all = mentions;
    all.push_back(path.string());
    for (const std::string& part : all) {
      EXPECT_NE(model.status().message().find(part), std::string::npos)
          << "\"" << part << "\" not in: " << model.status().message();
    }
  }
  void ExpectRefused(const VocabularyEdit& vocabulary_edit, const std::vector<std::string>& mentions) {
    ExpectRefused(vocabulary_edit, {}, mentions);
  }
  void ExpectRefused(const FileEdit& file_edit, const std::vector<std::string>& mentions) {
    ExpectRefused({}, file_edit, mentions);
  }

  model::ModelConfig config_;
  model::Weights weights_;
  niels::testing::TempDir dir_{"niels_spm_gguf_"};
  int count_ = 0;
};

TEST_F(SentencePieceGgufTest, LoadsWithLlamaCppsRules) {
  auto model = LoadModel(Gguf({}));
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const Model& m = **model;
  const text::Tokenizer& tok = *m.tokenizer;
  EXPECT_EQ(m.add_bos_id, 1);  // tokenizer.ggml.add_bos_token
  EXPECT_EQ(m.stop_ids, std::vector<int32_t>{2});
  EXPECT_EQ(m.bos_token, "<s>");
  EXPECT_EQ(m.eos_token, "</s>");
  EXPECT_EQ(m.special.sys, -1);
  EXPECT_FALSE(m.chat_template.empty());
  EXPECT_TRUE(tok.IsSpecial(1) && tok.IsSpecial(2));
  EXPECT_FALSE(tok.IsSpecial(0) || tok.IsSpecial(3) || tok.IsSpecial(300));
  // Plain text: literals stay text; " the" is one piece, "Q" (no piece) its byte.
  const std::vector<int32_t> plain = tok.Encode("the Q <s>").value();
  EXPECT_EQ(tok.Piece(plain.front()), "\xE2\x96\x81the");
  EXPECT_TRUE(std::find(plain.begin(), plain.end(), 3 + 'Q') != plain.end());
  EXPECT_TRUE(std::find(plain.begin(), plain.end(), 1) == plain.end());
  EXPECT_EQ(tok.Decode(plain), "the Q <s>");
  // Rendered: control and unknown literals are ids; each text after one starts a word.
  const std::vector<int32_t> rendered = tok.EncodeRendered("<s>the</s><unk>the").value();
  const std::vector<int32_t> the = tok.Encode("the").value();
  std::vector<int32_t> expected = {1};
  expected.insert(expected.end(), the.begin(), the.end());
  expected.push_back(2);
  expected.push_back(0);
  expected.insert(expected.end(), the.begin(), the.end());
  EXPECT_EQ(rendered, expected);
  // The template renders <s>[INST] ...: one BOS (the rendering's own), then the text as a word.
  auto chat = text::MakeChatFormat({&tok, m.special, m.stop_ids, m.chat_template, m.bos_token, m.eos_token, m.add_bos_id});
  ASSERT_TRUE(chat.ok()) << chat.status().ToString();
  const std::vector<int32_t> turn = (*chat)->EncodeTurn(std::nullopt, {}, "the", {}).value().ids;
  ASSERT_GE(turn.size(), 2u);
  EXPECT_EQ(turn[0], 1);
  EXPECT_EQ(std::count(turn.begin(), turn.end(), 1), 1);
  EXPECT_EQ(tok.Decode(turn), "[INST] the [/INST]");
  // Without the space prefix.
  auto bare = LoadModel(
      Gguf({}, [](testing::GgufModelFiles& f) { f.Set("tokenizer.ggml.add_space_prefix", GgufWriteValue::Bool(false)); }));
  ASSERT_TRUE(bare.ok()) << bare.status().ToString();
  EXPECT_NE((*bare)->tokenizer->Piece((*bare)->tokenizer->Encode("the").value().front()), "\xE2\x96\x81the");
}

TEST_F(SentencePieceGgufTest, RefusesBadTokenizerKeys) {
  using V = testing::SentencePieceTokens;
  using F = testing::GgufModelFiles;
  ExpectRefused(FileEdit([](F& f) { f.Remove("tokenizer.ggml.scores"); }),
                {"missing metadata key \"tokenizer.ggml.scores\""});
  ExpectRefused(VocabularyEdit([](V& v) { v.scores.resize(10); }), {"tokenizer.ggml.scores", "10 scores for 352 tokens"});
  ExpectRefused(FileEdit([](F& f) { f.Set("tokenizer.ggml.scores", GgufWriteValue::StringArray({"a"})); }),
                {"tokenizer.ggml.scores"});
  ExpectRefused(VocabularyEdit([](V& v) { v.scores[300] = std::numeric_limits<float>::quiet_NaN(); }),
                {"tokenizer.ggml.scores", "[300]", "not a finite"});
  ExpectRefused(FileEdit([](F& f) { f.Remove("tokenizer.ggml.token_type"); }),
                {"missing metadata key \"tokenizer.ggml.token_type\""});
  ExpectRefused(VocabularyEdit([](V& v) { v.types.pop_back(); }), {"tokenizer.ggml.token_type", "351 entries for 352"});
  ExpectRefused(VocabularyEdit([](V& v) { v.types[300] = 9; }), {"tokenizer.ggml.token_type", "[300] = 9 is not a token type"});
  ExpectRefused(VocabularyEdit([](V& v) { v.types[300] = -1; }), {"tokenizer.ggml.token_type", "[300] = -1"});
  ExpectRefused(VocabularyEdit([](V& v) { v.types[300] = 4; }), {"tokenizer.ggml.token_type", "[300] = 4", "user-defined"});
  ExpectRefused(VocabularyEdit([](V& v) { v.types[300] = 5; }), {"tokenizer.ggml.token_type", "[300] = 5", "unused"});
  ExpectRefused(VocabularyEdit([](V& v) { v.types[0] = 1; }), {"tokenizer.ggml.token_type", "no unknown token"});
  ExpectRefused(VocabularyEdit([](V& v) { v.types[1] = 2; }), {"tokenizer.ggml.token_type", "tokens 0 and 1 are both unknown"});
  ExpectRefused(VocabularyEdit([](V& v) { v.types[3 + 0x41] = 1; }), {"tokenizer.ggml.tokens", "no byte token <0x41>"});
  ExpectRefused(VocabularyEdit([](V& v) { v.tokens[3 + 0x41] = "<0x4g>"; }),
                {"tokenizer.ggml.tokens", "[68] = \"<0x4g>\" is a byte token (6) not spelled <0xXX>"});
  ExpectRefused(VocabularyEdit([](V& v) { v.tokens[3 + 0x41] = "<0x40>"; }),
                {"tokenizer.ggml.tokens", "[68] = \"<0x40>\" repeats token 67"});
  ExpectRefused(VocabularyEdit([](V& v) { v.tokens[300] = ""; }), {"tokenizer.ggml.tokens", "[300] is empty"});
  ExpectRefused(VocabularyEdit([](V& v) { v.tokens[300] = "a"; }), {"tokenizer.ggml.tokens", "[300] = \"a\" repeats token"});
  ExpectRefused(FileEdit([](F& f) { f.Set("tokenizer.ggml.unknown_token_id", GgufWriteValue::U32(5)); }),
                {"tokenizer.ggml.unknown_token_id", "5 is not the unknown token"});
  ExpectRefused(FileEdit([](F& f) { f.Set("tokenizer.ggml.add_space_prefix", GgufWriteValue::U32(1)); }),
                {"tokenizer.ggml.add_space_prefix"});
  ExpectRefused(FileEdit([](F& f) { f.Set("tokenizer.ggml.model", GgufWriteValue::String("bert")); }),
                {"tokenizer.ggml.model", "\"bert\" is not supported"});
}

}  // namespace
}  // namespace niels::daemon::loaders
