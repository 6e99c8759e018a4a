// Detokenize: ids back to text (every id must be in the vocabulary).
#include <vector>

#include <fmt/format.h>

#include "daemon/handlers/handlers.h"
#include "daemon/handlers/proto_convert.h"

namespace niels::daemon::handlers {

namespace v1 = niels::v1;

HandlerResult HandleDetokenize(engine::EngineState& state, server::Job&, const v1::DetokenizeRequest& request) {
  if (static_cast<size_t>(request.ids_size()) > kMaxDetokenizeIds) {
    return common::Refuse(common::BudgetId::kDetokenizeIds,
                          fmt::format("ids has {} entries; the limit of a Detokenize is {} ids", request.ids_size(),
                                      kMaxDetokenizeIds));
  }
  const std::vector<int32_t> ids(request.ids().begin(), request.ids().end());
  NIELS_RETURN_IF_ERROR(CheckIds(ids, state.config().vocab_size, "ids"));
  v1::Response response;
  response.mutable_detokenize()->set_text(state.tokenizer().Decode(ids));
  return response;
}

}  // namespace niels::daemon::handlers
