#pragma once
// EngineState: what the engine thread owns and what the code it runs for a request works on -- the
// model, the sessions with their KV budget, and the figures Stats reports. Everything here is
// touched only on the engine thread (the request handlers of daemon/handlers run there too).

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>

#include "daemon/engine/chat_tools.h"
#include "daemon/engine/engine_options.h"
#include "daemon/engine/output_constraint.h"
#include "daemon/loaders/model_loader.h"
#include "daemon/sessions/kv_budget.h"
#include "daemon/sessions/kv_spill.h"
#include "daemon/sessions/session_registry.h"
#include "daemon/text/chat_format.h"
#include "daemon/tool_calls/tool_call_parser.h"

namespace niels::daemon::engine {

struct EngineState {
  EngineState(std::unique_ptr<loaders::Model> model, const EngineOptions& options);

  const model::LanguageModel& language_model() const { return *model->transformer; }
  const text::Tokenizer& tokenizer() const { return *model->tokenizer; }
  const text::SpecialTokens& special() const { return model->special; }
  const model::ModelConfig& config() const { return model->config; }
  // The model's chat format (text/chat_format.h), made once at start; null when the model has none,
  // and then chat_format_status says why (Chat and a system prompt fail with it).
  const text::ChatFormat* chat_format() const { return chat_format_.get(); }
  // The format that renders a session's conversation as messages: chat_format() for a template;
  // for the token-native format, another token-native format behind the generic tool format
  // (chat_turn.h, "conversation mode"). Null when chat_format() is.
  const text::ChatFormat* conversation_format() const {
    return conversation_format_ != nullptr ? conversation_format_.get() : chat_format_.get();
  }

  std::unique_ptr<loaders::Model> model;
  EngineOptions options;
  common::Status chat_format_status;               // declared before chat_format_, which sets it
  std::unique_ptr<text::ChatFormat> chat_format_;  // refers to model's tokenizer
  std::unique_ptr<text::ChatFormat> conversation_format_;  // token-native models only
  // The tool-call family of the model's chat template (tool_calls/template_family.h); kGenericJson
  // for a template without tool support, whose format is then a text::GenericToolChatFormat, and
  // for the token-native format (conversation_format()); nullopt without a chat format.
  std::optional<tool_calls::ToolCallFamily> tool_call_family;
  // The forced tool choices' grammars of the tool sets in use (chat_tools.h).
  ToolGrammarCache tool_grammars;
  sessions::KvSpiller spiller;       // KV caches to and from disk (durable sessions)
  sessions::SessionRegistry sessions;
  sessions::KvBudget kv;             // the KV pool: admission and eviction
  // Structured output: the model's tokenizer as the grammar room's vocabulary (built once; null
  // when it could not be built, then constrained requests are refused).
  std::shared_ptr<const ConstraintVocabulary> constraint_vocabulary;
  std::chrono::steady_clock::time_point started;
  uint64_t requests_total = 0;
  uint64_t tokens_generated_total = 0;
  uint64_t tokens_prefilled_total = 0;
  uint64_t sessions_expired_total = 0;  // left memory for --idle-session-timeout
  // Scheduler figures for Stats (updated by the engine every iteration).
  uint32_t queued_requests = 0;    // requests waiting (not yet running)
  uint32_t running_sequences = 0;  // turns admitted and not finished
  uint64_t iterations = 0;         // scheduler iterations that ran model work
  double busy_s = 0;               // seconds spent in those iterations
  uint64_t decode_steps = 0;       // batched decode steps
  uint64_t decode_rows = 0;        // sequences summed over those steps (mean batch = rows / steps)
};

}  // namespace niels::daemon::engine
