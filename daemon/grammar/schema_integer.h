#pragma once
// Integer ranges as GBNF, for the schema compiler's integer minimum/maximum (json_schema.h).
// Internal to the grammar room.

#include <string>

#include "common/status.h"

namespace niels::daemon::grammar {

// Bounds of an integer schema, inclusive. Values are clamped to +-(10^16 - 1), the 16 digits the
// JSON number rules generate.
struct IntegerBounds {
  double min = -1e16;
  double max = 1e16;
};

// A GBNF expression matching exactly the canonical decimal forms (no leading zeros, no "-0",
// no "+") of the integers in [min, max]. INVALID_ARGUMENT when the range is empty.
common::StatusOr<std::string> IntegerRangeGbnf(const IntegerBounds& bounds);

}  // namespace niels::daemon::grammar
