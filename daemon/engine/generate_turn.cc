#include "daemon/engine/generate_turn.h"

#include <memory>
#include <utility>

#include <fmt/format.h>

namespace niels::daemon::engine {

using common::Status;
using common::StatusOr;

namespace {

// INVALID_ARGUMENT when the input cannot be appended to the session.
Status CheckFits(const sessions::Session& session, const GenerateTurnArgs& args, int64_t context) {
  const int64_t length = session.length() + static_cast<int64_t>(args.input.size());
  if (length > context) {
    return Status::InvalidArgument(fmt::format(
        "the session has {} tokens; {} more input ids would exceed the model's context of {} tokens",
        session.length(), args.input.size(), context));
  }
  if (length == 0 && args.options.max_new_tokens > 0) {
    return Status::InvalidArgument("the session is empty and input_ids is empty: nothing to continue from");
  }
  return Status::Ok();
}

}  // namespace

TurnResult StartGenerateTurn(EngineState& state, const Work& work, GenerateTurnArgs args,
                             TurnCallbacks callbacks) {
  StatusOr<sessions::Session*> found = state.sessions.Find(args.session_id, work.owner);
  if (!found.ok()) return found.status();
  sessions::Session& session = **found;
  NIELS_RETURN_IF_ERROR(CheckFits(session, args, state.config().context));

  sessions::Session::Snapshot snapshot = session.TakeSnapshot();
  const GenerateOptions& options = args.options;
  // Continuing a fully cached session recomputes its last position (generator.h): keep a copy so a
  // cancel restores the cache length exactly.
  if (options.use_kv_cache && args.input.empty() && options.max_new_tokens > 0 &&
      session.cached_tokens() == session.length()) {
    session.StashCacheCopy(snapshot);
  }
  const int64_t final_length = session.length() + static_cast<int64_t>(args.input.size()) + options.max_new_tokens;
  bool must_wait = false;
  const Status ready = PrepareCache(state, session, snapshot, options.use_kv_cache, final_length, &must_wait);
  if (!ready.ok() || must_wait) {
    session.Restore(std::move(snapshot));
    if (!ready.ok()) return ready;
    return TurnStart{nullptr, /*wait_for_memory=*/true};
  }
  return TurnStart{std::make_unique<Turn>(state, work, session, std::move(snapshot), std::move(args.input),
                                          std::move(args.options), std::move(callbacks))};
}

}  // namespace niels::daemon::engine
