// niels_make_test_tokenizer PATH: writes the tiny test tokenizer of tests/support
// (TrainTinyTokenizer: BPE, byte fallback, the four special tokens) to PATH and prints its vocabulary
// size on stdout, so script-driven tests (converter_roundtrip_test.py) can build a matching model.
// Exit status 0 on success, 1 with a message on stderr otherwise.

#include <exception>
#include <filesystem>
#include <iostream>

#include "tests/support/test_model.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: niels_make_test_tokenizer PATH\n";
    return 1;
  }
  try {
    const std::filesystem::path path(argv[1]);
    niels::testing::TrainTinyTokenizer(path);
    std::cout << niels::testing::TinyTokenizerVocabSize() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "niels_make_test_tokenizer: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
