// LoadSentencePieceRuntime for fuzz targets and their replays that load neither libtorch nor the
// system libprotobuf (tokenizer, text_stream): they link libsentencepiece normally instead of
// dlopen()ing it (daemon/text/sentencepiece_runtime.cc).
//
// Why: without libtorch and libprotobuf in the process there is no second protobuf to clash with,
// so the plain link is safe, and these targets stay small, start fast and build in the torch-free
// sanitizer build. (The system libprotobuf clashes just the same, so these targets must not link
// niels_common/niels_proto: a version check aborts at start-up if they do.) Targets that load
// libtorch (safetensors, model_dir, request) use the real runtime, which under ASan loads
// SentencePiece through its bridge library.
#include "daemon/text/sentencepiece_runtime.h"

namespace niels::daemon::text {

common::Status LoadSentencePieceRuntime() { return common::Status::Ok(); }

}  // namespace niels::daemon::text
