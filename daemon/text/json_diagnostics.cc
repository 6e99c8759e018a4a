#include "daemon/text/json_diagnostics.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace niels::daemon::text {
namespace {

// Records where nlohmann's SAX parser found an error; builds nothing.
struct SyntaxErrorFinder : nlohmann::json_sax<nlohmann::json> {
  size_t position = 0;
  bool found = false;
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return true; }
  bool key(string_t&) override { return true; }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t pos, const std::string&, const nlohmann::detail::exception&) override {
    position = pos;
    found = true;
    return false;
  }
};

}  // namespace

common::Status JsonSyntaxError(std::string_view json, std::string_view source, std::string_view detail) {
  SyntaxErrorFinder finder;
  nlohmann::json::sax_parse(json, &finder);
  if (!finder.found) {
    return common::Status::InvalidArgument(fmt::format("{}: not usable JSON: {}", source, detail));
  }
  const size_t offset = finder.position > 0 ? finder.position - 1 : 0;  // nlohmann counts from 1
  const std::string_view before = json.substr(0, std::min(offset, json.size()));
  const size_t line = static_cast<size_t>(std::count(before.begin(), before.end(), '\n')) + 1;
  const size_t line_start = before.rfind('\n');
  const size_t column = offset - (line_start == std::string_view::npos ? 0 : line_start + 1) + 1;
  return common::Status::InvalidArgument(fmt::format("{}: JSON syntax error at byte {} (line {}, column {}): {}",
                                                     source, offset, line, column, detail));
}

std::optional<int32_t> FindPieceId(const BpeSpec& spec, std::string_view piece) {
  for (size_t id = 0; id < spec.pieces.size(); ++id) {
    if (spec.types[id] != TokenType::kUnused && spec.pieces[id] == piece) return static_cast<int32_t>(id);
  }
  return std::nullopt;
}

}  // namespace niels::daemon::text
