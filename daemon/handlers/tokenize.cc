// Tokenize: the tokenizer as a service. Special-token literals stay text unless the request sets
// parse_special; the model's BOS goes in front only with add_special (when the tokenizer adds one).
#include <fmt/format.h>

#include "daemon/handlers/handlers.h"
#include "daemon/handlers/proto_convert.h"

namespace niels::daemon::handlers {

namespace v1 = niels::v1;

HandlerResult HandleTokenize(engine::EngineState& state, server::Job&, const v1::TokenizeRequest& request) {
  if (request.text().size() > kMaxTokenizeTextBytes) {
    return common::Refuse(common::BudgetId::kTokenizeTextBytes,
                          fmt::format("text is {} bytes; the limit of a Tokenize is {} bytes", request.text().size(),
                                      kMaxTokenizeTextBytes));
  }
  const text::Tokenizer& tokenizer = state.tokenizer();
  v1::Response response;
  v1::TokenizeResponse& result = *response.mutable_tokenize();
  common::StatusOr<std::vector<int32_t>> ids =
      request.parse_special() ? tokenizer.EncodeRendered(request.text()) : tokenizer.Encode(request.text());
  if (!ids.ok()) return ids.status();
  if (request.add_special() && state.model->add_bos_id) ids->insert(ids->begin(), *state.model->add_bos_id);
  for (int32_t id : *ids) {
    result.add_ids(id);
    result.add_pieces(tokenizer.Piece(id));
  }
  return response;
}

}  // namespace niels::daemon::handlers
