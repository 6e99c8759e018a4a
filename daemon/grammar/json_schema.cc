#include "daemon/grammar/json_schema.h"

#include "daemon/grammar/schema_compiler.h"

namespace niels::daemon::grammar {

common::StatusOr<std::string> JsonSchemaToGbnf(std::string_view schema_json, const GrammarLimits& limits) {
  try {
    return internal::SchemaCompiler(limits).Compile(schema_json);
  } catch (const nlohmann::json::exception& e) {  // a shape the checks above missed: still an error value
    return common::Status::InvalidArgument(std::string("json schema: ") + e.what());
  }
}

common::StatusOr<std::shared_ptr<const CompiledGrammar>> CompileJsonSchema(std::string_view schema_json,
                                                                           const GrammarLimits& limits) {
  auto gbnf = JsonSchemaToGbnf(schema_json, limits);
  if (!gbnf.ok()) return gbnf.status();
  auto g = CompiledGrammar::FromGbnf(*gbnf, limits);
  if (!g.ok()) {
    return common::Status::InvalidArgument("json schema cannot be satisfied or is too large: " + g.status().message());
  }
  return g;
}

}  // namespace niels::daemon::grammar
