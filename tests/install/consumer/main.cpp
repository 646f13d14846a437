#include <cstdio>
#include <vector>

#include "specdec/core.hpp"

int main() {
  const std::vector<float> p = {0.5f, 0.5f}, q = {0.5f, 0.5f};
  const double a = specdec::theory::acceptance_rate(p, q);
  std::printf("consumer: acceptance %.2f, expected tokens per step at g=3: %.2f\n", a,
              specdec::theory::expected_tokens_per_step(0.8, 3));
  return a == 1.0 ? 0 : 1;
}
