#include "daemon/text/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <cstdlib>

#include <fmt/format.h>

namespace niels::daemon::text {
namespace {

// Backtracking bound of one pcre2_match call: far above what the known patterns need on any text
// (they are linear), low enough that a pattern that backtracks exponentially fails in well under
// a second instead of hanging the engine thread.
constexpr uint32_t kMatchLimit = 10'000'000;

}  // namespace

struct PreTokenizer::Compiled {
  pcre2_code* code = nullptr;
  pcre2_match_context* context = nullptr;
  ~Compiled() {
    pcre2_match_context_free(context);
    pcre2_code_free(code);
  }
};

PreTokenizer::~PreTokenizer() = default;

std::string PreTokenizer::TranslatePattern(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 32);
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '\\' || i + 1 == pattern.size()) {
      out.push_back(pattern[i]);
      continue;
    }
    const char escaped = pattern[++i];
    switch (escaped) {
      case 's': out += "\\p{White_Space}"; break;
      case 'S': out += "\\P{White_Space}"; break;
      case 'h': out += "\\p{ASCII_Hex_Digit}"; break;
      case 'H': out += "\\P{ASCII_Hex_Digit}"; break;
      default:
        out.push_back('\\');
        out.push_back(escaped);
    }
  }
  return out;
}

common::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::Create(const PreTokenizerSetup& setup) {
  std::unique_ptr<PreTokenizer> pre(new PreTokenizer());
  pre->normalization_ = setup.normalization;
  for (size_t i = 0; i < setup.split_patterns.size(); ++i) {
    const std::string translated = TranslatePattern(setup.split_patterns[i]);
    int error = 0;
    PCRE2_SIZE offset = 0;
    auto compiled = std::make_unique<Compiled>();
    compiled->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
    if (compiled->code == nullptr) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof(message));
      return common::Status::InvalidArgument(
          fmt::format("split pattern {} does not compile at offset {} (after translation for PCRE2): {}", i,
                      offset, reinterpret_cast<const char*>(message)));
    }
    pcre2_jit_compile(compiled->code, PCRE2_JIT_COMPLETE);  // without JIT PCRE2 interprets: slower, same result
    compiled->context = pcre2_match_context_create(nullptr);
    if (compiled->context == nullptr) std::abort();  // out of memory
    pcre2_set_match_limit(compiled->context, kMatchLimit);
    pre->regexes_.push_back(std::move(compiled));
  }
  return pre;
}

common::Status PreTokenizer::SplitOne(const Compiled& regex, std::string_view text,
                                      std::vector<std::string_view>* pieces) const {
  pcre2_match_data* match = pcre2_match_data_create_from_pattern(regex.code, nullptr);
  if (match == nullptr) std::abort();  // out of memory
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;  // where the next search begins
  size_t done = 0;   // text before this is in *pieces
  common::Status status;
  while (start < text.size()) {
    const int rc = pcre2_match(regex.code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, match, regex.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      status = common::Status::ResourceExhausted(
          fmt::format("pre-tokenizer regex failed at byte {} of a {}-byte piece (PCRE2 error {})", start,
                      text.size(), rc));
      break;
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
    const size_t begin = ovector[0], end = ovector[1];
    if (begin == end) {  // an empty match splits nothing; search again one code point later
      start = begin + 1;
      while (start < text.size() && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) ++start;
      continue;
    }
    if (begin > done) pieces->push_back(text.substr(done, begin - done));
    pieces->push_back(text.substr(begin, end - begin));
    done = start = end;
  }
  if (status.ok() && done < text.size()) pieces->push_back(text.substr(done));
  pcre2_match_data_free(match);
  return status;
}

common::Status PreTokenizer::Split(std::string_view text, std::vector<std::string_view>* pieces) const {
  if (text.empty()) return common::Status::Ok();
  if (regexes_.empty()) {
    pieces->push_back(text);
    return common::Status::Ok();
  }
  const size_t first = pieces->size();
  NIELS_RETURN_IF_ERROR(SplitOne(*regexes_[0], text, pieces));
  std::vector<std::string_view> current;
  for (size_t r = 1; r < regexes_.size(); ++r) {
    current.assign(pieces->begin() + static_cast<std::ptrdiff_t>(first), pieces->end());
    pieces->resize(first);
    for (std::string_view piece : current) NIELS_RETURN_IF_ERROR(SplitOne(*regexes_[r], piece, pieces));
  }
  return common::Status::Ok();
}

void AppendNfc(std::string_view text, std::string* out) {
  // Code points below U+0300 are unchanged by NFC and compose with nothing before them, so text
  // whose lead bytes are all below 0xCC is already in NFC.
  bool simple = true;
  for (char c : text) {
    if (static_cast<uint8_t>(c) >= 0xCC) {
      simple = false;
      break;
    }
  }
  if (simple || text.empty()) {
    out->append(text);
    return;
  }
  utf8proc_uint8_t* result = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()), static_cast<utf8proc_ssize_t>(text.size()),
                   &result, static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) {
    // Only on invalid UTF-8 (excluded by the contract) or out of memory: keep the text as it is.
    out->append(text);
  } else {
    out->append(reinterpret_cast<const char*>(result), static_cast<size_t>(n));
  }
  std::free(result);
}

}  // namespace niels::daemon::text
