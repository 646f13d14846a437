// Reads one JSON string per line on stdin and prints its token ids as a JSON array per line (used by
// scripts/validate-tokenizer.sh and scripts/oracle-tokenizer.sh to compare with other implementations).
//   specdec_tokenize_tool MODEL.gguf [--parse-special] [--add-special] [--check-decode] [--hex]
// --hex: each line is the text's bytes in hexadecimal instead (any bytes, not only valid UTF-8).
// --add-special adds what the model asks for (BOS, EOS); --check-decode counts texts that do not decode back to themselves
// (not checked where a SentencePiece vocabulary puts a space in front, or a byte has no token).
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "specdec/models/gguf.hpp"
#include "specdec/models/tokenizer.hpp"

namespace {
std::string from_hex(const std::string& line) {
  const auto digit = [&](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    throw std::runtime_error("--hex: a line holds a character that is not a hexadecimal digit");
  };
  if (line.size() % 2 != 0) throw std::runtime_error("--hex: a line has an odd number of hexadecimal digits");
  std::string out(line.size() / 2, '\0');
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<char>(digit(line[2 * i]) * 16 + digit(line[2 * i + 1]));
  return out;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL.gguf [--parse-special] [--add-special] [--check-decode] [--hex]\n", argv[0]);
    return 2;
  }
  bool parse_special = false, add_special = false, check_decode = false, hex = false;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--parse-special") parse_special = true;
    else if (a == "--add-special") add_special = true;
    else if (a == "--check-decode") check_decode = true;
    else if (a == "--hex") hex = true;
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
      const std::string text = hex ? from_hex(line) : nlohmann::json::parse(line).get<std::string>();
      const auto ids = tok.encode(text, {.add_special = add_special, .parse_special = parse_special});
      if (check_decode && !add_special && !tok.add_space_prefix()) {
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
