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

/* A process without CUDA loads this library too (LD_PRELOAD reaches every program a command
 * starts, valgrind's launcher among them), so a function that is not found is no error until it
 * is called: each pointer starts at a stub saying so, which the constructor replaces when the
 * real function is there. */
static _Noreturn void missing(const char *name) {
    fprintf(stderr, "libforward: no %s after this library (is libcudart loaded?)\n", name);
    exit(127);
}

static cudaError_t missing_cudaMalloc(void **p, size_t n) {
    (void)p, (void)n;
    missing("cudaMalloc");
}
static cudaError_t missing_cudaFree(void *p) {
    (void)p;
    missing("cudaFree");
}
static cudaError_t missing_cudaLaunchKernel(const void *f, dim3 g, dim3 b, void **a, size_t m,
                                            cudaStream_t s) {
    (void)f, (void)g, (void)b, (void)a, (void)m, (void)s;
    missing("cudaLaunchKernel");
}
static CUresult missing_cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
    (void)p, (void)n;
    missing("cuMemAlloc_v2");
}
static CUresult missing_cuMemFree_v2(CUdeviceptr p) {
    (void)p;
    missing("cuMemFree_v2");
}
static CUresult missing_cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                       unsigned bx, unsigned by, unsigned bz, unsigned m,
                                       CUstream s, void **p, void **e) {
    (void)f, (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)m, (void)s, (void)p,
        (void)e;
    missing("cuLaunchKernel");
}

static cudaError_t (*real_cudaMalloc)(void **, size_t) = missing_cudaMalloc;
static cudaError_t (*real_cudaFree)(void *) = missing_cudaFree;
static cudaError_t (*real_cudaLaunchKernel)(const void *, dim3, dim3, void **, size_t,
                                            cudaStream_t) = missing_cudaLaunchKernel;
static CUresult (*real_cuMemAlloc_v2)(CUdeviceptr *, size_t) = missing_cuMemAlloc_v2;
static CUresult (*real_cuMemFree_v2)(CUdeviceptr) = missing_cuMemFree_v2;
static CUresult (*real_cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned,
                                       unsigned, unsigned, unsigned, CUstream, void **,
                                       void **) = missing_cuLaunchKernel;

/* Every library the program was linked with is mapped before any constructor runs, so the
 * real functions can all be found here, once, and no call pays for a check. */
__attribute__((constructor)) static void resolve(void) {
    void *symbol;
#define RESOLVE(name) \
    if ((symbol = dlsym(RTLD_NEXT, #name)) != NULL) *(void **)&real_##name = symbol
    RESOLVE(cudaMalloc);
    RESOLVE(cudaFree);
    RESOLVE(cudaLaunchKernel);
    RESOLVE(cuMemAlloc_v2);
    RESOLVE(cuMemFree_v2);
    RESOLVE(cuLaunchKernel);
#undef RESOLVE
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
