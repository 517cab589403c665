/*
 * contexts.c — cuda-shim's context life cycle, through the C ABI (compiled against
 * cuda-shim/include, linked with -lcudart -lcuda): cudaDeviceReset / cuDevicePrimaryCtxReset,
 * cudaSetDeviceFlags, cuCtxCreate / cuCtxDestroy and their entry points. Run with
 * CUDA_SHIM_DEVICES=2 by tests/contexts.rs.
 *
 * Usage: contexts CASE      (reset, created, entry_points)
 * Each case exits 1 with a message on the first mismatch, and prints "CASE ok" otherwise.
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <cuda_shim.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPECT(cond)                                                                     \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "%s:%d: expectation failed: %s\n", __FILE__, __LINE__, #cond); \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

#define EXPECT_CODE(call, code)                                                            \
    do {                                                                                   \
        int got_ = (int)(call);                                                            \
        if (got_ != (int)(code)) {                                                         \
            fprintf(stderr, "%s:%d: %s returned %d (%s), expected %d\n", __FILE__, __LINE__, \
                    #call, got_, cudaGetErrorName((cudaError_t)got_), (int)(code));        \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

#define OK(call) EXPECT_CODE(call, 0)

static const dim3 one = {1, 1, 1};

/* fault(int code): the device faults with `code` */
static void k_fault(void **args) { cudaShimRaiseDeviceError((cudaError_t) * (int *)args[0]); }

static void state(int device, unsigned *flags, int *active) {
    OK(cuDevicePrimaryCtxGetState(device, flags, active));
}

/* cudaDeviceReset destroys the primary context's allocations (not stream-ordered ones), page-
 * locked memory, streams, events, flags, peer access and a sticky fault, leaves the context
 * current and inactive, and the next runtime call makes it active again. */
static void reset(void) {
    const size_t size = 1 << 20;
    size_t free0, total, free_now;
    unsigned flags;
    int active;
    OK(cudaSetDevice(0));
    OK(cudaMemGetInfo(&free0, &total));
    void *block, *pooled, *pinned;
    cudaStream_t stream;
    cudaEvent_t event;
    OK(cudaMalloc(&block, size));
    OK(cudaMallocAsync(&pooled, size, 0));
    OK(cudaStreamSynchronize(0));
    OK(cudaMallocHost(&pinned, 4096));
    OK(cudaStreamCreate(&stream));
    OK(cudaEventCreate(&event));
    OK(cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync));
    OK(cudaDeviceEnablePeerAccess(1, 0));
    state(0, &flags, &active); /* CU_CTX_MAP_HOST: implicit in every context */
    EXPECT(flags == (CU_CTX_SCHED_BLOCKING_SYNC | CU_CTX_MAP_HOST) && active == 1);
    CUcontext primary;
    OK(cuCtxGetCurrent(&primary));

    int code = cudaErrorIllegalAddress;
    void *args[] = {&code};
    OK(cudaLaunchKernel((const void *)k_fault, one, one, args, 0, 0));
    EXPECT_CODE(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
    void *refused;
    EXPECT_CODE(cudaMalloc(&refused, 16), cudaErrorIllegalAddress);

    OK(cudaDeviceReset());
    state(0, &flags, &active);
    EXPECT(flags == CU_CTX_MAP_HOST && active == 0);
    CUcontext current;
    OK(cuCtxGetCurrent(&current));
    EXPECT(current == primary);
    (void)cudaGetLastError(); /* the error recorded before the reset, if any */
    EXPECT_CODE(cudaGetLastError(), cudaSuccess);

    /* The fault is gone; only the stream-ordered allocation is left. */
    OK(cudaMemGetInfo(&free_now, &total));
    EXPECT(free_now == free0 - size);
    state(0, &flags, &active);
    EXPECT(active == 1);
    unsigned device_flags;
    OK(cudaGetDeviceFlags(&device_flags));
    EXPECT(device_flags == cudaDeviceMapHost);
    EXPECT_CODE(cudaFree(block), cudaErrorInvalidValue);
    EXPECT_CODE(cudaFreeHost(pinned), cudaErrorInvalidValue);
    EXPECT_CODE(cudaStreamQuery(stream), cudaErrorInvalidResourceHandle);
    EXPECT_CODE(cudaEventQuery(event), cudaErrorInvalidResourceHandle);
    (void)cudaGetLastError();
    OK(cudaMemsetAsync(pooled, 1, size, 0));
    OK(cudaFreeAsync(pooled, 0));
    OK(cudaDeviceEnablePeerAccess(1, 0)); /* the reset disabled it */
    OK(cudaDeviceDisablePeerAccess(1));
    OK(cudaDeviceSynchronize());
    OK(cudaMemGetInfo(&free_now, &total));
    EXPECT(free_now == free0);

    /* Device 1 was not reset. */
    OK(cudaSetDevice(1));
    void *other;
    OK(cudaMalloc(&other, 256));
    OK(cudaDeviceReset());
    OK(cudaMemGetInfo(&free_now, &total));
    EXPECT(free_now == total);
    printf("reset ok\n");
}

/* A context made with cuCtxCreate owns its allocations: they survive a reset of the primary
 * context and go with the context; cudaDeviceReset while it is current leaves it alone. */
static void created(void) {
    const size_t size = 1 << 20;
    size_t free0, total, free_now;
    OK(cuInit(0));
    CUcontext ctx, current;
    OK(cuCtxCreate(&ctx, CU_CTX_SCHED_SPIN | CU_CTX_MAP_HOST, 0));
    unsigned flags;
    OK(cuCtxGetFlags(&flags));
    EXPECT(flags == (CU_CTX_SCHED_SPIN | CU_CTX_MAP_HOST));
    OK(cuMemGetInfo(&free0, &total));
    CUdeviceptr owned;
    OK(cuMemAlloc(&owned, size));
    /* The runtime uses the context current to the thread: this allocation is the context's. */
    void *runtime_block;
    OK(cudaMalloc(&runtime_block, size));
    OK(cudaGetDeviceFlags(&flags));
    EXPECT(flags == (CU_CTX_SCHED_SPIN | CU_CTX_MAP_HOST));
    OK(cudaDeviceReset()); /* only the runtime's state for this context */
    OK(cudaMemset(runtime_block, 3, size));
    OK(cuCtxPopCurrent(&current));
    EXPECT(current == ctx);

    /* The primary context's reset spares the created context's memory. */
    OK(cudaSetDevice(0));
    void *primary_block;
    OK(cudaMalloc(&primary_block, size));
    OK(cudaDeviceReset());
    OK(cuCtxPushCurrent(ctx));
    OK(cuMemsetD8(owned, 7, size));
    unsigned char byte = 0;
    OK(cuMemcpyDtoH(&byte, owned + size - 1, 1));
    EXPECT(byte == 7);
    OK(cuMemGetInfo(&free_now, &total));
    EXPECT(free_now == free0 - 2 * size);

    /* Destroyed: popped, its memory back, its handle refused. */
    OK(cuCtxDestroy(ctx));
    OK(cuCtxGetCurrent(&current));
    EXPECT(current != ctx);
    OK(cudaMemGetInfo(&free_now, &total));
    EXPECT(free_now == free0);
    EXPECT_CODE(cuCtxPushCurrent(ctx), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_CODE(cuCtxDestroy(ctx), CUDA_ERROR_INVALID_CONTEXT);
    CUcontext primary;
    OK(cuDevicePrimaryCtxRetain(&primary, 0));
    EXPECT_CODE(cuCtxDestroy(primary), CUDA_ERROR_INVALID_CONTEXT);
    OK(cuDevicePrimaryCtxRelease(0));
    EXPECT_CODE(cuCtxDestroy(NULL), CUDA_ERROR_INVALID_VALUE);
    EXPECT_CODE(cuCtxCreate(&ctx, 0x100, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT_CODE(cuCtxCreate(&ctx, CU_CTX_SCHED_SPIN | CU_CTX_SCHED_YIELD, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT_CODE(cuCtxCreate(&ctx, 0, 2), CUDA_ERROR_INVALID_DEVICE);
    EXPECT_CODE(cudaSetDeviceFlags(cudaDeviceScheduleSpin | cudaDeviceScheduleYield), cudaErrorInvalidValue);

    /* Streams and events of a created context are its own. */
    OK(cuCtxCreate(&ctx, 0, 1));
    CUstream stream;
    OK(cuStreamCreate(&stream, 0));
    CUevent event;
    OK(cuEventCreate(&event, 0));
    OK(cuEventRecord(event, stream));
    OK(cuStreamSynchronize(stream));
    unsigned version = 0;
    OK(cuCtxGetApiVersion(ctx, &version));
    EXPECT(version == 3020);
    OK(cuCtxDestroy(ctx));
    EXPECT_CODE(cuStreamQuery(stream), CUDA_ERROR_INVALID_HANDLE);
    EXPECT_CODE(cuEventQuery(event), CUDA_ERROR_INVALID_HANDLE);
    EXPECT_CODE(cuCtxGetApiVersion(ctx, &version), CUDA_ERROR_INVALID_CONTEXT);
    printf("created ok\n");
}

/* cuGetProcAddress hands out the variant of each version. */
static void entry_points(void) {
    OK(cuInit(0));
    struct {
        const char *name;
        int version;
        void *expected;
    } rows[] = {
        {"cuCtxCreate", 3020, (void *)cuCtxCreate_v2},
        {"cuCtxCreate", 11040, (void *)cuCtxCreate_v3},
        {"cuCtxCreate", 12090, (void *)cuCtxCreate_v4},
        {"cuCtxDestroy", 12090, (void *)cuCtxDestroy_v2},
        {"cuDevicePrimaryCtxReset", 12090, (void *)cuDevicePrimaryCtxReset_v2},
        {"cuDevicePrimaryCtxSetFlags", 12090, (void *)cuDevicePrimaryCtxSetFlags_v2},
        {"cuCtxGetFlags", 12090, (void *)cuCtxGetFlags},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        void *fn = NULL;
        CUdriverProcAddressQueryResult status;
        OK(cuGetProcAddress(rows[i].name, &fn, rows[i].version, CU_GET_PROC_ADDRESS_DEFAULT, &status));
        EXPECT(fn == rows[i].expected);
    }
    CUcontext ctx;
    CUctxCreateParams params = {NULL, 0, NULL};
    OK(cuCtxCreate_v4(&ctx, &params, 0, 0));
    OK(cuCtxDestroy(ctx));
    OK(cuCtxCreate_v3(&ctx, NULL, 0, 0, 0));
    OK(cuCtxDestroy(ctx));
    params.numExecAffinityParams = 1;
    params.execAffinityParams = (CUexecAffinityParam *)&params;
    EXPECT_CODE(cuCtxCreate_v4(&ctx, &params, 0, 0), CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY);
    printf("entry_points ok\n");
}

int main(int argc, char **argv) {
    static const struct {
        const char *name;
        void (*run)(void);
    } cases[] = {{"reset", reset}, {"created", created}, {"entry_points", entry_points}};
    size_t fault[] = {sizeof(int)};
    if (argc != 2) {
        fprintf(stderr, "usage: %s CASE\n", argv[0]);
        return 2;
    }
    OK(cudaShimRegisterKernel(k_fault, "fault", 1, fault, 0));
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (strcmp(argv[1], cases[i].name) == 0) {
            cases[i].run();
            return 0;
        }
    }
    fprintf(stderr, "unknown case %s\n", argv[1]);
    return 2;
}
