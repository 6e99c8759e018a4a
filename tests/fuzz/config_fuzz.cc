// Fuzz target: config.json parsing (daemon/model/config.h, ParseModelConfig).
//
// Input: the file's text. Invariants: an accepted config has every dimension in range, C divisible
// by H and an even head dim, a finite positive rope_theta; and ModelConfigToJson of it parses back
// to the same config.
#include <cmath>
#include <string_view>

#include "daemon/model/config.h"
#include "tests/fuzz/fuzz_util.h"

using niels::daemon::model::ModelConfig;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto parsed = niels::daemon::model::ParseModelConfig(text, "config.json");
  if (!parsed.ok()) {
    FUZZ_CHECK(!parsed.status().message().empty());
    return 0;
  }
  const ModelConfig& c = *parsed;
  for (int64_t dim : {c.vocab_size, c.context, c.width, c.layers, c.heads, c.d_ff}) {
    FUZZ_CHECK(dim >= 1 && dim <= (int64_t{1} << 24));
  }
  FUZZ_CHECK(c.width % c.heads == 0 && c.head_dim() % 2 == 0);
  FUZZ_CHECK(std::isfinite(c.rope_theta) && c.rope_theta > 0);
  auto again = niels::daemon::model::ParseModelConfig(niels::daemon::model::ModelConfigToJson(c), "again");
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(again->vocab_size == c.vocab_size && again->context == c.context &&
             again->width == c.width && again->layers == c.layers && again->heads == c.heads &&
             again->d_ff == c.d_ff && again->rope_theta == c.rope_theta && again->name == c.name);
  return 0;
}
