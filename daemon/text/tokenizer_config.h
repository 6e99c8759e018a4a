#pragma once
// Reading a Hugging Face tokenizer_config.json into a BpeSpec: the special tokens the model's
// files name and its chat template.

#include <string_view>

#include "common/status.h"
#include "daemon/text/bpe_spec.h"

namespace niels::daemon::text {

// Reads the text of a tokenizer_config.json into *spec: bos_token, eos_token and pad_token
// (strings, or objects with "content"; null or absent leave the id unset) looked up among the
// spec's pieces, add_bos_token (overrides what the post-processor implied) and chat_template (a
// string, or a list of {name, template} of which "default" is taken). INVALID_ARGUMENT naming the
// file and key if one has the wrong type or names a token the vocabulary lacks, or if the text is
// not JSON (with its line and column).
common::Status ApplyTokenizerConfigJson(std::string_view json, std::string_view source, BpeSpec* spec);

}  // namespace niels::daemon::text
