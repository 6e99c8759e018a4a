#include "daemon/handlers/constraint.h"

#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "daemon/grammar/json_schema.h"
#include "daemon/sampling/token_id_set.h"

namespace niels::daemon::handlers {

namespace v1 = niels::v1;
using common::Status;

grammar::GrammarLimits ConstraintGrammarLimits() {
  grammar::GrammarLimits limits;
  limits.max_text_bytes = kMaxGbnfBytes;
  return limits;
}

namespace {

Status TooLarge(common::BudgetId budget, const char* field, size_t bytes, size_t limit) {
  return common::Refuse(budget, fmt::format("{}: too large: {} bytes (the limit is {} bytes)", field, bytes, limit));
}

}  // namespace

bool ConstraintCompilesText(bool has_constraint, const v1::Constraint& constraint) {
  return has_constraint &&
         (constraint.kind_case() == v1::Constraint::kJsonSchema || constraint.kind_case() == v1::Constraint::kGbnf);
}

common::StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> CompileConstraint(
    bool has_constraint, const v1::Constraint& constraint, const CompileCancelled& cancelled) {
  if (!has_constraint) return std::shared_ptr<const grammar::CompiledGrammar>();
  const auto stopped = [&cancelled] { return cancelled && cancelled(); };
  if (stopped()) return Status::Cancelled("the request was cancelled");
  common::StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> compiled = Status::InvalidArgument("");
  std::string field;
  switch (constraint.kind_case()) {
    case v1::Constraint::kJsonSchema:
      field = "constraint.json_schema";
      if (constraint.json_schema().size() > kMaxJsonSchemaBytes) {
        return TooLarge(common::BudgetId::kJsonSchemaBytes, "constraint.json_schema", constraint.json_schema().size(), kMaxJsonSchemaBytes);
      }
      {
        grammar::GrammarLimits limits;  // the generated grammar keeps the default size limits
        limits.cancelled = cancelled;
        compiled = grammar::CompileJsonSchema(constraint.json_schema(), limits);
      }
      break;
    case v1::Constraint::kGbnf:
      field = "constraint.gbnf";
      if (constraint.gbnf().size() > kMaxGbnfBytes) return TooLarge(common::BudgetId::kGbnfBytes, "constraint.gbnf", constraint.gbnf().size(), kMaxGbnfBytes);
      {
        grammar::GrammarLimits limits = ConstraintGrammarLimits();
        limits.cancelled = cancelled;
        compiled = grammar::CompiledGrammar::FromGbnf(constraint.gbnf(), limits);
      }
      break;
    case v1::Constraint::kAnyJson:
      return grammar::CompiledGrammar::AnyJson();
    case v1::Constraint::KIND_NOT_SET:
      return Status::InvalidArgument("constraint: set one of json_schema, gbnf or any_json");
  }
  if (!compiled.ok()) {
    if (compiled.status().code() == common::StatusCode::kCancelled) return compiled.status();
    return Status(compiled.status().code(), field + ": " + compiled.status().message());
  }
  if (stopped()) return Status::Cancelled("the request was cancelled");
  return compiled;
}

Status CheckConstraintUsable(const engine::EngineState& state, const sampling::SamplingParams& sampling,
                             std::span<const int32_t> stop_ids) {
  const engine::ConstraintVocabulary* vocabulary = state.constraint_vocabulary.get();
  if (vocabulary == nullptr) return Status::Unimplemented("this model's vocabulary cannot be used with a constraint");
  const sampling::TokenIdSet banned(sampling.banned_ids);  // O(n) for SamplingFromProto's ascending ids
  bool any_unbanned = false;
  for (size_t i = 0; i < stop_ids.size(); ++i) {
    const int32_t id = stop_ids[i];
    if (vocabulary->after->token(id).kind == grammar::TokenKind::kText) {
      return Status::InvalidArgument(fmt::format(
          "stop_ids[{}] = {} is a text id; with a constraint the output may end only on a special id", i, id));
    }
    any_unbanned = any_unbanned || !banned.Contains(id);
  }
  if (!any_unbanned) return Status::InvalidArgument("with a constraint, some stop id must not be banned");
  return Status::Ok();
}

}  // namespace niels::daemon::handlers
