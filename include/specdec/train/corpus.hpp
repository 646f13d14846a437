// specdec::train — Prompts from a text corpus: Python sources (docstring paragraphs, functions) and the texts of Debian
// packages (documentation, quotations, word lists, WordNet's nouns; scripts/fetch-corpus.sh installs them), turned into
// chat prompts of many kinds, plus questions the target writes itself (self-instruct); the prompts of examples/prompts
// and near copies of them are left out.
#pragma once

#include "specdec/train/records.hpp"

namespace specdec::train {

// --- prompts from the corpus ---------------------------------------------------------------------------------------------

/// The material prompts are made from. Every list may be empty (its kinds of prompt are then not made).
struct Corpus {
  std::vector<std::string> paragraphs;  // prose: docstrings, documentation, public-domain texts
  std::vector<std::string> functions;   // Python function bodies
  std::vector<std::string> quotes;      // short quotations and sayings
  std::vector<std::string> riddles;     // riddles (question only)
  std::vector<std::string> words;       // everyday words (story ingredients)
  std::vector<std::string> topics;      // common nouns (things to explain, write and talk about)
};

std::string trim(const std::string& s);

bool is_ascii(const std::string& s);

/// Common UTF-8 punctuation (curly quotes, dashes, ellipsis, non-breaking space) replaced by ASCII.
std::string ascii_punctuation(const std::string& s);

void scan_python_file(const std::string& text, Corpus& c);

/// Prose paragraphs of a plain-text or reStructuredText document: blocks between blank lines, unwrapped, markup roles
/// stripped; kept when 250-1400 characters of ASCII, at least 70% letters and not code or tables.
void scan_text_document(const std::string& text, Corpus& c);

/// fortune(6) data: entries between lines of "%"; the short ones (20-300 characters, ASCII, mostly letters) into
/// c.quotes, or c.riddles when `riddles`.
void scan_fortune_file(const std::string& text, Corpus& c, bool riddles);

Corpus load_corpus(const std::vector<fs::path>& roots);

/// A file's text; .gz files are decompressed. Throws specdec::error when it cannot be read.
std::string read_text_file(const fs::path& path);

/// Adds the texts of the Debian packages scripts/fetch-corpus.sh installs, found under `root` (the file system root on
/// an installed machine): Python's documentation sources, plain-text documentation (Debian Reference, the Debian
/// project documents, GNU standards, the Jargon File, the US Constitution and Declaration of Independence from
/// miscfiles), fortune data, the word list and WordNet's common nouns. Returns (source, items added) per source found.
std::vector<std::pair<std::string, std::size_t>> load_package_texts(Corpus& c, const fs::path& root = "/");

/// Leaves out prompts equal or close to a set of reference prompts: equal after case and punctuation are dropped, or with
/// word-trigram Jaccard similarity >= 0.5, or containing at least half the trigrams of a reference of 12 or more words.
class PromptExcluder {
 public:
  PromptExcluder() = default;
  explicit PromptExcluder(const std::vector<std::string>& references);
  bool excludes(const std::string& prompt) const;
  std::size_t size() const { return refs_.size(); }

 private:
  struct Ref {
    std::string normal;
    std::set<std::uint64_t> grams;
  };
  std::vector<Ref> refs_;
};

/// The lower-case words of `s` (letters and digits) joined by single spaces.
std::string normalise_words(const std::string& s);

/// Varied chat prompts from the corpus, shuffled with `seed`: summaries and other tasks on paragraphs, edits and
/// explanations of functions, code to write, quotations and riddles, explanations, advice, writing (emails, stories,
/// poems, letters), arithmetic word problems and open-ended chat. None is excluded by `exclude`; none repeats.
std::vector<std::string> make_prompts(const Corpus& c, std::size_t count, std::uint64_t seed, const PromptExcluder& exclude);

/// The same with an exact-text exclusion list (also left out when close, as PromptExcluder).
std::vector<std::string> make_prompts(const Corpus& c, std::size_t count, std::uint64_t seed,
                                      const std::set<std::string>& exclude);

/// Self-instruct: requests that ask the target to write one question or task (a question someone might ask about a
/// topic, a word problem, a coding task, a writing request, ...) about the corpus's topics; shuffled with `seed`.
std::vector<std::string> self_instruct_requests(const Corpus& c, std::size_t count, std::uint64_t seed);

/// The question or task in the target's answer to a self-instruct request: its first non-empty line, stripped of
/// quotes, list markers and a leading label ("Question:") (or the quoted part of 'Someone might ask, "..."'), kept when it is 15-300 characters of ASCII and ends with
/// "?" or "." (a question or an instruction); otherwise nothing.
std::optional<std::string> self_instruct_question(const std::string& answer);

}  // namespace specdec::train
