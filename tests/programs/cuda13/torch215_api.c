/*
 * torch215_api.c — the CUDA 13 runtime functions torch 2.15 imports beyond the shim's CUDA 12
 * set (docs/cuda13.md), called as a CUDA 13 program calls them: built against NVIDIA's CUDA 13
 * headers and linked to NVIDIA's libcudart.so.13 (tests/cuda13.rs), run on the shim's. Prints
 * PASS.
 *
 * Kernels are host functions registered with the shim's cudaShimRegisterKernel, found with
 * dlsym (NVIDIA's runtime, which this is linked to, has no such function). nvcc 13's launch path
 * (__cudaGetKernel once per stub, then __cudaLaunchKernel) is written out as nvcc generates it;
 * its prototypes are those of NVIDIA's crt/device_functions.h, declared only for nvcc there.
 */
#define _GNU_SOURCE
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "../samples/check.h"

extern cudaError_t __cudaGetKernel(cudaKernel_t *, const void *);
extern cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim,
                                      void **args, size_t sharedMem, cudaStream_t stream);

#define EXPECT_ERR(call, code)                                                             \
    do {                                                                                   \
        cudaError_t e_ = (call);                                                           \
        EXPECT(e_ == (code), "%s returned %d (%s), expected %s\n", #call, (int)e_,         \
               cudaGetErrorName(e_), #code);                                               \
        (void)cudaGetLastError();                                                          \
    } while (0)

/* add(int *value, int amount): *value += amount */
static void k_add(void **args) {
    int *value = *(int **)args[0];
    *value += *(int *)args[1];
}

static void k_unregistered(void **args) { (void)args; }

static int destroyed;
static void destroy(void *ptr) { __atomic_store_n(&destroyed, *(int *)ptr, __ATOMIC_SEQ_CST); }

int main(void) {
    typedef cudaError_t (*Register)(void (*)(void **), const char *, int, const size_t *,
                                    unsigned long long);
    Register register_kernel = (Register)dlsym(RTLD_DEFAULT, "cudaShimRegisterKernel");
    EXPECT(register_kernel != NULL, "not on cuda-shim\n");
    size_t sizes[] = {sizeof(int *), sizeof(int)};
    CHECK(register_kernel(k_add, "add", 2, sizes, 0));

    int *value;
    CHECK(cudaMallocManaged((void **)&value, sizeof(int), cudaMemAttachGlobal));
    *value = 1;
    dim3 one = {1, 1, 1};

    /* nvcc 13's launch path. */
    cudaKernel_t kernel = NULL;
    CHECK(__cudaGetKernel(&kernel, (const void *)k_add));
    EXPECT(kernel != NULL, "no kernel handle\n");
    int amount = 2;
    void *args[] = {&value, &amount};
    CHECK(__cudaLaunchKernel(kernel, one, one, args, 0, 0));
    CHECK(cudaDeviceSynchronize());
    EXPECT(*value == 3, "value %d after __cudaLaunchKernel\n", *value);
    cudaKernel_t none = NULL;
    EXPECT_ERR(__cudaGetKernel(&none, (const void *)k_unregistered),
               cudaErrorInvalidDeviceFunction);
    EXPECT_ERR(__cudaLaunchKernel(none, one, one, args, 0, 0), cudaErrorInvalidDeviceFunction);
    dim3 zero = {0, 1, 1};
    EXPECT_ERR(__cudaLaunchKernel(kernel, zero, one, args, 0, 0), cudaErrorInvalidConfiguration);
    CHECK(cudaKernelSetAttributeForDevice(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          1024, 0));
    EXPECT_ERR(cudaKernelSetAttributeForDevice(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               1024, 99),
               cudaErrorInvalidDevice);
    CHECK(cudaKernelSetAttributeForDevice(kernel, cudaFuncAttributeSharedMemoryMode,
                                          cudaSharedMemoryModePreferOversizedSharedMemory, 0));
    EXPECT_ERR(cudaKernelSetAttributeForDevice(kernel, cudaFuncAttributeSharedMemoryMode, 5, 0),
               cudaErrorInvalidValue);

    /* Cooperative launches and occupancy. */
    int blocks = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, (const void *)k_add, 128, 0));
    EXPECT(blocks > 0, "%d blocks per SM\n", blocks);
    CHECK(cudaLaunchCooperativeKernel((const void *)k_add, one, one, args, 0, 0));
    CHECK(cudaDeviceSynchronize());
    EXPECT(*value == 5, "value %d after cudaLaunchCooperativeKernel\n", *value);
    int sms = 0;
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    dim3 huge = {(unsigned)(blocks * sms + 1), 1, 1};
    dim3 block = {128, 1, 1};
    EXPECT_ERR(cudaLaunchCooperativeKernel((const void *)k_add, huge, block, args, 0, 0),
               cudaErrorCooperativeLaunchTooLarge);
    EXPECT(*value == 5, "value %d after a launch too large\n", *value);

    /* Graph memory: none. */
    unsigned long long used = 99;
    CHECK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &used));
    EXPECT(used == 0, "graph memory %llu\n", used);
    used = 0;
    CHECK(cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrReservedMemHigh, &used));
    used = 1;
    EXPECT_ERR(cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrReservedMemHigh, &used),
               cudaErrorInvalidValue);
    EXPECT_ERR(cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &used),
               cudaErrorInvalidValue);
    EXPECT_ERR(cudaDeviceGetGraphMemAttribute(99, cudaGraphMemAttrUsedMemHigh, &used),
               cudaErrorInvalidDevice);

    /* Graphs and capture: a graph that does not exist, a stream that does not capture. */
    cudaStream_t stream;
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaGraph_t graph = (cudaGraph_t)(uintptr_t)0x1234;
    cudaGraphNode_t node;
    struct cudaGraphNodeParams params = {0};
    EXPECT_ERR(cudaGraphAddNode(&node, graph, NULL, NULL, 0, &params), cudaErrorInvalidValue);
    cudaGraphConditionalHandle handle;
    EXPECT_ERR(cudaGraphConditionalHandleCreate(&handle, graph, 0, 0), cudaErrorInvalidValue);
    EXPECT_ERR(cudaStreamBeginCaptureToGraph(stream, graph, NULL, NULL, 0,
                                             cudaStreamCaptureModeGlobal),
               cudaErrorInvalidValue);
    EXPECT_ERR(cudaStreamUpdateCaptureDependencies(stream, NULL, NULL, 0, 0),
               cudaErrorIllegalState);

    /* User objects: counted; the destructor runs once the last reference goes. */
    static int payload = 42;
    cudaUserObject_t object;
    CHECK(cudaUserObjectCreate(&object, &payload, destroy, 2, cudaUserObjectNoDestructorSync));
    EXPECT_ERR(cudaUserObjectCreate(&object, &payload, destroy, 1, 0), cudaErrorInvalidValue);
    EXPECT_ERR(cudaGraphRetainUserObject(graph, object, 1, 0), cudaErrorInvalidValue);
    CHECK(cudaUserObjectRetain(object, 1));
    CHECK(cudaUserObjectRelease(object, 2));
    EXPECT(__atomic_load_n(&destroyed, __ATOMIC_SEQ_CST) == 0, "destroyed too early\n");
    EXPECT_ERR(cudaUserObjectRelease(object, 2), cudaErrorInvalidValue);
    CHECK(cudaUserObjectRelease(object, 1));
    for (int i = 0; i < 5000 && __atomic_load_n(&destroyed, __ATOMIC_SEQ_CST) == 0; i++) {
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    EXPECT(destroyed == 42, "destructor not run (%d)\n", destroyed);
    EXPECT_ERR(cudaUserObjectRelease(object, 1), cudaErrorInvalidValue);

    /* Libraries: no image loads on the shim. */
    cudaLibrary_t library;
    static const char image[] = "not a cubin";
    EXPECT_ERR(cudaLibraryLoadData(&library, image, NULL, NULL, 0, NULL, NULL, 0),
               cudaErrorNoKernelImageForDevice);
    EXPECT_ERR(cudaLibraryLoadData(&library, NULL, NULL, NULL, 0, NULL, NULL, 0),
               cudaErrorInvalidValue);
    EXPECT_ERR(cudaLibraryLoadFromFile(&library, "/nonexistent/x.cubin", NULL, NULL, 0, NULL,
                                       NULL, 0),
               cudaErrorFileNotFound);
    EXPECT_ERR(cudaLibraryLoadFromFile(&library, "/proc/self/exe", NULL, NULL, 0, NULL, NULL, 0),
               cudaErrorNoKernelImageForDevice);
    library = (cudaLibrary_t)(uintptr_t)0x1234;
    cudaKernel_t from_library;
    unsigned count;
    void *global;
    size_t bytes;
    EXPECT_ERR(cudaLibraryGetKernel(&from_library, library, "k"), cudaErrorInvalidResourceHandle);
    EXPECT_ERR(cudaLibraryGetKernelCount(&count, library), cudaErrorInvalidResourceHandle);
    EXPECT_ERR(cudaLibraryGetGlobal(&global, &bytes, library, "g"),
               cudaErrorInvalidResourceHandle);
    EXPECT_ERR(cudaLibraryGetManaged(&global, &bytes, library, "g"),
               cudaErrorInvalidResourceHandle);
    EXPECT_ERR(cudaLibraryGetUnifiedFunction(&global, library, "f"),
               cudaErrorInvalidResourceHandle);
    EXPECT_ERR(cudaLibraryUnload(library), cudaErrorInvalidResourceHandle);

    CHECK(cudaStreamDestroy(stream));
    CHECK(cudaFree(value));
    CHECK(cudaGetLastError());
    printf("PASS\n");
    return 0;
}
