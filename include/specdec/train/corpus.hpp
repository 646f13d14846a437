// specdec::train — Prompts from a text corpus: Python sources scanned for docstring paragraphs and functions, turned into chat prompts.
#pragma once

#include "specdec/train/records.hpp"

namespace specdec::train {

// --- prompts from the corpus ---------------------------------------------------------------------------------------------

/// Prose paragraphs (docstrings) and function bodies scraped from Python source files.
struct Corpus {
  std::vector<std::string> paragraphs;
  std::vector<std::string> functions;
};

std::string trim(const std::string& s);

bool is_ascii(const std::string& s);

void scan_python_file(const std::string& text, Corpus& c);

Corpus load_corpus(const std::vector<fs::path>& roots);

/// Varied chat prompts: summaries of corpus paragraphs, edits of corpus functions and general questions, shuffled with `seed`.
std::vector<std::string> make_prompts(const Corpus& c, std::size_t count, std::uint64_t seed,
                                             const std::set<std::string>& exclude);

}  // namespace specdec::train
