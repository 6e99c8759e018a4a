#pragma once
// RenderLimits: the bounds of one render (see template.h and README.md, "Limits").

#include <cstddef>
#include <cstdint>

namespace niels::daemon::text::jinja {

// Bounds on what one render may do. A chat template from a model file is untrusted input: these
// keep a hostile one from using unbounded time or memory. Defaults are far above what real chat
// templates need (a 10-turn Qwen3 render: about a hundred loop iterations, 2 KB of output).
struct RenderLimits {
  // Bytes of output, and of any one string or serialized value made during the render.
  size_t max_output_bytes = 8u << 20;
  // Items in any one list made during the render (`[x] * n`, range(), filters).
  size_t max_list_items = 1u << 20;
  // Loop iterations of the whole render (nested loops count every inner iteration).
  int64_t max_loop_iterations = 1'000'000;
  // Nested macro calls (recursion included).
  int max_call_depth = 32;
  // Work units for the whole render: one per expression evaluated plus one per byte of every
  // string built. Bounds CPU time (e.g. a loop that copies a megabyte string each iteration).
  int64_t max_work = 50'000'000;
};

}  // namespace niels::daemon::text::jinja
