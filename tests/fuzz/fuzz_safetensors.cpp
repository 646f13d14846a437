// libFuzzer target: the safetensors header parser (SafetensorsFile::from_bytes), the tensor views and the float conversion.
// Any specdec::error is an expected outcome; a crash, a sanitizer report, another exception or a broken promise of the
// header (tensors sorted by offset, disjoint, inside the data section, sized by their shape) is a bug. Run: scripts/fuzz.sh
// safetensors.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "fuzz_common.hpp"
#include "specdec/models/safetensors.hpp"

namespace sm = specdec::models;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const auto file = sm::SafetensorsFile::from_bytes({reinterpret_cast<const std::byte*>(data), size});
    SPECDEC_FUZZ_CHECK(file.data_offset() >= 8 && file.data_offset() <= size);
    const std::uint64_t data_size = size - file.data_offset();
    std::uint64_t previous_end = 0;
    std::int64_t budget = 1 << 22;  // floats converted per input
    for (const auto& t : file.tensors()) {
      SPECDEC_FUZZ_CHECK(t.begin >= previous_end && t.begin <= t.end && t.end <= data_size);
      previous_end = t.end;
      SPECDEC_FUZZ_CHECK(file.find_tensor(t.name) == &t);
      SPECDEC_FUZZ_CHECK(&file.tensor(t.name) == &t);
      const auto bytes = file.tensor_data(t);
      SPECDEC_FUZZ_CHECK(bytes.size() == static_cast<std::uint64_t>(t.num_elements) * sm::element_size(t.dtype));
      std::uint64_t count = 1;
      for (auto d : t.shape) {
        SPECDEC_FUZZ_CHECK(d >= 0);
        count *= static_cast<std::uint64_t>(d);
      }
      SPECDEC_FUZZ_CHECK(count == static_cast<std::uint64_t>(t.num_elements));
      const bool is_float =
          t.dtype == sm::SafetensorsDtype::kF32 || t.dtype == sm::SafetensorsDtype::kF16 || t.dtype == sm::SafetensorsDtype::kBF16;
      if (is_float && t.num_elements <= budget) {
        budget -= t.num_elements;
        const auto values = file.to_float(t);
        SPECDEC_FUZZ_CHECK(values.size() == static_cast<std::size_t>(t.num_elements));
      } else if (!is_float) {
        bool threw = false;
        try {
          (void)file.to_float(t);
        } catch (const specdec::error&) {
          threw = true;
        }
        SPECDEC_FUZZ_CHECK(threw);
      }
    }
    for (const auto& [key, value] : file.metadata()) SPECDEC_FUZZ_CHECK(file.find_tensor(key) == nullptr || key != "__metadata__");
    try {
      (void)file.tensor("\x01 not a tensor name");
    } catch (const specdec::error&) {
    }
  } catch (const specdec::error&) {
  }
  return 0;
}
