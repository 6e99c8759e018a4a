#pragma once
// niels-inspect --weight-stats: the statistics of the tensors that name patterns select, printed
// from a loaded model with the daemon's own code (loaders/tensor_names.h for the names,
// model/tensor_statistics.h for the math; proto/PROTOCOL.md, "Weight statistics", defines them).
// No daemon is needed and no request budget applies.

#include <ostream>
#include <string>
#include <vector>

#include "common/status.h"
#include "daemon/loaders/model_loader.h"

namespace niels::tools {

// Prints, for each selected tensor in the model's order, one line with its Hugging Face and GGUF
// names, shape, dtype and parameter count, one line of compact statistics ("mean=... std=... min=...
// max=... l2_norm=...") and with `full` two more (the rest, then the histogram's range and counts);
// numbers with 9 significant digits. INVALID_ARGUMENT naming "--weight-stats[i]" for a pattern that
// matches nothing.
common::Status PrintWeightStats(const daemon::loaders::Model& model, const std::vector<std::string>& patterns,
                                bool full, std::ostream& out);

}  // namespace niels::tools
