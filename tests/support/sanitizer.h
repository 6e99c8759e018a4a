#pragma once
// Whether this test binary is built with AddressSanitizer or ThreadSanitizer (GCC's and clang's
// ways of saying so).
//
// A few tests size their inputs for the algorithm's sake: a corpus of 10,000 lines per tokenizer,
// mebibyte-long lines, 200 rendered conversations. Under a sanitizer, where the point is memory and
// thread safety on inputs of every kind, they run a stated fraction of those inputs (same kinds,
// fewer or shorter); the normal build runs all of them. Each such test says what it runs where.

namespace niels::testing {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitizedBuild = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kSanitizedBuild = true;
#else
inline constexpr bool kSanitizedBuild = false;
#endif
#else
inline constexpr bool kSanitizedBuild = false;
#endif

// `full` in the normal build, `sanitized` under a sanitizer.
template <class T>
constexpr T UnlessSanitized(T full, T sanitized) {
  return kSanitizedBuild ? sanitized : full;
}

}  // namespace niels::testing
