#include "daemon/engine/sampled_replies.h"

#include <algorithm>

namespace niels::daemon::engine {

namespace {

bool IsStop(int32_t id, std::span<const int32_t> stop_ids) {
  return std::find(stop_ids.begin(), stop_ids.end(), id) != stop_ids.end();
}

// One past each stop id of `ids`, in order: the ends of its complete segments.
std::vector<size_t> SegmentEnds(std::span<const int32_t> ids, std::span<const int32_t> stop_ids) {
  std::vector<size_t> ends;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (IsStop(ids[i], stop_ids)) ends.push_back(i + 1);
  }
  return ends;
}

}  // namespace

std::vector<int32_t> LastSegment(std::span<const int32_t> rendering, std::span<const int32_t> stop_ids) {
  const std::vector<size_t> ends = SegmentEnds(rendering, stop_ids);
  if (ends.empty()) return {};
  const size_t begin = ends.size() >= 2 ? ends[ends.size() - 2] : 0;
  return std::vector<int32_t>(rendering.begin() + static_cast<std::ptrdiff_t>(begin),
                              rendering.begin() + static_cast<std::ptrdiff_t>(ends.back()));
}

SplicedPrompt SpliceSampledReplies(std::span<const int32_t> history, std::span<const int32_t> rendering,
                                   std::span<const int32_t> stop_ids,
                                   std::span<const sessions::SampledReply> replies) {
  const std::vector<size_t> history_ends = SegmentEnds(history, stop_ids);
  const std::vector<size_t> rendering_ends = SegmentEnds(rendering, stop_ids);
  SplicedPrompt spliced;
  size_t next_reply = 0;
  size_t history_at = 0;    // where the next history segment begins
  size_t rendering_at = 0;  // and the rendering's
  bool replaced = false;    // a kept reply's ids differ from the rendering's
  for (size_t k = 0; k < history_ends.size() && k < rendering_ends.size(); ++k) {
    const std::span<const int32_t> ours = history.subspan(history_at, history_ends[k] - history_at);
    const std::span<const int32_t> theirs = rendering.subspan(rendering_at, rendering_ends[k] - rendering_at);
    while (next_reply < replies.size() && replies[next_reply].end < static_cast<int64_t>(history_ends[k])) ++next_reply;
    const bool at_reply = next_reply < replies.size() && replies[next_reply].end == static_cast<int64_t>(history_ends[k]);
    const bool reply_matches = at_reply && !replies[next_reply].rendering.empty() &&
                               std::ranges::equal(replies[next_reply].rendering, theirs);
    if (reply_matches) {
      // The sampled ids, ended on the template's own stop id (a model that ended on another one,
      // <|endoftext|> for <|im_end|>, never ran its stop id through the model).
      spliced.kept.push_back(replies[next_reply]);
      spliced.ids.insert(spliced.ids.end(), ours.begin(), ours.end() - 1);
      spliced.ids.push_back(theirs.back());
      replaced = replaced || !std::ranges::equal(ours, theirs);
    } else if (std::ranges::equal(ours, theirs)) {
      spliced.ids.insert(spliced.ids.end(), ours.begin(), ours.end());
    } else {
      break;
    }
    history_at = history_ends[k];
    rendering_at = rendering_ends[k];
  }
  if (!replaced) {
    spliced.ids.assign(rendering.begin(), rendering.end());
    return spliced;
  }
  spliced.ids.insert(spliced.ids.end(), rendering.begin() + static_cast<std::ptrdiff_t>(rendering_at), rendering.end());
  return spliced;
}

}  // namespace niels::daemon::engine
