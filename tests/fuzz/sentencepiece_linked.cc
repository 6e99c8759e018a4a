// LoadSentencePieceRuntime for fuzz targets and their replays that load neither libtorch nor the
// system libprotobuf: they link libsentencepiece normally instead of dlopen()ing it
// (daemon/model/sentencepiece_runtime.cc).
//
// Why: the runtime dlopen()s with RTLD_DEEPBIND to keep SentencePiece's bundled protobuf apart from
// libtorch's, and AddressSanitizer refuses RTLD_DEEPBIND (it aborts the process). Without libtorch
// and libprotobuf in the process there is no second protobuf to clash with, so the plain link is safe and these
// targets run under ASan. (The system libprotobuf clashes just the same, so these targets must not
// link niels_common/niels_proto: a version check aborts at start-up if they do.) Targets that load libtorch (model_dir, request) keep the real runtime
// and therefore run without ASan (UBSan and libFuzzer's own checks only).
#include "daemon/model/sentencepiece_runtime.h"

namespace niels::daemon::model {

common::Status LoadSentencePieceRuntime() { return common::Status::Ok(); }

}  // namespace niels::daemon::model
