#pragma once
// SentencePiece is loaded at run time, isolated from libtorch's protobuf.
//
// Why: Debian's libsentencepiece.so bundles (and exports) its own protobuf-lite 3.14, while libtorch
// loads the system libprotobuf 3.21. If libsentencepiece is linked normally, the two copies share
// one global symbol namespace: libprotobuf's static initialisers bind to sentencepiece's copies
// and every program crashes before main() (SIGSEGV in ReflectionOps::FindInitializationErrors),
// or, in the other link order, sentencepiece runs on the wrong protobuf's internals.
//
// So niels_model does not link libsentencepiece. sentencepiece_runtime.cc dlopen()s
// libsentencepiece_train.so.0 (which pulls in libsentencepiece.so.0) with RTLD_LOCAL |
// RTLD_DEEPBIND, so those libraries bind to their own protobuf copy and never enter the global
// namespace, and defines the few sentencepiece C++ entry points our code calls (constructors,
// non-virtual calls, Status) as forwarders to the dlsym()'d originals. Code keeps using
// <sentencepiece_processor.h> and <sentencepiece_trainer.h> as usual; a call to an entry point not
// forwarded yet shows up as an undefined symbol at link time (add it to sentencepiece_runtime.cc).
//
// AddressSanitizer and ThreadSanitizer refuse RTLD_DEEPBIND. Under either (detected at run time) the
// runtime loads libniels_spm_sanitizer_bridge.so instead, which sanitizer and fuzz builds make (see
// daemon/text/sanitizer/sentencepiece_sanitizer_bridge.cc); other builds report an error there.

#include "common/status.h"

namespace niels::daemon::text {

// Loads the libraries once (thread-safe). OK, or INTERNAL naming the library and dlerror().
// The forwarders abort with a message if they are called when loading failed.
common::Status LoadSentencePieceRuntime();

}  // namespace niels::daemon::text
