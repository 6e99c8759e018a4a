// libniels_spm_sanitizer_bridge.so: how SentencePiece is loaded in a process running under
// AddressSanitizer or ThreadSanitizer (sanitizer and fuzz builds only; never installed). See
// daemon/text/sentencepiece_runtime.h for why SentencePiece is dlopen()ed with RTLD_DEEPBIND.
//
// Both sanitizers' dlopen interceptors refuse RTLD_DEEPBIND (the sanitizer runtime dies with "You
// are trying to dlopen a shared library with RTLD_DEEPBIND flag which is incompatible with
// sanitizer runtime"), and for a reason: a library bound that way resolves the allocation
// functions to its own dependencies (libstdc++'s operator new, which then calls the sanitizer's
// malloc) instead of the sanitizer's replacements in the executable or its runtime library, so
// memory that crosses between SentencePiece and our code (the std::vector<int> that Encode fills,
// the strings Decode writes) is allocated as "malloc" and freed as "operator delete": ASan reports
// alloc-dealloc-mismatch on the first Encode.
//
// This library is linked against libsentencepiece_train.so.0 (and so libsentencepiece.so.0) and
// defines the replaceable operator new and delete forms those libraries import, forwarding each to
// the main program's definition (the sanitizer's). The runtime dlopen()s this library instead of
// libsentencepiece_train.so.0, with RTLD_DEEPBIND, through libc's dlopen rather than the
// sanitizer's interceptor: RTLD_DEEPBIND puts this library's search list (this library first, then
// SentencePiece and its dependencies) ahead of the global scope for every lookup SentencePiece
// makes, so its bundled protobuf-lite stays isolated from the system libprotobuf as in a normal
// build, and its operator new and delete are these forwarders, so every allocation is the
// sanitizer's. Other libc functions SentencePiece calls (its mutexes among them) bind to libc
// directly: unchecked, as in any uninstrumented library. ThreadSanitizer therefore sees no access
// SentencePiece makes; it still sees every access our code makes to what SentencePiece returns.
#include <dlfcn.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <new>

namespace {

// The main program's definition of `mangled` (dlopen(nullptr) searches the executable first).
void* MainProgramSymbol(const char* mangled) {
  static void* const main_program = dlopen(nullptr, RTLD_NOW);
  void* symbol = main_program ? dlsym(main_program, mangled) : nullptr;
  if (symbol == nullptr) {
    std::fprintf(stderr, "sentencepiece sanitizer bridge: %s not found in the main program\n", mangled);
    std::abort();
  }
  return symbol;
}

template <typename Fn>
Fn Forward(const char* mangled) {
  return reinterpret_cast<Fn>(MainProgramSymbol(mangled));
}

}  // namespace

void* operator new(std::size_t size) {
  static const auto fn = Forward<void* (*)(std::size_t)>("_Znwm");
  return fn(size);
}
void* operator new[](std::size_t size) {
  static const auto fn = Forward<void* (*)(std::size_t)>("_Znam");
  return fn(size);
}
void* operator new(std::size_t size, const std::nothrow_t& tag) noexcept {
  static const auto fn = Forward<void* (*)(std::size_t, const std::nothrow_t&)>("_ZnwmRKSt9nothrow_t");
  return fn(size, tag);
}
void* operator new[](std::size_t size, const std::nothrow_t& tag) noexcept {
  static const auto fn = Forward<void* (*)(std::size_t, const std::nothrow_t&)>("_ZnamRKSt9nothrow_t");
  return fn(size, tag);
}
void operator delete(void* p) noexcept {
  static const auto fn = Forward<void (*)(void*)>("_ZdlPv");
  fn(p);
}
void operator delete[](void* p) noexcept {
  static const auto fn = Forward<void (*)(void*)>("_ZdaPv");
  fn(p);
}
void operator delete(void* p, std::size_t size) noexcept {
  static const auto fn = Forward<void (*)(void*, std::size_t)>("_ZdlPvm");
  fn(p, size);
}
void operator delete[](void* p, std::size_t size) noexcept {
  static const auto fn = Forward<void (*)(void*, std::size_t)>("_ZdaPvm");
  fn(p, size);
}
