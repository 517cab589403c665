/*
 * cuda_shim.h — extensions that exist only on cuda-shim, itermem's simulated CUDA platform.
 *
 * On a real GPU a kernel's parameter layout comes from the fatbinary; on the shim a kernel is a
 * host function run on its stream's worker thread, and this call tells the platform its layout
 * (so cudaGetFuncBySymbol + cuFuncGetParamInfo answer as on CUDA >= 12.4) and an optional
 * simulated duration. Everything else a program does goes through the ordinary CUDA API.
 */
#ifndef ITERMEM_CUDA_SHIM_H
#define ITERMEM_CUDA_SHIM_H

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A kernel body: args[i] points to the value of parameter i, as in cudaLaunchKernel. */
typedef void (*cudaShimKernelFn)(void **args);

/*
 * Registers `func` as a kernel named `name` taking `nparams` parameters of the given sizes in
 * bytes. `simulated_ns` (0 = none) is slept on the stream after the body ran, to model the
 * kernel's duration. Registering the same function again replaces its layout.
 * Returns cudaErrorInvalidValue for a NULL func/name, nparams < 0, or a zero parameter size.
 */
cudaError_t cudaShimRegisterKernel(cudaShimKernelFn func, const char *name, int nparams,
                                   const size_t *param_sizes, unsigned long long simulated_ns);

/* Counters of one simulated device since process start (CUDA_SHIM_DEVICES=N simulates N devices,
 * each with its own counters). */
struct cudaShimStats {
    unsigned long long capacity_bytes;         /* CUDA_SHIM_DEVICE_MEMORY */
    unsigned long long current_device_bytes;   /* device + managed + async, 256 B granules */
    unsigned long long peak_device_bytes;      /* what nvidia-smi would have shown at most */
    unsigned long long live_device_allocations;
    unsigned long long device_alloc_calls;     /* successful allocations of device memory */
    unsigned long long device_free_calls;      /* successful frees of device memory */
    unsigned long long current_pinned_bytes;   /* page-locked host memory */
    unsigned long long peak_pinned_bytes;
    unsigned long long h2d_bytes;              /* bytes copied host -> device */
    unsigned long long d2h_bytes;              /* bytes copied device -> host */
    unsigned long long d2d_bytes;              /* bytes copied device -> device */
    unsigned long long memset_bytes;
    unsigned long long kernel_launches;        /* launches executed */
    unsigned long long jitter_digest;          /* digest of the random delays drawn so far */
    unsigned long long ptx_thread_instructions; /* PTX instructions interpreted, per thread */
    unsigned long long ptx_kernel_ns;          /* wall time of the interpreted kernels */
    unsigned long long zero_copy_bytes;        /* mapped host memory reached by kernels, memsets */
    unsigned long long live_events;            /* events created and not yet destroyed */
    unsigned long long peak_live_events;
};

/* Fills `stats` with the counters of the calling thread's current device (device 0 on a thread
 * without a current context); cudaErrorInvalidValue for NULL. */
cudaError_t cudaShimGetStats(struct cudaShimStats *stats);

/*
 * Called from inside a kernel body: the simulated device faults with `error` (for instance
 * cudaErrorIllegalAddress or cudaErrorLaunchFailure) once the body returns. As on a real GPU the
 * error is sticky: every later API call on that device's context returns it.
 */
void cudaShimRaiseDeviceError(cudaError_t error);

#ifdef __cplusplus
}
#endif

#endif /* ITERMEM_CUDA_SHIM_H */
