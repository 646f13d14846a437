// bench_torch_rss: what linking libtorch costs a process before it does anything. Links libtorch and nothing of
// specdec, touches nothing of it, and prints its resident memory from /proc/self/status (VmRSS, RssAnon, RssFile) and
// from /proc/self/smaps the [heap] share (static registrations) and the number of mapped shared libraries. The peak-RSS
// figures of specdec-generate and bench_model's rss_mib_at_start carry this share (docs/results-log.md). Linux only.
#include <ATen/ATen.h>

#include <cctype>
#include <cstdio>
#include <fstream>
#include <set>
#include <string>

int main(int argc, char**) {
  if (argc > 1 << 20) return static_cast<int>(at::zeros({1}).numel());  // never taken: keeps libtorch linked
  std::ifstream status("/proc/self/status");
  if (!status) {
    std::printf("bench_torch_rss: no /proc/self/status (Linux only)\n");
    return 0;
  }
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmRSS", 0) == 0 || line.rfind("RssAnon", 0) == 0 || line.rfind("RssFile", 0) == 0)
      std::printf("%s\n", line.c_str());
  std::ifstream smaps("/proc/self/smaps");
  std::string mapping;
  long heap_kb = 0;
  std::set<std::string> libraries;
  for (std::string line; std::getline(smaps, line);) {
    if (!line.empty() && std::isxdigit(static_cast<unsigned char>(line[0])) && line.find('-') < line.find(' ')) {
      const auto slash = line.find('/'), bracket = line.find('[');
      mapping = slash != std::string::npos ? line.substr(slash) : bracket != std::string::npos ? line.substr(bracket) : "";
      if (mapping.find(".so") != std::string::npos) libraries.insert(mapping);
    } else if (mapping == "[heap]" && line.rfind("Rss:", 0) == 0) {
      heap_kb += std::stol(line.substr(4));
    }
  }
  std::printf("[heap] resident: %ld kB\nshared libraries mapped: %zu\n", heap_kb, libraries.size());
  return 0;
}
