// specdec::train — Prompts from a text corpus: Python sources and Debian packages' texts turned into chat prompts of many kinds, self-instruct requests, and the exclusion of the examples' prompts. (see specdec/train/corpus.hpp)
#include "specdec/train/corpus.hpp"

#include <cstdio>
#include <functional>
#include <iterator>
#include <sstream>

namespace specdec::train {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

bool is_ascii(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 128; });
}

std::string ascii_punctuation(const std::string& s) {
  static const std::vector<std::pair<std::string, std::string>> map = {
      {"\u2018", "'"}, {"\u2019", "'"}, {"\u201c", "\""}, {"\u201d", "\""}, {"\u2013", "-"}, {"\u2014", " - "},
      {"\u2026", "..."}, {"\u00a0", " "}, {"\u2022", "*"}};
  std::string out = s;
  for (const auto& [from, to] : map)
    for (std::size_t p = 0; (p = out.find(from, p)) != std::string::npos; p += to.size()) out.replace(p, from.size(), to);
  return out;
}

namespace {

// Whitespace runs collapsed to single spaces.
std::string collapse_spaces(const std::string& text) {
  std::string flat;
  bool space = false;
  for (char ch : text) {
    if (ch == '\n' || ch == ' ' || ch == '\t' || ch == '\r') {
      space = true;
    } else {
      if (space && !flat.empty()) flat.push_back(' ');
      space = false;
      flat.push_back(ch);
    }
  }
  return flat;
}

double letter_share(const std::string& s) {
  const auto letters = std::count_if(s.begin(), s.end(), [](char ch) { return std::isalpha(static_cast<unsigned char>(ch)); });
  return s.empty() ? 0.0 : static_cast<double>(letters) / static_cast<double>(s.size());
}

// reStructuredText inline markup: :role:`text <target>` -> text, ``code`` -> `code`, *emphasis* kept as it is.
std::string strip_rst_roles(std::string s) {
  static const std::regex role(R"(:[a-z:]+:`~?([^`<]*?)\s*(<[^`>]*>)?`)");
  s = std::regex_replace(s, role, "`$1`");
  for (std::size_t p; (p = s.find("``")) != std::string::npos;) s.replace(p, 2, "`");
  return s;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t a = 0;
  while (a <= text.size()) {
    std::size_t b = text.find('\n', a);
    if (b == std::string::npos) b = text.size();
    lines.push_back(text.substr(a, b - a));
    a = b + 1;
  }
  return lines;
}

}  // namespace

void scan_text_document(const std::string& raw, Corpus& c) {
  const std::string text = ascii_punctuation(raw);
  std::vector<std::string> block;
  auto flush = [&] {
    if (block.empty()) return;
    std::vector<std::string> lines;
    lines.swap(block);
    // Code, tables, directives, headings, lists of references: not prose.
    for (const auto& l : lines) {
      const std::string t = trim(l);
      if (t.rfind("..", 0) == 0 || t.rfind(">>>", 0) == 0 || t.rfind("$ ", 0) == 0 || t.rfind("# ", 0) == 0 || t.rfind("+--", 0) == 0 ||
          t.rfind("|", 0) == 0 || t.find("    ") != std::string::npos || t.find("===") != std::string::npos ||
          t.find("---") != std::string::npos || t.find("___") != std::string::npos)
        return;
    }
    std::string flat = collapse_spaces(strip_rst_roles(fmt::format("{}", fmt::join(lines, "\n"))));
    if (flat.size() < 250 || flat.size() > 1400 || !is_ascii(flat) || letter_share(flat) < 0.7) return;
    if (flat.find("::") != std::string::npos || flat.find("{") != std::string::npos || flat.find("http") != std::string::npos) return;
    const char last = flat.back();
    if (last != '.' && last != '!' && last != '?' && last != '"' && last != ')') return;  // cut mid-sentence
    c.paragraphs.push_back(flat);
  };
  for (const auto& l : split_lines(text)) {
    if (trim(l).empty()) flush();
    else block.push_back(l);
  }
  flush();
}

void scan_fortune_file(const std::string& raw, Corpus& c, bool riddles) {
  const std::string text = ascii_punctuation(raw);
  std::string entry;
  auto flush = [&] {
    std::string flat = collapse_spaces(entry);
    entry.clear();
    // Attribution lines ("-- Someone") stay: a quote's author is part of what it says.
    if (flat.size() < 20 || flat.size() > 300 || !is_ascii(flat) || letter_share(flat) < 0.65) return;
    if (flat.find("  ") != std::string::npos || flat.find("http") != std::string::npos) return;
    (riddles ? c.riddles : c.quotes).push_back(flat);
  };
  for (const auto& l : split_lines(text)) {
    if (trim(l) == "%") flush();
    else entry += l + "\n";
  }
  flush();
}

std::string read_text_file(const fs::path& path) {
  std::string text;
  if (path.extension() == ".gz") {
    // gzip(1) is part of every Debian system (Essential: yes).
    std::string cmd = "gzip -dc '";
    for (char ch : path.string()) cmd += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
    cmd += "' 2>/dev/null";
    FILE* p = popen(cmd.c_str(), "r");
    if (!p) fail(fmt::format("read_text_file: cannot run gzip for '{}'", path.string()));
    char buf[65536];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) text.append(buf, n);
    if (pclose(p) != 0) fail(fmt::format("read_text_file: '{}' is not a readable gzip file", path.string()));
    return text;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(fmt::format("read_text_file: cannot open '{}'", path.string()));
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::vector<std::pair<std::string, std::size_t>> load_package_texts(Corpus& c, const fs::path& root) {
  std::vector<std::pair<std::string, std::size_t>> found;
  auto at = [&](const std::string& rel) { return root / fs::path(rel).relative_path(); };
  auto files_under = [](const fs::path& dir, const std::function<bool(const fs::path&)>& want) {
    std::vector<fs::path> out;
    if (!fs::is_directory(dir)) return out;
    for (auto it = fs::recursive_directory_iterator(dir, fs::directory_options::skip_permission_denied);
         it != fs::recursive_directory_iterator(); ++it)
      if (it->is_regular_file() && want(it->path())) out.push_back(it->path());
    std::sort(out.begin(), out.end());
    return out;
  };
  auto count = [&](const std::string& name, std::size_t before, const std::vector<std::string>& list) {
    if (list.size() > before) found.emplace_back(name, list.size() - before);
  };
  // Python's documentation (python3.X-doc): the reStructuredText sources Sphinx ships beside the HTML.
  {
    const std::size_t before = c.paragraphs.size();
    std::vector<fs::path> docs;
    if (fs::is_directory(at("/usr/share/doc")))
      for (const auto& e : fs::directory_iterator(at("/usr/share/doc")))
        if (e.path().filename().string().rfind("python3", 0) == 0 && fs::is_directory(e.path() / "html" / "_sources")) docs.push_back(e.path());
    std::sort(docs.begin(), docs.end());
    if (!docs.empty())  // one version's documentation (the newest name)
      for (const auto& f : files_under(docs.back() / "html" / "_sources", [](const fs::path& p) {
             const auto s = p.string();
             return s.size() > 8 && s.compare(s.size() - 8, 8, ".rst.txt") == 0 && s.find("/whatsnew/") == std::string::npos &&
                    s.find("/c-api/") == std::string::npos;
           }))
        scan_text_document(read_text_file(f), c);
    count("Python documentation (python3.11-doc)", before, c.paragraphs);
  }
  // Plain-text documents.
  const std::vector<std::pair<std::string, std::vector<std::string>>> documents = {
      {"Debian Reference (debian-reference-en)", {"/usr/share/doc/debian-reference-en/docs/debian-reference.en.txt.gz"}},
      {"GNU coding standards and maintainer guide (gnu-standards)",
       {"/usr/share/doc/gnu-standards/standards.text.gz", "/usr/share/doc/gnu-standards/maintain.text.gz"}},
      {"The Jargon File (jargon-text)", {"/usr/share/doc/jargon-text/jargon.txt.gz"}},
      {"Debian project documents (doc-debian)",
       {"/usr/share/doc/debian/social-contract.txt.gz", "/usr/share/doc/debian/constitution.txt.gz",
        "/usr/share/doc/debian/debian-manifesto.gz", "/usr/share/doc/debian/bug-reporting.txt.gz",
        "/usr/share/doc/debian/mailing-lists.txt.gz"}},
      {"US Constitution and Declaration of Independence (miscfiles)",
       {"/usr/share/state/us-constitution.gz", "/usr/share/state/us-declaration.gz"}},
  };
  for (const auto& [name, paths] : documents) {
    const std::size_t before = c.paragraphs.size();
    for (const auto& rel : paths)
      if (fs::is_regular_file(at(rel))) scan_text_document(read_text_file(at(rel)), c);
    count(name, before, c.paragraphs);
  }
  // fortune-mod's data (fortunes, fortunes-min): every file but the pictures; riddles apart.
  {
    const std::size_t q = c.quotes.size(), r = c.riddles.size();
    for (const auto& f : files_under(at("/usr/share/games/fortunes"), [](const fs::path& p) {
           const auto name = p.filename().string();
           return !p.has_extension() && name != "art" && name != "ascii-art" && name != "translate-me" &&
                  p.parent_path().filename() != "off";
         }))
      scan_fortune_file(read_text_file(f), c, f.filename() == "riddles");
    count("fortune quotations (fortunes, fortunes-min)", q, c.quotes);
    count("fortune riddles (fortunes)", r, c.riddles);
  }
  // The word list (wamerican): plain lower-case words of 4-10 letters.
  if (const auto words = at("/usr/share/dict/american-english"); fs::is_regular_file(words)) {
    const std::size_t before = c.words.size();
    for (const auto& w : split_lines(read_text_file(words)))
      if (w.size() >= 4 && w.size() <= 10 && std::all_of(w.begin(), w.end(), [](char ch) { return ch >= 'a' && ch <= 'z'; }))
        c.words.push_back(w);
    count("word list (wamerican)", before, c.words);
  }
  // WordNet's common nouns (wordnet-base): index.noun lemmas with at least 2 sense-tagged uses in its concordance.
  if (const auto index = at("/usr/share/wordnet/index.noun"); fs::is_regular_file(index)) {
    const std::size_t before = c.topics.size();
    for (const auto& line : split_lines(read_text_file(index))) {
      if (line.empty() || line[0] == ' ') continue;
      std::istringstream in(line);
      std::vector<std::string> f((std::istream_iterator<std::string>(in)), std::istream_iterator<std::string>());
      if (f.size() < 4) continue;
      const std::size_t p_cnt = static_cast<std::size_t>(std::atoi(f[3].c_str()));
      if (f.size() < 6 + p_cnt) continue;
      const int tagged = std::atoi(f[5 + p_cnt].c_str());
      std::string lemma = f[0];
      if (tagged < 2 || lemma.size() < 3 || !std::all_of(lemma.begin(), lemma.end(), [](char ch) { return (ch >= 'a' && ch <= 'z') || ch == '_'; }))
        continue;
      std::replace(lemma.begin(), lemma.end(), '_', ' ');
      c.topics.push_back(lemma);
    }
    count("WordNet common nouns (wordnet-base)", before, c.topics);
  }
  return found;
}

std::string normalise_words(const std::string& s) {
  std::string out;
  bool gap = false;
  for (char ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    if (std::isalnum(u) || u >= 128) {
      if (gap && !out.empty()) out.push_back(' ');
      gap = false;
      out.push_back(static_cast<char>(std::tolower(u)));
    } else if (ch != '\'') {  // "don't" and "dont" are one word
      gap = true;
    }
  }
  return out;
}

namespace {

std::set<std::uint64_t> word_trigrams(const std::string& normal) {
  std::vector<std::string> w;
  std::istringstream in(normal);
  for (std::string x; in >> x;) w.push_back(x);
  std::set<std::uint64_t> out;
  for (std::size_t i = 0; i + 3 <= w.size(); ++i) {
    std::uint64_t h = 1469598103934665603ull;  // FNV-1a over "a b c"
    for (const char ch : w[i] + " " + w[i + 1] + " " + w[i + 2]) h = (h ^ static_cast<unsigned char>(ch)) * 1099511628211ull;
    out.insert(h);
  }
  return out;
}

}  // namespace

PromptExcluder::PromptExcluder(const std::vector<std::string>& references) {
  for (const auto& r : references) {
    Ref ref;
    ref.normal = normalise_words(r);
    ref.grams = word_trigrams(ref.normal);
    refs_.push_back(std::move(ref));
  }
}

bool PromptExcluder::excludes(const std::string& prompt) const {
  if (refs_.empty()) return false;
  const std::string normal = normalise_words(prompt);
  const auto grams = word_trigrams(normal);
  for (const auto& r : refs_) {
    if (normal == r.normal) return true;
    if (grams.empty() || r.grams.empty()) continue;
    std::size_t common = 0;
    for (const auto g : grams) common += r.grams.count(g);
    const double jaccard = static_cast<double>(common) / static_cast<double>(grams.size() + r.grams.size() - common);
    if (jaccard >= 0.5) return true;
    if (r.grams.size() >= 10 && 2 * common >= r.grams.size()) return true;  // holds most of a long reference
  }
  return false;
}

void scan_python_file(const std::string& text, Corpus& c) {
  // Docstrings: triple-quoted blocks of prose, whitespace collapsed to single spaces.
  std::size_t pos = 0;
  while ((pos = text.find("\"\"\"", pos)) != std::string::npos) {
    const std::size_t end = text.find("\"\"\"", pos + 3);
    if (end == std::string::npos) break;
    std::string body = text.substr(pos + 3, end - pos - 3);
    pos = end + 3;
    // Split into paragraphs at blank lines; keep prose-like ones.
    std::size_t p0 = 0;
    while (p0 < body.size()) {
      std::size_t p1 = body.find("\n\n", p0);
      if (p1 == std::string::npos) p1 = body.size();
      std::string para = body.substr(p0, p1 - p0);
      p0 = p1 + 2;
      std::string flat;
      bool space = false;
      for (char ch : para) {
        if (ch == '\n' || ch == ' ' || ch == '\t') {
          space = true;
        } else {
          if (space && !flat.empty()) flat.push_back(' ');
          space = false;
          flat.push_back(ch);
        }
      }
      if (flat.size() < 250 || flat.size() > 1400 || !is_ascii(flat)) continue;
      if (flat.find(">>>") != std::string::npos || flat.find("    ") != std::string::npos) continue;
      const auto letters = std::count_if(flat.begin(), flat.end(), [](char ch) { return std::isalpha(static_cast<unsigned char>(ch)); });
      if (letters < static_cast<long>(flat.size() * 7 / 10)) continue;
      c.paragraphs.push_back(flat);
    }
  }
  // Functions: a "def" line and the lines indented deeper than it, 5..28 lines, without nested defs/classes.
  std::vector<std::string> lines = split_lines(text);
  auto indent_of = [](const std::string& l) { return l.find_first_not_of(' '); };
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const auto ind = indent_of(lines[i]);
    if (ind == std::string::npos || lines[i].compare(ind, 4, "def ") != 0) continue;
    std::size_t j = i + 1;
    while (j < lines.size() && (trim(lines[j]).empty() || indent_of(lines[j]) > ind)) ++j;
    while (j > i + 1 && trim(lines[j - 1]).empty()) --j;
    const std::size_t n = j - i;
    if (n < 5 || n > 28) continue;
    std::string f;
    bool ok = true;
    for (std::size_t k = i; k < j; ++k) {
      const std::string& l = lines[k];
      if (k > i && (l.find(" def ") != std::string::npos || l.find("class ") != std::string::npos)) ok = false;
      f += (l.size() >= ind ? l.substr(ind) : trim(l)) + "\n";
    }
    if (ok && is_ascii(f) && f.size() < 1500) c.functions.push_back(f);
  }
}

Corpus load_corpus(const std::vector<fs::path>& roots) {
  Corpus c;
  std::vector<fs::path> files;
  for (const auto& root : roots) {
    if (fs::is_regular_file(root)) {
      files.push_back(root);
      continue;
    }
    if (!fs::is_directory(root)) fail(fmt::format("--corpus: '{}' is neither a file nor a directory", root.string()));
    for (auto it = fs::recursive_directory_iterator(root, fs::directory_options::skip_permission_denied);
         it != fs::recursive_directory_iterator(); ++it) {
      const auto& p = it->path();
      if (it->is_directory() && (p.filename() == "test" || p.filename() == "tests" || p.filename() == "idlelib" ||
                                 p.filename() == "site-packages" || p.filename() == "dist-packages")) {  // not the standard library
        it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file() && p.extension() == ".py") files.push_back(p);
    }
  }
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    scan_python_file(text, c);
  }
  return c;
}

namespace {

using Rng = std::mt19937_64;

template <class V>
const auto& pick(Rng& rng, const V& v) {
  return v[std::uniform_int_distribution<std::size_t>(0, v.size() - 1)(rng)];
}

int rand_int(Rng& rng, int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }

std::string replace_all(std::string s, const std::string& key, const std::string& val) {
  for (std::size_t p = 0; (p = s.find(key, p)) != std::string::npos; p += val.size()) s.replace(p, key.size(), val);
  return s;
}

// --- the fixed lists the templates draw from ---

const std::vector<std::string> kSummarise = {
    "Summarise the following text in two sentences.", "Summarize this text in one sentence.",
    "Give a short summary of the following text.", "Summarise the following text in three bullet points.",
    "What is the main idea of this text? Answer briefly.", "Explain the following text in simple words.",
    "Write a one-paragraph summary of the text below.", "List the key points of this text.",
    "TL;DR this for me:", "Can you sum this up for a busy reader?", "Summarize the passage below for a beginner.",
    "Give me the gist of this paragraph in under 30 words."};
const std::vector<std::string> kTextTasks = {
    "Rewrite the following paragraph in plain English.", "Write three questions a reader might ask after reading this text.",
    "What is the tone of this text? Explain your answer.", "Suggest a title for the following text.",
    "Explain this passage to a ten-year-old.", "Turn this text into a short list of facts.",
    "Rewrite this paragraph to be more formal.", "Rewrite this paragraph in a friendly, casual voice.",
    "Which words in this text might be hard for a learner? Define them.", "Write a tweet that shares the main point of this text.",
    "What is one thing in this text you would disagree with, and why?", "Translate the jargon in this paragraph into everyday language."};
const std::vector<std::string> kEdits = {
    "Rename the variable `{a}` to `{b}` in this function and return the whole function.",
    "Add a docstring to this function and return the whole function.",
    "Add type hints to this function and return it.", "Explain what this function does.",
    "Rewrite this function to make it easier to read.", "Rename the function to `{b}` and return the whole function.",
    "Are there any bugs in this function? Explain briefly.", "Add comments to this function and return it.",
    "Rename the variable `{a}` to `{b}` in this code and return the whole code.",
    "Write two unit tests for this function.", "What does this function return? Explain step by step.",
    "How could this function fail? List the edge cases.", "Translate this Python function into JavaScript."};
const std::vector<std::string> kNewNames = {"result", "value_list", "count", "items", "output", "total_count",
                                            "data", "buffer", "index", "new_value", "sum_of_items", "text"};
const std::vector<std::string> kCodeTasks = {
    "reverses a string", "checks whether a number is prime", "counts the vowels in a string", "returns the n-th Fibonacci number",
    "removes duplicates from a list while keeping the order", "finds the largest number in a list", "checks whether a word is a palindrome",
    "merges two dictionaries", "converts Celsius to Fahrenheit", "sorts a list of names by their length", "computes the factorial of a number",
    "counts how often each word appears in a text", "flattens a nested list", "returns the second largest number in a list",
    "checks whether two strings are anagrams", "capitalises the first letter of every word", "finds the common elements of two lists",
    "reads a CSV file and prints each row", "generates a random password", "computes the average of a list of numbers",
    "converts a number to binary", "checks whether a year is a leap year", "splits a list into chunks of size n",
    "returns the first non-repeating character of a string", "computes the greatest common divisor of two numbers",
    "validates an email address", "rotates a list by k positions", "transposes a matrix", "finds all even numbers in a list",
    "sums the digits of a number", "implements binary search", "counts the lines in a file", "removes punctuation from a string"};
const std::vector<std::string> kLanguages = {"Python", "Python", "Python", "JavaScript", "C", "C++", "Java", "Go", "Rust", "a Bash script", "SQL"};
const std::vector<std::string> kCodeQuestions = {
    "How do I read a file line by line in {l}?", "What is the difference between a list and a tuple in Python?",
    "How do I handle errors in {l}?", "What is a closure in {l}?", "Explain recursion with an example in {l}.",
    "How do I write a loop in {l}?", "What are the basic data types in {l}?", "How do I sort a list of numbers in {l}?",
    "What is a hash map and how do I use one in {l}?", "How do I make an HTTP request in {l}?", "How do I write a unit test in {l}?",
    "What does `git rebase` do?", "How do I undo the last git commit?", "What is the difference between a process and a thread?",
    "What is Big-O notation? Give examples.", "How do I find and fix a memory leak?", "What is an API?",
    "Explain what a REST API is to a beginner.", "How do I count the files in a directory from the shell?"};
const std::vector<std::string> kTipsFor = {
    "staying focused while studying", "learning a new language", "saving money", "cooking healthy meals", "sleeping better",
    "giving a good presentation", "writing a cover letter", "running a meeting", "learning to program",
    "keeping a plant alive", "travelling on a budget", "reducing stress", "staying productive at home",
    "writing a good essay", "making friends in a new city", "preparing for a job interview", "organising a desk",
    "reading more books", "starting to exercise", "managing time", "negotiating a salary", "moving to a new apartment",
    "taking better notes", "getting up early", "learning to draw", "training a puppy", "planning a wedding", "quitting sugar",
    "being a better listener", "starting a small business", "raising a teenager", "working with a difficult colleague",
    "keeping a journal", "running a first marathon", "learning to swim as an adult", "decluttering a home", "studying for an exam",
    "asking for feedback", "speaking up in meetings", "dealing with jet lag", "growing tomatoes", "buying a used car"};
const std::vector<std::string> kAdvice = {
    "What are {n} tips for {t}?", "Give me {n} tips for {t}.", "How can I get better at {t}?", "What are the benefits of {t}?",
    "What mistakes do people make when {t}?", "I want to start {t}. Where do I begin?", "What should a beginner know about {t}?",
    "My friend is struggling with {t}. How can I help?", "Make a one-week plan for {t}.", "What is the hardest part of {t}?"};
const std::vector<std::string> kSituations = {
    "I have too much work and can't say no to my boss", "my roommate never does the dishes", "I feel nervous before exams",
    "I can't decide between two job offers", "I keep forgetting people's names", "I spend too much time on my phone",
    "my neighbour's dog barks all night", "I want to ask for a raise", "I moved to a new city and feel lonely",
    "I procrastinate on every big task", "my team missed an important deadline", "I lent money to a friend who hasn't paid it back",
    "I want to change careers at forty", "my child doesn't want to read", "I get tired every afternoon"};
const std::vector<std::string> kExplain = {
    "Explain {c} in simple terms.", "What is {c}? Answer in a short paragraph.", "Why is {c} important?",
    "Tell me a fun fact about {c}.", "How would you explain {c} to a child?", "Tell me three facts about {c}.",
    "What is the history of {c}?", "What are common misconceptions about {c}?", "How does {c} affect everyday life?",
    "Describe {c} in one sentence, then in one paragraph.", "What are the pros and cons of {c}?", "Write a short encyclopedia entry about {c}."};
const std::vector<std::string> kConcepts = {
    "photosynthesis", "gravity", "inflation", "machine learning", "the water cycle", "a hash table", "recursion",
    "climate change", "the internet", "vaccines", "democracy", "black holes", "compound interest", "DNA", "a neural network",
    "object-oriented programming", "the stock market", "renewable energy", "version control", "an operating system",
    "supply and demand", "evolution", "the immune system", "electricity", "plate tectonics", "the French Revolution",
    "the scientific method", "encryption", "the moon's phases", "opportunity cost"};
const std::vector<std::string> kPairs = {
    "a list and a tuple in Python", "weather and climate", "a virus and a bacterium", "RAM and storage", "HTTP and HTTPS",
    "a process and a thread", "speed and velocity", "an alligator and a crocodile", "TCP and UDP", "a compiler and an interpreter",
    "stocks and bonds", "a lake and a pond", "SQL and NoSQL databases", "empathy and sympathy", "a simile and a metaphor",
    "debit and credit cards", "a latte and a cappuccino", "mitosis and meiosis", "a republic and a democracy", "baking soda and baking powder"};
const std::vector<std::string> kEmails = {
    "inviting a colleague to lunch", "asking for a deadline extension", "thanking a teacher", "complaining about a late delivery",
    "asking a landlord to fix the heating", "introducing yourself to a new team", "declining a job offer politely",
    "following up after a job interview", "asking a neighbour to keep the noise down", "apologising for missing a meeting",
    "requesting a refund", "congratulating a friend on a new job", "reminding a client about an unpaid invoice",
    "asking your manager for a day off", "inviting friends to a birthday party", "welcoming a new member to a club"};
const std::vector<std::string> kEmailStyles = {"a short", "a polite", "a friendly", "a formal", "a brief and warm", "a professional"};
const std::vector<std::string> kWriting = {
    "Write a short poem about {c}.", "Write a haiku about {c}.", "Write a limerick about {c}.", "Write a short story about {c}.",
    "Write a short story that uses the words {w1}, {w2} and {w3}.", "Write a poem that includes the words {w1} and {w2}.",
    "Write a product description for a {c}.", "Write a slogan for a company that sells {c}.",
    "Write a diary entry from the point of view of a {c}.", "Write a short speech about {c} for a school assembly.",
    "Write a letter to your future self about {c}.", "Write a dialogue between two friends about {c}.",
    "Write a fairy tale about a {w1} and a {w2}.", "Write the opening paragraph of a mystery novel set near a {c}.",
    "Write a short story about a robot who likes {t}.", "Write a motivational message about {t}.",
    "Write a song chorus about {c}.", "Describe a {c} to someone who has never seen one."};
const std::vector<std::string> kChat = {
    "What do you think about {c}?", "Let's talk about {c}. What's interesting about it?", "Can you recommend a good book about {c}?",
    "What would happen if {c} disappeared tomorrow?", "Which is better: {w1} or {w2}? Why?", "Hi! Can you tell me something about {c}?",
    "I'm bored. Suggest something fun to do this weekend.", "What should I cook for dinner tonight?", "Tell me a joke about {c}.",
    "What's a good name for a pet {w1}?", "If you could visit any place in the world, where would you go?",
    "Give me a riddle and its answer.", "What are some fun facts most people don't know?", "How was the {c} invented?",
    "Can you help me plan a birthday party?", "What is a good hobby to pick up in winter?", "Suggest a name for a {w1} shop.",
    "Why do people like {c}?", "What questions would you ask a {c} expert?", "Is it a good idea to learn about {c}? Why?"};
const std::vector<std::string> kQuoteTasks = {
    "What does this quote mean?", "Explain this saying in your own words.", "Do you agree with this quote? Explain why.",
    "Write a short story inspired by this quote.", "Who might have said this, and in what situation?", "Explain the joke in this quote.",
    "Write a short essay that starts with this quote.", "Rewrite this quote in modern, plain English."};
const std::vector<std::string> kNames = {"Anna", "Ben", "Carla", "David", "Emma", "Farid", "Grace", "Hugo", "Ines", "Jamal", "Kira", "Liam",
                                         "Maya", "Noah", "Olga", "Pedro", "Quinn", "Rosa", "Sam", "Tara", "Umar", "Vera", "Will", "Yuki", "Zoe"};
const std::vector<std::string> kItems = {"apples", "books", "stickers", "marbles", "pencils", "cookies", "stamps", "shells", "cards", "eggs"};

// An arithmetic word problem with fresh numbers.
std::string word_problem(Rng& rng) {
  const std::string n1 = pick(rng, kNames), n2 = pick(rng, kNames), item = pick(rng, kItems);
  const int a = rand_int(rng, 3, 60), b = rand_int(rng, 2, 25), c = rand_int(rng, 2, 9), price = rand_int(rng, 2, 40);
  const int speed = rand_int(rng, 30, 120), hours = rand_int(rng, 2, 9), pct = 5 * rand_int(rng, 1, 12);
  switch (rand_int(rng, 0, 9)) {
    case 0: return fmt::format("{} has {} {}. {} gives {} {} more. How many {} does {} have now?", n1, a, item, n2, n1, b, item, n1);
    case 1: return fmt::format("{} buys {} packs of {} with {} {} in each pack. How many {} does {} buy in total?", n1, c, item, b, item, item, n1);
    case 2: return fmt::format("A shop sells {} for ${} each. {} buys {} of them and pays with a ${} note. How much change does {} get?", item,
                               price, n1, c, price * c + rand_int(rng, 1, 50), n1);
    case 3: return fmt::format("A train travels at {} km/h for {} hours. How far does it go? Explain your steps.", speed, hours);
    case 4: return fmt::format("{} shares {} {} equally among {} friends. How many does each friend get, and how many are left over?", n1,
                               a * c + rand_int(rng, 0, c - 1), item, c);
    case 5: return fmt::format("A jacket costs ${}. It is on sale for {}% off. What is the sale price?", price * 5, pct);
    case 6: return fmt::format("{} is {} years old. {} is {} years older. How old will {} be in {} years?", n1, b, n2, c, n2, hours);
    case 7: return fmt::format("A rectangle is {} cm long and {} cm wide. What are its area and its perimeter?", a, b);
    case 8: return fmt::format("{} reads {} pages a day. The book has {} pages. How many days does it take to finish the book?", n1, b,
                               b * hours + rand_int(rng, 1, b - 1));
    default: return fmt::format("{} saves ${} every week. How many weeks does it take to save ${}? Show your work.", n1, c * 5, c * 5 * a);
  }
}

}  // namespace

std::vector<std::string> make_prompts(const Corpus& c, std::size_t count, std::uint64_t seed, const PromptExcluder& exclude) {
  Rng rng(seed);
  static const std::regex assign(R"(^\s*([a-z_][a-z0-9_]*)\s*=[^=])");
  // Each kind with its share; kinds whose material is missing are skipped.
  enum Kind { kSummariseK, kTextTaskK, kEditK, kCodeK, kQuoteK, kRiddleK, kExplainK, kAdviceK, kEmailK, kWritingK, kProblemK, kChatK };
  const std::vector<std::pair<Kind, double>> kinds = {
      {kSummariseK, 0.13}, {kTextTaskK, 0.06}, {kEditK, 0.09}, {kCodeK, 0.08}, {kQuoteK, 0.06}, {kRiddleK, 0.01},
      {kExplainK, 0.13},   {kAdviceK, 0.10},   {kEmailK, 0.06}, {kWritingK, 0.12}, {kProblemK, 0.07}, {kChatK, 0.09}};
  double total = 0;
  for (const auto& k : kinds) total += k.second;
  auto topic = [&] {  // a corpus noun most of the time, otherwise a curated concept
    return !c.topics.empty() && rand_int(rng, 0, 3) > 0 ? pick(rng, c.topics) : pick(rng, kConcepts);
  };
  auto word = [&] { return c.words.empty() ? pick(rng, kItems) : pick(rng, c.words); };
  auto fill = [&](std::string s) {
    s = replace_all(s, "{c}", topic());
    s = replace_all(s, "{t}", pick(rng, kTipsFor));
    s = replace_all(s, "{w1}", word());
    s = replace_all(s, "{w2}", word());
    s = replace_all(s, "{w3}", word());
    s = replace_all(s, "{l}", pick(rng, kLanguages));
    s = replace_all(s, "{n}", std::to_string(rand_int(rng, 3, 5)));
    return s;
  };
  std::vector<std::string> out;
  std::set<std::string> seen;
  std::size_t attempts = 0;
  while (out.size() < count && attempts++ < count * 20 + 100) {
    double u = std::uniform_real_distribution<double>(0, total)(rng);
    Kind kind = kinds.back().first;
    for (const auto& k : kinds)
      if ((u -= k.second) < 0) {
        kind = k.first;
        break;
      }
    std::string p;
    switch (kind) {
      case kSummariseK:
        if (!c.paragraphs.empty()) p = pick(rng, kSummarise) + "\n\n" + pick(rng, c.paragraphs);
        break;
      case kTextTaskK:
        if (!c.paragraphs.empty()) p = pick(rng, kTextTasks) + "\n\n" + pick(rng, c.paragraphs);
        break;
      case kEditK: {
        if (c.functions.empty()) break;
        const std::string& f = pick(rng, c.functions);
        std::string form = pick(rng, kEdits);
        std::vector<std::string> vars;
        std::size_t a = 0;
        while (a < f.size()) {
          std::size_t b = f.find('\n', a);
          if (b == std::string::npos) b = f.size();
          std::smatch m;
          const std::string line = f.substr(a, b - a);
          if (std::regex_search(line, m, assign) && m[1].str() != "self") vars.push_back(m[1].str());
          a = b + 1;
        }
        if (form.find("{a}") != std::string::npos) {
          if (vars.empty()) form = kEdits[1];
          else form = replace_all(form, "{a}", pick(rng, vars));
        }
        form = replace_all(form, "{b}", pick(rng, kNewNames));
        p = form + "\n\n" + (rand_int(rng, 0, 1) ? "```python\n" + f + "```" : f);
        break;
      }
      case kCodeK:
        p = rand_int(rng, 0, 2) > 0 ? fmt::format("Write {} function that {}.",
                                                  [&] { const auto& l = pick(rng, kLanguages); return l.rfind("a ", 0) == 0 ? l : "a " + l; }(),
                                                  pick(rng, kCodeTasks))
                                    : fill(pick(rng, kCodeQuestions));
        break;
      case kQuoteK:
        if (!c.quotes.empty()) p = pick(rng, kQuoteTasks) + "\n\n\"" + pick(rng, c.quotes) + "\"";
        break;
      case kRiddleK:
        if (!c.riddles.empty()) p = "Can you solve this riddle?\n\n" + pick(rng, c.riddles);
        break;
      case kExplainK:
        p = rand_int(rng, 0, 4) > 0 ? fill(pick(rng, kExplain)) : "What is the difference between " + pick(rng, kPairs) + "?";
        break;
      case kAdviceK:
        p = rand_int(rng, 0, 2) > 0 ? fill(pick(rng, kAdvice)) : "I need some advice: " + pick(rng, kSituations) + ". What should I do?";
        break;
      case kEmailK:
        p = fmt::format("Write {} email {}.", pick(rng, kEmailStyles), pick(rng, kEmails));
        break;
      case kWritingK:
        p = fill(pick(rng, kWriting));
        break;
      case kProblemK:
        p = word_problem(rng);
        break;
      case kChatK:
        p = fill(pick(rng, kChat));
        break;
    }
    if (p.empty() || exclude.excludes(p) || !seen.insert(p).second) continue;
    out.push_back(p);
  }
  return out;
}

std::vector<std::string> make_prompts(const Corpus& c, std::size_t count, std::uint64_t seed, const std::set<std::string>& exclude) {
  return make_prompts(c, count, seed, PromptExcluder(std::vector<std::string>(exclude.begin(), exclude.end())));
}

std::vector<std::string> self_instruct_requests(const Corpus& c, std::size_t count, std::uint64_t seed) {
  Rng rng(seed ^ 0x5e1f1257ull);
  static const std::vector<std::string> forms = {
      "Write one question that a curious person might ask about {c}. Reply with the question only.",
      "Write one question a student might ask a teacher about {c}. Reply with the question only.",
      "Write a short math word problem about {c}. Reply with the problem only.",
      "Write one request someone might send to an assistant asking for help with {t}. Reply with the request only.",
      "Write one instruction asking an assistant to write a poem, story or email about {c}. Reply with the instruction only.",
      "Write one programming task for a beginner that involves {c}. Reply with the task only.",
      "Write one question someone might ask a friend for advice about {t}. Reply with the question only.",
      "Write one interesting question about {c} that has a short answer. Reply with the question only.",
      "Write one question comparing {c} and {c2}. Reply with the question only."};
  std::vector<std::string> out;
  std::set<std::string> seen;
  std::size_t attempts = 0;
  while (out.size() < count && attempts++ < count * 20 + 100) {
    auto topic = [&] { return !c.topics.empty() && rand_int(rng, 0, 3) > 0 ? pick(rng, c.topics) : pick(rng, kConcepts); };
    std::string s = pick(rng, forms);
    s = replace_all(s, "{c2}", topic());
    s = replace_all(s, "{c}", topic());
    s = replace_all(s, "{t}", pick(rng, kTipsFor));
    if (seen.insert(s).second) out.push_back(s);
  }
  return out;
}

std::optional<std::string> self_instruct_question(const std::string& answer) {
  for (const auto& raw : split_lines(ascii_punctuation(answer))) {
    std::string l = trim(raw);
    if (l.empty()) continue;
    static const std::regex label(R"(^(\*\*)?(question|request|task|problem|instruction|prompt|student|user|human)\s*\d*\s*:\s*(\*\*)?\s*)", std::regex::icase);
    static const std::regex marker(R"(^(\d+[.)]|[-*#>]+)\s*)");
    l = std::regex_replace(l, marker, "");
    l = std::regex_replace(l, label, "");
    while (!l.empty() && (l.front() == '"' || l.front() == '\'' || l.front() == '*')) l.erase(l.begin());
    while (!l.empty() && (l.back() == '"' || l.back() == '\'' || l.back() == '*')) l.pop_back();
    l = trim(l);
    // 'A student might ask, "Why ...?"': the quoted question.
    if (const auto q0 = l.find('"'); q0 != std::string::npos && q0 > 0) {
      const auto q1 = l.find('"', q0 + 1);
      const std::string inner = trim(l.substr(q0 + 1, q1 == std::string::npos ? std::string::npos : q1 - q0 - 1));
      if (inner.size() >= 15) l = inner;
    }
    if (l.size() < 15 || l.size() > 300 || !is_ascii(l)) return std::nullopt;
    if (l.rfind("What a ", 0) == 0 || l.rfind("Sure", 0) == 0 || l.rfind("I'm ", 0) == 0 || l.rfind("Here", 0) == 0) return std::nullopt;
    if (l.back() != '?' && l.back() != '.') return std::nullopt;
    return l;
  }
  return std::nullopt;
}

}  // namespace specdec::train
