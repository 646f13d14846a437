// specdec torch front — host-to-device uploads that do not synchronise the host.
#pragma once

#include <ATen/ATen.h>

namespace specdec::torch {

/// `t` on `device` without a host synchronisation: a host tensor is copied into page-locked memory (the caching host
/// allocator's blocks, reused once the copy that read them has finished) and uploaded asynchronously on the current
/// stream; anything else goes through `.to(device)`. The result is valid for work queued on that stream.
inline at::Tensor to_device_async(const at::Tensor& t, at::Device device) {
  if (device.is_cpu() || !t.is_cpu()) return t.to(device);
  const at::Tensor pinned = t.is_pinned() ? t : t.pin_memory();
  return pinned.to(device, /*non_blocking=*/true);
}

}  // namespace specdec::torch
