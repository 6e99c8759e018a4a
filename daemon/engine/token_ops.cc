// Tokenize and Detokenize: the tokenizer as a service (plain text; special literals stay text).
#include "daemon/engine/engine_state.h"
#include "daemon/engine/proto_convert.h"

namespace niels::daemon::engine {

namespace v1 = niels::v1;

HandlerResult HandleTokenize(EngineState& state, JobContext& job, const v1::TokenizeRequest& request) {
  const model::Tokenizer& tokenizer = state.tokenizer();
  v1::Response response;
  v1::TokenizeResponse& result = *response.mutable_tokenize();
  for (int32_t id : tokenizer.Encode(request.text())) {
    result.add_ids(id);
    result.add_pieces(tokenizer.Piece(id));
  }
  return response;
}

HandlerResult HandleDetokenize(EngineState& state, JobContext& job, const v1::DetokenizeRequest& request) {
  const std::vector<int32_t> ids(request.ids().begin(), request.ids().end());
  NIELS_RETURN_IF_ERROR(CheckIds(ids, state.config().vocab_size, "ids"));
  v1::Response response;
  response.mutable_detokenize()->set_text(state.tokenizer().Decode(ids));
  return response;
}

}  // namespace niels::daemon::engine
