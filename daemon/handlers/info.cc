// Info: the model nielsd serves and the limits a client must respect.
#include "common/budgets.h"
#include "common/defaults.h"
#include "common/wire_status.h"
#include "daemon/handlers/constraint.h"
#include "daemon/handlers/handlers.h"
#include "daemon/kernels/dtype.h"

namespace niels::daemon::handlers {

namespace v1 = niels::v1;

HandlerResult HandleInfo(engine::EngineState& state, server::Job& job, const v1::InfoRequest&) {
  const model::ModelConfig& config = state.config();
  const text::SpecialTokens& special = state.special();
  v1::Response response;
  v1::InfoResponse& info = *response.mutable_info();
  info.set_model_name(config.name.empty() ? state.model->dir.filename().string() : config.name);
  info.set_model_path(state.model->dir.string());
  info.set_vocab_size(config.vocab_size);
  info.set_context(config.context);
  info.set_width(config.width);
  info.set_layers(config.layers);
  info.set_heads(config.heads);
  info.set_d_ff(config.d_ff);
  info.set_rope_theta(config.rope_theta);
  info.set_sys_id(special.sys);
  info.set_usr_id(special.usr);
  info.set_asst_id(special.asst);
  info.set_eot_id(special.eot);
  info.set_daemon_version(NIELSD_VERSION);
  info.set_protocol_version(1);
  info.set_max_sessions(state.sessions.limits().max_sessions);
  info.set_kv_budget_bytes(state.kv.budget_bytes());
  info.set_kv_dtype(std::string(kernels::DtypeName(state.kv.pool().dtype())));
  info.set_architecture(std::string(model::ArchitectureName(config.architecture)));
  info.set_model_format(std::string(loaders::ModelFormatName(state.model->format)));
  info.set_model_context(state.model->model_context > 0 ? state.model->model_context : config.context);
  info.set_kv_heads(config.kv_head_count());
  info.set_head_size(config.head_dim());
  info.set_kv_bytes_per_token(static_cast<uint64_t>(loaders::KvBytesPerToken(config, state.kv.pool().dtype())));
  info.set_mapped_weight_bytes(static_cast<uint64_t>(loaders::MappedWeightBytes(*state.model)));
  info.set_bos_id(state.model->bos_id.value_or(-1));
  info.set_add_bos(state.model->add_bos_id.has_value());
  info.set_default_system_prompt(std::string(common::kDefaultSystemPrompt));
  if (const state::DurableStore* durable = state.sessions.durable_store()) {
    info.set_durable_sessions(true);
    info.set_session_ttl_s(durable->options().session_ttl_s);
    info.set_max_stored_sessions_per_uid(durable->options().max_stored_sessions_per_uid);
  }
  if (const text::ChatFormat* format = state.chat_format()) {
    info.set_chat_format(std::string(format->name()));
    info.set_reasoning(format->reasoning_tags().has_value());
    info.mutable_chat_stop_ids()->Add(format->stop_ids().begin(), format->stop_ids().end());
    if (state.tool_call_family) {
      info.set_tool_call_format(std::string(tool_calls::ToolCallFamilyName(*state.tool_call_family)));
    }
  } else {
    info.set_chat_format_error(state.chat_format_status.message());
  }
  if (state.constraint_vocabulary != nullptr) {
    for (const char* kind : kConstraintKinds) info.add_constraint_kinds(kind);
    info.set_max_json_schema_bytes(kMaxJsonSchemaBytes);
    info.set_max_gbnf_bytes(kMaxGbnfBytes);
  }
  for (const common::Budget& budget : common::Budgets()) {
    v1::Budget& out = *info.add_budgets();
    out.set_name(std::string(budget.name));
    out.set_unit(std::string(budget.unit));
    out.set_per_request_byte(budget.per_request_byte);
    out.set_per_new_token(budget.per_new_token);
    // The banned ids' and the logit bias's limits are the model's vocabulary size.
    const bool per_vocab = budget.id == common::BudgetId::kBannedIds || budget.id == common::BudgetId::kLogitBias;
    out.set_fixed(per_vocab ? static_cast<uint64_t>(config.vocab_size) : budget.fixed);
    out.set_refusal(common::ToProtoCode(budget.refusal));
    out.set_bounds(std::string(budget.bounds));
  }
  info.set_default_max_new_tokens(common::kDefaultMaxNewTokens);
  v1::Sampling& sampling = *info.mutable_default_sampling();
  sampling.set_temperature(common::kDefaultTemperature);
  sampling.set_top_k(common::kDefaultTopK);
  sampling.set_top_p(common::kDefaultTopP);
  sampling.set_repetition_penalty(common::kDefaultRepetitionPenalty);
  sampling.set_seed(common::kDefaultSeed);
  return response;
}

}  // namespace niels::daemon::handlers
