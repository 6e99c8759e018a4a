#pragma once
// NielsNamed: a niels_gpt model's tensors under niels_gpt's own names, for the loader tests.

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "daemon/loaders/niels_dir.h"
#include "daemon/model/weights.h"

namespace niels::daemon::loaders {

// The tensors of niels_gpt weights under niels_gpt's state_dict names, in its order.
inline std::vector<std::pair<std::string, model::Tensor>> NielsNamed(const model::Weights& w) {
  std::map<std::string, model::Tensor> ours;
  w.ForEach([&](const std::string& name, const model::Tensor& t) { ours[name] = t; });
  std::vector<std::pair<std::string, model::Tensor>> named;
  for (const auto& [our_name, niels_name] : NielsTensorNames(static_cast<int64_t>(w.blocks.size()))) {
    named.emplace_back(niels_name, ours.at(our_name));
  }
  return named;
}

}  // namespace niels::daemon::loaders
