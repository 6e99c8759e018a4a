// Fuzz target: the tool-call parsers (daemon/tool_calls/tool_call_parser.h), every family, the
// reply parsed whole, streamed one byte at a time and streamed in pieces cut at fuzzed points.
//
// Input: 1 byte options (bits 0-1: family, 0 kHermes, 1 kLlama3Json, 2 and 3 kGenericJson; bit 2:
// calls not allowed), 1 byte max_call_bytes (0: the default; n: 2 * n, so limits of 2..510 bytes
// are reached), 1 byte split seed, then the reply's answer text. The tools known are get_weather,
// get_time, search and f.
// Invariants: the three runs give the same content and calls (the whole one through
// ParseToolCalls, whose last Delta must hold every call and all content); in each stream the content pieces
// joined equal the final content, each call's name comes once, in its first piece, and its
// argument fragments joined equal its final arguments; after every piece the parser holds back at
// most max(max_call_bytes, 14) bytes; its work is at most kMaxWorkUnitsPerByte per byte fed; every
// call has a known name and arguments that parse (ParseJsonBounded) as an object and appear in the
// text as written; a reply without calls (calls not allowed, or none found) has content equal to
// the whole text, and content is never longer than the text.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "common/bounded_json.h"
#include "daemon/tool_calls/tool_call_parser.h"
#include "tests/fuzz/fuzz_util.h"

namespace tc = niels::daemon::tool_calls;

namespace {

const std::vector<std::string> kToolNames = {"get_weather", "get_time", "search", "f"};

// Feeds `text` in pieces ending at `ends` (ascending, the last = text.size()) and checks the
// stream's own invariants. Returns the final reply.
tc::FinalReply Stream(tc::ToolCallFamily family, const tc::ToolCallParserOptions& options, std::string_view text,
                      const std::vector<size_t>& ends) {
  auto parser = tc::MakeToolCallParser(family, options);
  const size_t held_bound = std::max<size_t>(options.max_call_bytes, 14);
  std::string content;
  std::map<size_t, std::string> names, arguments;
  auto add = [&](const tc::Delta& delta) {
    content += delta.content;
    for (const tc::ToolCallDelta& call : delta.calls) {
      if (!call.name.empty()) {
        FUZZ_CHECK(names.count(call.index) == 0);
        names[call.index] = call.name;
      } else {
        FUZZ_CHECK(names.count(call.index) == 1);
      }
      arguments[call.index] += call.arguments;
    }
  };
  size_t begin = 0;
  for (size_t end : ends) {
    add(parser->Feed(text.substr(begin, end - begin)));
    FUZZ_CHECK(parser->held_back_bytes() <= held_bound);
    begin = end;
  }
  tc::FinalReply reply = parser->Finish();
  add(reply.last);
  FUZZ_CHECK(content == reply.content);
  FUZZ_CHECK(names.size() == reply.calls.size() && arguments.size() == reply.calls.size());
  for (size_t i = 0; i < reply.calls.size(); ++i) {
    FUZZ_CHECK(names[i] == reply.calls[i].name);
    FUZZ_CHECK(arguments[i] == reply.calls[i].arguments);
  }
  FUZZ_CHECK(parser->work_units() <= tc::kMaxWorkUnitsPerByte * std::max<size_t>(text.size(), 1));
  return reply;
}

bool SameReply(const tc::FinalReply& a, const tc::FinalReply& b) {
  return a.content == b.content && a.calls == b.calls;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  niels::fuzz::ByteReader in(data, size);
  const uint8_t flags = in.U8();
  const uint8_t limit = in.U8();
  niels::fuzz::Rng rng(in.U8());
  const std::string_view text = in.Rest();

  static constexpr tc::ToolCallFamily kFamilies[] = {tc::ToolCallFamily::kHermes, tc::ToolCallFamily::kLlama3Json,
                                                     tc::ToolCallFamily::kGenericJson,
                                                     tc::ToolCallFamily::kGenericJson};
  const tc::ToolCallFamily family = kFamilies[flags & 3];
  tc::ToolCallParserOptions options;
  options.tool_names = kToolNames;
  options.calls_allowed = (flags & 4) == 0;
  if (limit != 0) options.max_call_bytes = size_t{limit} * 2;

  // Whole: ParseToolCalls (one Feed and Finish); its `last` is everything the stream handed out.
  const tc::FinalReply whole = tc::ParseToolCalls(family, options, text);
  FUZZ_CHECK(whole.last.content == whole.content && whole.last.calls.size() == whole.calls.size());
  for (size_t i = 0; i < whole.calls.size(); ++i) {
    FUZZ_CHECK(whole.last.calls[i].index == i && whole.last.calls[i].name == whole.calls[i].name);
    FUZZ_CHECK(whole.last.calls[i].arguments == whole.calls[i].arguments);
  }
  std::vector<size_t> every_byte;
  for (size_t i = 1; i <= text.size(); ++i) every_byte.push_back(i);
  if (every_byte.empty()) every_byte.push_back(0);
  FUZZ_CHECK(SameReply(whole, Stream(family, options, text, every_byte)));
  std::vector<size_t> cuts;
  for (size_t pos = 0;;) {
    pos += 1 + rng.Next() % 16;
    if (pos >= text.size()) break;
    cuts.push_back(pos);
  }
  cuts.push_back(text.size());
  FUZZ_CHECK(SameReply(whole, Stream(family, options, text, cuts)));

  FUZZ_CHECK(whole.content.size() <= text.size());
  if (whole.calls.empty()) FUZZ_CHECK(whole.content == text);
  if (!options.calls_allowed) FUZZ_CHECK(whole.calls.empty());
  for (const tc::ToolCall& call : whole.calls) {
    FUZZ_CHECK(std::find(kToolNames.begin(), kToolNames.end(), call.name) != kToolNames.end());
    auto parsed = niels::common::ParseJsonBounded(call.arguments, "arguments");
    FUZZ_CHECK(parsed.ok() && parsed->is_object());
    FUZZ_CHECK(text.find(call.arguments) != std::string_view::npos);
  }
  return 0;
}
