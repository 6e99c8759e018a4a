#include "daemon/text/chat_template.h"

#include <string>

#include "daemon/text/chat_format.h"

namespace niels::daemon::text {
namespace {

int32_t RoleId(const text::SpecialTokens& special, Role role) {
  switch (role) {
    case Role::kSystem:
      return special.sys;
    case Role::kUser:
      return special.usr;
    case Role::kAssistant:
      return special.asst;
    case Role::kTool:
      return -1;
  }
  return special.usr;  // unreachable: every Role is handled above
}

}  // namespace

common::StatusOr<std::vector<int32_t>> EncodeMessage(const Tokenizer& tokenizer, const SpecialTokens& special, Role role,
                                                     std::string_view content) {
  if (RoleId(special, role) < 0) {
    return common::Status::InvalidArgument("the token-native chat format has no " + std::string(RoleName(role)) +
                                           " role");
  }
  common::StatusOr<std::vector<int32_t>> ids = tokenizer.Encode(content);  // special literals stay plain text
  if (!ids.ok()) return ids;
  ids->insert(ids->begin(), RoleId(special, role));
  ids->push_back(special.eot);
  return ids;
}

std::vector<int32_t> GenerationPrompt(const SpecialTokens& special) { return {special.asst}; }

std::vector<int32_t> DefaultBannedIds(const SpecialTokens& special) { return {special.sys, special.usr, special.asst}; }

}  // namespace niels::daemon::text
