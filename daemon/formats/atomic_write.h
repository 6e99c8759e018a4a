#pragma once
// WriteFileAtomically: a model file is written whole or not at all. The bytes go to a temporary
// file beside `path` (same directory, so the rename stays on one file system), which is renamed
// over `path` once every byte is written; a reader never sees a half-written file.

#include <filesystem>
#include <functional>
#include <ostream>

#include "common/status.h"

namespace niels::daemon::formats {

// Calls write(stream) on a temporary file beside `path` and renames it to `path`. INTERNAL naming
// `path` when the stream fails or the rename does; the temporary file is removed then.
common::Status WriteFileAtomically(const std::filesystem::path& path, const std::function<void(std::ostream&)>& write);

}  // namespace niels::daemon::formats
