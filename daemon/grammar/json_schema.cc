#include "daemon/grammar/json_schema.h"

#include "daemon/grammar/schema_compiler.h"

namespace niels::daemon::grammar {

common::StatusOr<std::string> JsonSchemaToGbnf(std::string_view schema_json, const GrammarLimits& limits,
                                               CompileWork* work) {
  WorkMeter meter = SchemaCompileMeter(limits, schema_json.size());
  common::StatusOr<std::string> gbnf = common::Status::Internal("json schema: not compiled");
  try {
    gbnf = internal::SchemaCompiler(limits, &meter).Compile(schema_json);
  } catch (const nlohmann::json::exception& e) {  // a shape the checks above missed: still an error value
    gbnf = common::Status::InvalidArgument(std::string("json schema: ") + e.what());
  }
  if (work != nullptr) {
    work->schema_units = meter.used();
    work->schema_budget = meter.budget();
  }
  return gbnf;
}

common::StatusOr<std::shared_ptr<const CompiledGrammar>> CompileJsonSchema(std::string_view schema_json,
                                                                           const GrammarLimits& limits,
                                                                           CompileWork* work) {
  auto gbnf = JsonSchemaToGbnf(schema_json, limits, work);
  if (!gbnf.ok()) return gbnf.status();
  auto g = CompiledGrammar::FromGbnf(*gbnf, limits, work);
  if (!g.ok()) {
    if (g.status().code() == common::StatusCode::kResourceExhausted ||
        g.status().code() == common::StatusCode::kCancelled) {
      return g.status();
    }
    return common::Status::InvalidArgument("json schema cannot be satisfied or is too large: " + g.status().message());
  }
  return g;
}

}  // namespace niels::daemon::grammar
