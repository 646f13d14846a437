// specdec::train — Prompts from a text corpus: Python sources scanned for docstring paragraphs and functions, turned into chat prompts. (see specdec/train/corpus.hpp)
#include "specdec/train/corpus.hpp"

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
  std::vector<std::string> lines;
  {
    std::size_t a = 0;
    while (a <= text.size()) {
      std::size_t b = text.find('\n', a);
      if (b == std::string::npos) b = text.size();
      lines.push_back(text.substr(a, b - a));
      a = b + 1;
    }
  }
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
      if (it->is_directory() && (p.filename() == "test" || p.filename() == "tests" || p.filename() == "idlelib")) {
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

std::vector<std::string> make_prompts(const Corpus& c, std::size_t count, std::uint64_t seed,
                                             const std::set<std::string>& exclude) {
  std::mt19937_64 rng(seed);
  auto pick = [&](const auto& v) -> const auto& { return v[std::uniform_int_distribution<std::size_t>(0, v.size() - 1)(rng)]; };
  static const std::vector<std::string> summarise = {
      "Summarise the following text in two sentences.", "Summarize this text in one sentence.",
      "Give a short summary of the following text.", "Summarise the following text in three bullet points.",
      "What is the main idea of this text? Answer briefly.", "Explain the following text in simple words.",
      "Write a one-paragraph summary of the text below.", "List the key points of this text."};
  static const std::vector<std::string> edits = {
      "Rename the variable `{a}` to `{b}` in this function and return the whole function.",
      "Add a docstring to this function and return the whole function.",
      "Add type hints to this function and return it.", "Explain what this function does.",
      "Rewrite this function to make it easier to read.", "Rename the function to `{b}` and return the whole function.",
      "Are there any bugs in this function? Explain briefly.", "Add comments to this function and return it.",
      "Rename the variable `{a}` to `{b}` in this code and return the whole code."};
  static const std::vector<std::string> new_names = {"result", "value_list", "count", "items", "output", "total_count",
                                                     "data", "buffer", "index", "new_value", "sum_of_items", "text"};
  static const std::vector<std::string> tips_for = {
      "staying focused while studying", "learning a new language", "saving money", "cooking healthy meals", "sleeping better",
      "giving a good presentation", "writing a cover letter", "running a meeting", "learning to program",
      "keeping a plant alive", "travelling on a budget", "reducing stress", "staying productive at home",
      "writing a good essay", "making friends in a new city", "preparing for a job interview", "organising a desk",
      "reading more books", "starting to exercise", "managing time"};
  static const std::vector<std::string> concepts = {
      "photosynthesis", "gravity", "inflation", "machine learning", "the water cycle", "a hash table", "recursion",
      "climate change", "the internet", "vaccines", "democracy", "black holes", "compound interest", "DNA", "a neural network",
      "object-oriented programming", "the stock market", "renewable energy", "version control", "an operating system"};
  static const std::vector<std::string> pairs = {
      "a list and a tuple in Python", "weather and climate", "a virus and a bacterium", "RAM and storage", "HTTP and HTTPS",
      "a process and a thread", "speed and velocity", "an alligator and a crocodile", "TCP and UDP", "a compiler and an interpreter",
      "stocks and bonds", "a lake and a pond", "SQL and NoSQL databases", "empathy and sympathy"};
  static const std::vector<std::string> chat_forms = {
      "What are three tips for {t}?", "Give me five tips for {t}.", "How can I get better at {t}?",
      "Explain {c} in simple terms.", "What is {c}? Answer in a short paragraph.", "Why is {c} important?",
      "What is the difference between {p}?", "Write a short poem about {c}.", "Tell me a fun fact about {c}.",
      "Write a short story about a robot who likes {t}.", "Write a haiku about {c}.",
      "Write a Python function that reverses a string.", "Write a Python function that checks whether a number is prime.",
      "How do I read a file line by line in Python?", "Write a short email inviting a colleague to lunch.",
      "Write a polite email asking for a deadline extension.", "What should I pack for a weekend trip?",
      "Suggest a name for a coffee shop.", "What is the capital of France?", "How many days are in a leap year?",
      "Give me a recipe for pancakes.", "What are the benefits of {t}?"};
  auto fill = [&](std::string s) {
    auto rep = [&](const std::string& key, const std::string& val) {
      for (std::size_t p; (p = s.find(key)) != std::string::npos;) s.replace(p, key.size(), val);
    };
    rep("{t}", pick(tips_for));
    rep("{c}", pick(concepts));
    rep("{p}", pick(pairs));
    return s;
  };
  static const std::regex assign(R"(^\s*([a-z_][a-z0-9_]*)\s*=[^=])");
  std::vector<std::string> out;
  std::set<std::string> seen;
  std::size_t attempts = 0;
  while (out.size() < count && attempts++ < count * 20) {
    const double u = std::uniform_real_distribution<double>(0, 1)(rng);
    std::string p;
    if (u < 0.35 && !c.paragraphs.empty()) {
      p = pick(summarise) + "\n\n" + pick(c.paragraphs);
    } else if (u < 0.7 && !c.functions.empty()) {
      const std::string& f = pick(c.functions);
      std::string form = pick(edits);
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
        if (vars.empty()) form = edits[1];
        else {
          const std::string v = pick(vars);
          form.replace(form.find("{a}"), 3, v);
        }
      }
      if (auto q = form.find("{b}"); q != std::string::npos) form.replace(q, 3, pick(new_names));
      p = form + "\n\n" + f;
    } else {
      p = fill(pick(chat_forms));
    }
    if (exclude.count(p) || !seen.insert(p).second) continue;
    out.push_back(p);
  }
  return out;
}

}  // namespace specdec::train
