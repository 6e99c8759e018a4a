#pragma once
// llama.cpp's own type selection, for quant_recipe_test: libllama of node-llama-cpp 3.21.1
// (scripts/install_references.sh; NIELS_LLAMA_LIB is its path, set by CMake) exports the hooks its
// test-quant-type-selection uses -- llama_quant_model_from_metadata (a model of given
// hyperparameters, no weights), llama_quant_init and llama_quant_compute_types (the types
// llama_model_quantize would give a list of tensors) -- with C++ linkage, so they are looked up by
// their mangled names. The structs below are the C layouts of that version's llama.h,
// llama-ext.h and ggml.h. Tensors are made with libggml-base's ggml_new_tensor (no data).
// Test code; one LlamaQuantReference per test suite.

#include <dlfcn.h>

#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#ifndef NIELS_LLAMA_LIB
#error "NIELS_LLAMA_LIB: the path of node-llama-cpp's libllama (tests/CMakeLists.txt)"
#endif

namespace niels::tools::quantize::reference {

// llama-ext.h's llama_quant_model_desc.
struct LlamaQuantModelDesc {
  const char* architecture;
  uint32_t n_embd, n_ff, n_layer, n_head, n_head_kv, n_expert, n_embd_head_k, n_embd_head_v;
};

// llama.h's llama_model_quantize_params.
struct LlamaQuantizeParams {
  int32_t nthread;
  int32_t ftype;
  int32_t output_tensor_type;
  int32_t token_embedding_type;
  bool allow_requantize, quantize_output_tensor, only_copy, pure, keep_split, dry_run;
  const void* imatrix;
  const void* kv_overrides;
  const void* tt_overrides;
  const int32_t* prune_layers;
  size_t max_buf_size;
};

struct GgmlInitParams {
  size_t mem_size;
  void* mem_buffer;
  bool no_alloc;
};

// One tensor as the reference sees it: ggml type id and ne[] (GGUF order).
struct ReferenceTensor {
  std::string name;
  uint32_t ggml_type;
  std::vector<int64_t> dims;
};

class LlamaQuantReference {
 public:
  LlamaQuantReference() {
    llama_ = dlopen(NIELS_LLAMA_LIB, RTLD_NOW | RTLD_LOCAL);
    if (llama_ == nullptr) {
      ADD_FAILURE() << dlerror() << " (install it with scripts/install_references.sh)";
      return;
    }
    const std::string dir = std::string(NIELS_LLAMA_LIB).substr(0, std::string(NIELS_LLAMA_LIB).rfind('/'));
    ggml_ = dlopen((dir + "/libggml-base.so").c_str(), RTLD_NOW | RTLD_LOCAL);
    if (ggml_ == nullptr) {
      ADD_FAILURE() << dlerror();
      return;
    }
    Bind(llama_, "llama_log_set", &log_set_);
    Bind(llama_, "llama_model_quantize_default_params", &default_params_);
    Bind(llama_, "llama_model_free", &model_free_);
    Bind(llama_, "_Z31llama_quant_model_from_metadataPK22llama_quant_model_desc", &model_from_metadata_);
    Bind(llama_, "_Z16llama_quant_initPK11llama_modelPK27llama_model_quantize_params", &quant_init_);
    Bind(llama_, "_Z16llama_quant_freeP19quantize_state_impl", &quant_free_);
    Bind(llama_, "_Z25llama_quant_compute_typesP19quantize_state_impl11llama_ftypePP11ggml_tensorP9ggml_typem",
         &compute_types_);
    Bind(llama_, "_Z38llama_quant_tensor_allows_quantizationPK19quantize_state_implPK11ggml_tensor",
         &allows_quantization_);
    Bind(ggml_, "ggml_init", &ggml_init_);
    Bind(ggml_, "ggml_free", &ggml_free_);
    Bind(ggml_, "ggml_new_tensor", &new_tensor_);
    Bind(ggml_, "ggml_set_name", &set_name_);
    Bind(ggml_, "ggml_tensor_overhead", &tensor_overhead_);
    if (log_set_ != nullptr) log_set_([](int, const char*, void*) {}, nullptr);  // no fallback warnings
  }
  LlamaQuantReference(const LlamaQuantReference&) = delete;
  LlamaQuantReference& operator=(const LlamaQuantReference&) = delete;

  bool ok() const { return compute_types_ != nullptr && new_tensor_ != nullptr && tensor_overhead_ != nullptr; }

  // llama.cpp's output type of each tensor for file type `ftype` (llama_ftype), with
  // llama-quantize's default parameters, the tensors walked in the order given (llama_model_quantize
  // walks them sorted by layer, then name). allows[i]: llama_quant_tensor_allows_quantization.
  std::vector<uint32_t> Types(const LlamaQuantModelDesc& desc, int32_t ftype, const std::vector<ReferenceTensor>& ts,
                              std::vector<bool>* allows) {
    void* model = model_from_metadata_(&desc);
    LlamaQuantizeParams params = default_params_();  // kept alive: the state points at it
    void* state = quant_init_(model, &params);
    GgmlInitParams init{ts.size() * tensor_overhead_() + 1024, nullptr, true};
    void* ctx = ggml_init_(init);
    std::vector<void*> tensors;
    allows->clear();
    for (const ReferenceTensor& t : ts) {
      void* tensor = new_tensor_(ctx, static_cast<int>(t.ggml_type), static_cast<int>(t.dims.size()), t.dims.data());
      set_name_(tensor, t.name.c_str());
      tensors.push_back(tensor);
      allows->push_back(allows_quantization_(state, tensor));
    }
    std::vector<int32_t> types(ts.size());
    compute_types_(state, ftype, tensors.data(), types.data(), tensors.size());
    ggml_free_(ctx);
    quant_free_(state);
    model_free_(model);
    return std::vector<uint32_t>(types.begin(), types.end());
  }

 private:
  template <typename Fn>
  void Bind(void* library, const char* name, Fn* out) {
    *out = reinterpret_cast<Fn>(dlsym(library, name));
    if (*out == nullptr) ADD_FAILURE() << "no symbol " << name << " in " << NIELS_LLAMA_LIB;
  }

  void* llama_ = nullptr;
  void* ggml_ = nullptr;
  void (*log_set_)(void (*)(int, const char*, void*), void*) = nullptr;
  LlamaQuantizeParams (*default_params_)() = nullptr;
  void (*model_free_)(void*) = nullptr;
  void* (*model_from_metadata_)(const LlamaQuantModelDesc*) = nullptr;
  void* (*quant_init_)(const void*, const LlamaQuantizeParams*) = nullptr;
  void (*quant_free_)(void*) = nullptr;
  void (*compute_types_)(void*, int32_t, void**, int32_t*, size_t) = nullptr;
  bool (*allows_quantization_)(const void*, const void*) = nullptr;
  void* (*ggml_init_)(GgmlInitParams) = nullptr;
  void (*ggml_free_)(void*) = nullptr;
  void* (*new_tensor_)(void*, int, int, const int64_t*) = nullptr;
  void* (*set_name_)(void*, const char*) = nullptr;
  size_t (*tensor_overhead_)() = nullptr;
};

}  // namespace niels::tools::quantize::reference
