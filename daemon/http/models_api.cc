#include "daemon/http/models_api.h"

#include <nlohmann/json.hpp>

#include "daemon/http/openai_common.h"

namespace niels::daemon::http {

namespace {

std::string ModelsBody(const ModelView& model) {
  nlohmann::json entry = {{"id", model.id},           {"object", "model"},
                          {"created", 0},             {"owned_by", "nielsd"},
                          {"context_length", model.context}, {"max_model_len", model.context}};
  return Dump({{"object", "list"}, {"data", nlohmann::json::array({std::move(entry)})}});
}

}  // namespace

boost::asio::awaitable<void> HandleHealth(Exchange& exchange, bool shutting_down) {
  if (shutting_down) {
    co_await exchange.Respond(503, std::string(R"({"status":"shutting down"})"));
    co_return;
  }
  ModelView model;
  if (std::optional<ApiError> error = co_await exchange.Model(&model)) {
    co_await exchange.RespondError(*error);
    co_return;
  }
  co_await exchange.Respond(200, std::string(R"({"status":"ok"})"));
}

boost::asio::awaitable<void> HandleModels(Exchange& exchange) {
  ModelView model;
  if (std::optional<ApiError> error = co_await exchange.Model(&model)) {
    co_await exchange.RespondError(*error);
    co_return;
  }
  co_await exchange.Respond(200, ModelsBody(model));
}

}  // namespace niels::daemon::http
