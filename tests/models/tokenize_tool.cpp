// Reads one JSON string per line on stdin and prints its token ids as a JSON array per line (used by
// scripts/validate-tokenizer.sh to compare with an independent implementation).
//   specdec_tokenize_tool MODEL.gguf [--parse-special] [--check-decode]
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "specdec/models/gguf.hpp"
#include "specdec/models/tokenizer.hpp"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL.gguf [--parse-special] [--check-decode]\n", argv[0]);
    return 2;
  }
  bool parse_special = false, check_decode = false;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--parse-special") parse_special = true;
    else if (a == "--check-decode") check_decode = true;
    else {
      std::fprintf(stderr, "unknown option '%s'\n", argv[i]);
      return 2;
    }
  }
  try {
    const specdec::models::GgufFile file(argv[1]);
    const auto tok = specdec::models::Tokenizer::from_gguf(file);
    std::string line;
    int bad_round_trips = 0, not_representable = 0;
    while (std::getline(std::cin, line)) {
      const std::string text = nlohmann::json::parse(line).get<std::string>();
      const auto ids = tok.encode(text, {.add_special = false, .parse_special = parse_special});
      if (check_decode) {
        // Bytes without a token of their own are dropped (as the reference implementations do): such text cannot round-trip.
        const bool representable =
            std::all_of(text.begin(), text.end(), [&](char c) { return tok.has_byte_token(static_cast<unsigned char>(c)); });
        if (!representable) ++not_representable;
        else if (tok.decode(ids) != text) ++bad_round_trips;
      }
      std::cout << nlohmann::json(ids).dump() << '\n';
    }
    if (check_decode)
      std::fprintf(stderr, "round-trip failures: %d (texts with a byte the vocabulary lacks, not checked: %d)\n", bad_round_trips,
                   not_representable);
    return bad_round_trips == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
