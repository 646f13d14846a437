// specdec::torch — the decoder's DeviceBackend on ATen (include/specdec/decoder/device_backend.hpp): verification with
// torch::verify_logits on the rows' device (small inputs up in one pinned copy, the results down in one), feature rows
// gathered with index_select, copies to the host. Set DecoderOptions::device_backend = specdec::torch::make_device_backend
// for a target whose rows live on a GPU (the ATen model on --device cuda).
#pragma once

#include <memory>

#include "specdec/decoder/device_backend.hpp"

namespace specdec::torch {

/// A backend for one decoder (it keeps the verification workspace on the device across steps).
std::unique_ptr<decoder::DeviceBackend> make_device_backend();

}  // namespace specdec::torch
