#pragma once
// ModelFingerprint: a short identity of a model directory, stored with every session and KV spill
// file, so that a session written by one model is never run on another (its token ids would mean
// other text, its cached keys other numbers).
//
// It hashes (XXH3-128) each file's name and size and its contents: whole for files up to 1 MiB
// (config.json, tokenizer.model), else the first 1 MiB (a safetensors header with every tensor's
// name, dtype and offset), 64 blocks of 4 KiB spread evenly over the rest and the last 4 KiB. So a
// retrained checkpoint of the same shape changes it, while a start-up reads well under 2 MiB.
//
// Thread-safe.

#include <filesystem>
#include <string>
#include <vector>

#include "common/status.h"

namespace niels::daemon::state {

// 32 lowercase hex digits. INVALID_ARGUMENT naming the file when one cannot be read.
common::StatusOr<std::string> ModelFingerprint(const std::vector<std::filesystem::path>& files);

}  // namespace niels::daemon::state
