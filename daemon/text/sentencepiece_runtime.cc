// Run-time loading of SentencePiece, isolated from libprotobuf: see sentencepiece_runtime.h.
//
// Each forwarder below is defined under the exact mangled name of a sentencepiece function (GCC asm
// label) and has the same x86-64 Itanium ABI: a member function is a free function taking `this`
// first; a class-type return value (util::Status, std::string) travels through the hidden return
// pointer in both cases, and guaranteed copy elision passes ours straight through.

#include "daemon/text/sentencepiece_runtime.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

namespace niels::daemon::text {
namespace {

constexpr const char* kLibrary = "libsentencepiece_train.so.0";  // depends on libsentencepiece.so.0

struct Runtime {
  void* handle = nullptr;
  std::string error;
};

// Whether this process runs under AddressSanitizer or ThreadSanitizer (its runtime is in the
// executable or in a library loaded with it). Decided at run time: niels_text itself may be built
// without a sanitizer while the program linking it has one (the fuzz targets).
bool UnderSanitizer() {
  return dlsym(RTLD_DEFAULT, "__asan_init") != nullptr || dlsym(RTLD_DEFAULT, "__tsan_init") != nullptr;
}

// Under a sanitizer: the bridge library (daemon/text/sanitizer/sentencepiece_sanitizer_bridge.cc
// says why), through libc's own dlopen, since the sanitizer's interceptor refuses RTLD_DEEPBIND.
void* OpenUnderSanitizer(std::string* error) {
#ifdef NIELS_SPM_SANITIZER_BRIDGE
  // libc's own dlopen: the interceptor is in the executable (clang) or in libasan.so/libtsan.so
  // (g++), so look it up in libc itself.
  using DlopenFn = void* (*)(const char*, int);
  void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  const auto libc_dlopen = reinterpret_cast<DlopenFn>(libc ? dlsym(libc, "dlopen") : nullptr);
  void* handle = libc_dlopen ? libc_dlopen(NIELS_SPM_SANITIZER_BRIDGE, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND) : nullptr;
  if (handle == nullptr) {
    const char* e = libc_dlopen ? dlerror() : "libc's dlopen not found";
    *error = std::string("cannot load ") + NIELS_SPM_SANITIZER_BRIDGE + ": " + (e ? e : "unknown error");
  }
  return handle;
#else
  *error = std::string("cannot load ") + kLibrary +
           " under a sanitizer: this build has no SentencePiece sanitizer bridge (configure with "
           "NIELSD_SANITIZE=address or thread, or NIELSD_FUZZ=ON)";
  return nullptr;
#endif
}

const Runtime& GetRuntime() {
  static std::once_flag once;
  static Runtime runtime;  // trivially destructible apart from the string; never unloaded
  std::call_once(once, [] {
    if (UnderSanitizer()) {
      runtime.handle = OpenUnderSanitizer(&runtime.error);
      return;
    }
    runtime.handle = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (runtime.handle == nullptr) {
      const char* e = dlerror();
      runtime.error = std::string("cannot load ") + kLibrary + ": " + (e ? e : "unknown error");
    }
  });
  return runtime;
}

void* Symbol(const char* mangled) {
  const Runtime& rt = GetRuntime();
  void* sym = rt.handle ? dlsym(rt.handle, mangled) : nullptr;
  if (sym == nullptr) {
    std::fprintf(stderr, "nielsd: sentencepiece runtime: %s; missing symbol %s\n",
                 rt.handle ? "library loaded" : rt.error.c_str(), mangled);
    std::abort();
  }
  return sym;
}

}  // namespace

common::Status LoadSentencePieceRuntime() {
  const Runtime& rt = GetRuntime();
  if (rt.handle == nullptr) return common::Status::Internal(rt.error);
  return common::Status::Ok();
}

}  // namespace niels::daemon::text

// NIELS_SPM_FORWARD(Ret, name, "mangled", (params), (args)): defines `name` under the symbol
// "mangled", forwarding to the same symbol in the isolated library.
#define NIELS_SPM_FORWARD(Ret, name, mangled, params, args)                                    \
  Ret name params __asm__(mangled);                                                            \
  Ret name params {                                                                            \
    using Fn = Ret(*) params;                                                                  \
    static const Fn fn = reinterpret_cast<Fn>(::niels::daemon::text::Symbol(mangled));       \
    return fn args;                                                                            \
  }

namespace niels::daemon::text::spm_forward {

using sentencepiece::SentenceIterator;
using sentencepiece::util::Status;
using Kwargs = std::unordered_map<std::string, std::string>;

// --- util::Status ---
NIELS_SPM_FORWARD(void, StatusCtor, "_ZN13sentencepiece4util6StatusC1Ev", (void* self), (self))
NIELS_SPM_FORWARD(void, StatusCopyCtor, "_ZN13sentencepiece4util6StatusC1ERKS1_",
                  (void* self, const void* other), (self, other))
NIELS_SPM_FORWARD(void, StatusDtor, "_ZN13sentencepiece4util6StatusD1Ev", (void* self), (self))
NIELS_SPM_FORWARD(void, StatusAssign, "_ZN13sentencepiece4util6StatusaSERKS1_",
                  (void* self, const void* other), (self, other))
NIELS_SPM_FORWARD(std::string, StatusToString, "_ZNK13sentencepiece4util6Status8ToStringB5cxx11Ev",
                  (const void* self), (self))
NIELS_SPM_FORWARD(int, StatusCode, "_ZNK13sentencepiece4util6Status4codeEv", (const void* self), (self))
NIELS_SPM_FORWARD(const char*, StatusMessage, "_ZNK13sentencepiece4util6Status13error_messageEv",
                  (const void* self), (self))

// --- SentencePieceProcessor ---
NIELS_SPM_FORWARD(void, ProcessorCtor, "_ZN13sentencepiece22SentencePieceProcessorC1Ev", (void* self), (self))
NIELS_SPM_FORWARD(void, ProcessorDtor, "_ZN13sentencepiece22SentencePieceProcessorD1Ev", (void* self), (self))
NIELS_SPM_FORWARD(void, ProcessorDeletingDtor, "_ZN13sentencepiece22SentencePieceProcessorD0Ev",
                  (void* self), (self))
NIELS_SPM_FORWARD(Status, ProcessorLoad,
                  "_ZN13sentencepiece22SentencePieceProcessor4LoadESt17basic_string_viewIcSt11char_traitsIcEE",
                  (void* self, std::string_view file), (self, file))
NIELS_SPM_FORWARD(Status, ProcessorLoadFromSerializedProto,
                  "_ZN13sentencepiece22SentencePieceProcessor23LoadFromSerializedProtoESt17basic_string_"
                  "viewIcSt11char_traitsIcEE",
                  (void* self, std::string_view proto), (self, proto))
NIELS_SPM_FORWARD(Status, ProcessorEncodeIds,
                  "_ZNK13sentencepiece22SentencePieceProcessor6EncodeESt17basic_string_viewIcSt11char_"
                  "traitsIcEEPSt6vectorIiSaIiEE",
                  (const void* self, std::string_view text, std::vector<int>* ids), (self, text, ids))
NIELS_SPM_FORWARD(Status, ProcessorDecodeIds,
                  "_ZNK13sentencepiece22SentencePieceProcessor6DecodeERKSt6vectorIiSaIiEEPNSt7__cxx1112basic_"
                  "stringIcSt11char_traitsIcESaIcEEE",
                  (const void* self, const std::vector<int>& ids, std::string* text), (self, ids, text))
NIELS_SPM_FORWARD(int, ProcessorGetPieceSize, "_ZNK13sentencepiece22SentencePieceProcessor12GetPieceSizeEv",
                  (const void* self), (self))
NIELS_SPM_FORWARD(int, ProcessorPieceToId,
                  "_ZNK13sentencepiece22SentencePieceProcessor9PieceToIdESt17basic_string_viewIcSt11char_"
                  "traitsIcEE",
                  (const void* self, std::string_view piece), (self, piece))
NIELS_SPM_FORWARD(const std::string&, ProcessorIdToPiece,
                  "_ZNK13sentencepiece22SentencePieceProcessor9IdToPieceB5cxx11Ei", (const void* self, int id),
                  (self, id))
NIELS_SPM_FORWARD(bool, ProcessorIsControl, "_ZNK13sentencepiece22SentencePieceProcessor9IsControlEi",
                  (const void* self, int id), (self, id))
NIELS_SPM_FORWARD(bool, ProcessorIsUnknown, "_ZNK13sentencepiece22SentencePieceProcessor9IsUnknownEi",
                  (const void* self, int id), (self, id))
NIELS_SPM_FORWARD(bool, ProcessorIsByte, "_ZNK13sentencepiece22SentencePieceProcessor6IsByteEi",
                  (const void* self, int id), (self, id))
NIELS_SPM_FORWARD(int, ProcessorUnkId, "_ZNK13sentencepiece22SentencePieceProcessor6unk_idEv",
                  (const void* self), (self))

// --- SentencePieceTrainer ---
NIELS_SPM_FORWARD(Status, TrainerTrainKwargs,
                  "_ZN13sentencepiece20SentencePieceTrainer5TrainERKSt13unordered_mapINSt7__cxx1112basic_"
                  "stringIcSt11char_traitsIcESaIcEEES7_St4hashIS7_ESt8equal_toIS7_ESaISt4pairIKS7_S7_EEEPNS_"
                  "16SentenceIteratorEPS7_",
                  (const Kwargs& kwargs, SentenceIterator* it, std::string* proto), (kwargs, it, proto))
NIELS_SPM_FORWARD(Status, TrainerTrainArgs,
                  "_ZN13sentencepiece20SentencePieceTrainer5TrainESt17basic_string_viewIcSt11char_traitsIcEE"
                  "PNS_16SentenceIteratorEPNSt7__cxx1112basic_stringIcS3_SaIcEEE",
                  (std::string_view args, SentenceIterator* it, std::string* proto), (args, it, proto))

}  // namespace niels::daemon::text::spm_forward
