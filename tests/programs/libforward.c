/*
 * libforward.c — the floor of `itermem bench hooks`: the cheapest possible interposer. It
 * exports the six CUDA entry points that hook_bench times, and each only calls the real
 * function, found once with dlsym(RTLD_NEXT) when the library is loaded. What this adds to a
 * call (the PLT hop into a preloaded library and one indirect call) is what any interposer
 * pays; what libitermem adds above it is what its hooks do.
 *
 * Built by tools/build-programs into target/programs/libforward.so; used as
 *   LD_PRELOAD=target/programs/libforward.so target/programs/hook_bench
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

static cudaError_t (*real_cudaMalloc)(void **, size_t);
static cudaError_t (*real_cudaFree)(void *);
static cudaError_t (*real_cudaLaunchKernel)(const void *, dim3, dim3, void **, size_t, cudaStream_t);
static CUresult (*real_cuMemAlloc_v2)(CUdeviceptr *, size_t);
static CUresult (*real_cuMemFree_v2)(CUdeviceptr);
static CUresult (*real_cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                                       unsigned, unsigned, CUstream, void **, void **);

/* The next definition of `name` after this library; a missing one ends the process here
 * rather than with a jump to address 0 at the first call. */
static void *next(const char *name) {
    void *symbol = dlsym(RTLD_NEXT, name);
    if (symbol == NULL) {
        fprintf(stderr, "libforward: no %s after this library (is libcudart loaded?)\n", name);
        exit(127);
    }
    return symbol;
}

/* Every library the program was linked with is mapped before any constructor runs, so the
 * real functions can all be found here, once, and no call pays for a check. */
__attribute__((constructor)) static void resolve(void) {
    *(void **)&real_cudaMalloc = next("cudaMalloc");
    *(void **)&real_cudaFree = next("cudaFree");
    *(void **)&real_cudaLaunchKernel = next("cudaLaunchKernel");
    *(void **)&real_cuMemAlloc_v2 = next("cuMemAlloc_v2");
    *(void **)&real_cuMemFree_v2 = next("cuMemFree_v2");
    *(void **)&real_cuLaunchKernel = next("cuLaunchKernel");
}

cudaError_t cudaMalloc(void **devPtr, size_t size) { return real_cudaMalloc(devPtr, size); }

cudaError_t cudaFree(void *devPtr) { return real_cudaFree(devPtr); }

cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
                             size_t sharedMem, cudaStream_t stream) {
    return real_cudaLaunchKernel(func, gridDim, blockDim, args, sharedMem, stream);
}

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
    return real_cuMemAlloc_v2(dptr, bytesize);
}

CUresult cuMemFree_v2(CUdeviceptr dptr) { return real_cuMemFree_v2(dptr); }

CUresult cuLaunchKernel(CUfunction f, unsigned gridDimX, unsigned gridDimY, unsigned gridDimZ,
                        unsigned blockDimX, unsigned blockDimY, unsigned blockDimZ,
                        unsigned sharedMemBytes, CUstream hStream, void **kernelParams,
                        void **extra) {
    return real_cuLaunchKernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                               sharedMemBytes, hStream, kernelParams, extra);
}
