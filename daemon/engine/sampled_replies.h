#pragma once
// Keeping the ids a model sampled for its own replies (docs/ARCHITECTURE.md, "Chat templates of
// the Llama family"). A template writes an assistant message its own way: a tool call as canonical
// JSON, a `<tool_call>` the model spelled in byte pieces as the one special id. A conversation that
// renders the reply differently from what the model wrote would re-prefill the reply and all after
// it at the next turn, although the model already read exactly those ids. The rule here: where the
// template writes the reply the same way as when it ended the conversation (so the reply means the
// same to the template; Qwen3, for one, writes the reasoning of a reply after the last user message
// and drops it once a new user message follows, which then re-prefills from that reply), the
// history's ids stand for it.
//
// Renderings are cut into segments at stop ids: a segment is what follows the previous stop id up
// to and including the next one (a message's header, text and end-of-turn id: templates write one
// end-of-turn id per message, and a content that types one is encoded as text). A sampled reply
// ends on its stop id, so its ids and the header before them form one segment of the history.

#include <cstdint>
#include <span>
#include <vector>

#include "daemon/sessions/session.h"

namespace niels::daemon::engine {

// The last complete segment of `rendering` (the ids after the last-but-one stop id up to and
// including the last one); empty when it holds no stop id.
std::vector<int32_t> LastSegment(std::span<const int32_t> rendering, std::span<const int32_t> stop_ids);

struct SplicedPrompt {
  std::vector<int32_t> ids;
  // The replies whose history ids stand in `ids` (a prefix of the given ones).
  std::vector<sessions::SampledReply> kept;
};

// The prompt of a turn: `rendering` (the template's rendering of the whole conversation) with its
// leading segments replaced by the history's where they agree. Walking the complete segments of
// `history` and `rendering` side by side, a segment is kept from the history when it equals the
// rendering's, or when it ends at a reply of `replies` (by `end`) whose `rendering` equals the
// rendering's segment; the first segment that is neither ends the walk, and `rendering` from that
// segment on follows. A kept reply's segment ends on the rendering's stop id (the model may have
// ended it on another stop id, whose key and value no step computed). Without any kept reply the
// result is `rendering` itself. `replies` are ordered by end; one with an empty `rendering` matches
// nothing.
SplicedPrompt SpliceSampledReplies(std::span<const int32_t> history, std::span<const int32_t> rendering,
                                   std::span<const int32_t> stop_ids,
                                   std::span<const sessions::SampledReply> replies);

}  // namespace niels::daemon::engine
