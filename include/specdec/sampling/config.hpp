// specdec — configuration macros shared by host and device code.
#pragma once

#if defined(__CUDACC__) || defined(__HIPCC__)
#define SPECDEC_HD __host__ __device__
#define SPECDEC_DEVICE_COMPILE 1
#else
#define SPECDEC_HD
#endif

#if defined(__CUDA_ARCH__)
#define SPECDEC_ON_DEVICE 1
#endif

#define SPECDEC_INLINE SPECDEC_HD inline
