/*
 * cuda_profiler_api.h — the runtime's profiler control, as NVIDIA declares it in its own
 * header of that name (not in cuda_runtime_api.h). cuda-shim has no profiler: collection is a
 * no-op that succeeds, as on a GPU without a profiling tool attached.
 */
#ifndef ITERMEM_SHIM_CUDA_PROFILER_API_H
#define ITERMEM_SHIM_CUDA_PROFILER_API_H

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

extern cudaError_t cudaProfilerStart(void);
extern cudaError_t cudaProfilerStop(void);

#ifdef __cplusplus
}
#endif

#endif /* ITERMEM_SHIM_CUDA_PROFILER_API_H */
