/* device_query_drv: what NVIDIA's deviceQueryDrv sample checks, through the driver API alone,
 * written for itermem's tests; plus the life of a context made with cuCtxCreate.
 *
 * Built against NVIDIA's cuda.h and linked with -lcuda (tests/samples.rs), run on cuda-shim.
 * Every device's name, memory and the attributes deviceQueryDrv prints; peer access between
 * every pair; then on each device a context of its own: created current, used, destroyed
 * (popped, its memory returned), with the thread's previous context current again; another
 * thread where it was current is told it was destroyed.
 * Prints PASS and exits 0, or names the failing call and exits 1. */
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SAMPLE_DRIVER_API
#include "check.h"

#define ATTR(a) {#a, a}
static const struct {
    const char *name;
    CUdevice_attribute attr;
} ATTRIBUTES[] = {
    ATTR(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
    ATTR(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
    ATTR(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
    ATTR(CU_DEVICE_ATTRIBUTE_CLOCK_RATE),
    ATTR(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE),
    ATTR(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH),
    ATTR(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE),
    ATTR(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH),
    ATTR(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH),
    ATTR(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT),
    ATTR(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH),
    ATTR(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT),
    ATTR(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH),
    ATTR(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_WIDTH),
    ATTR(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_LAYERS),
    ATTR(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_WIDTH),
    ATTR(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_HEIGHT),
    ATTR(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_LAYERS),
    ATTR(CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY),
    ATTR(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK),
    ATTR(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK),
    ATTR(CU_DEVICE_ATTRIBUTE_WARP_SIZE),
    ATTR(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR),
    ATTR(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK),
    ATTR(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X),
    ATTR(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y),
    ATTR(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z),
    ATTR(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X),
    ATTR(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y),
    ATTR(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z),
    ATTR(CU_DEVICE_ATTRIBUTE_MAX_PITCH),
    ATTR(CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT),
    ATTR(CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT),
    ATTR(CU_DEVICE_ATTRIBUTE_GPU_OVERLAP),
    ATTR(CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT),
    ATTR(CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT),
    ATTR(CU_DEVICE_ATTRIBUTE_INTEGRATED),
    ATTR(CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY),
    ATTR(CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS),
    ATTR(CU_DEVICE_ATTRIBUTE_ECC_ENABLED),
    ATTR(CU_DEVICE_ATTRIBUTE_TCC_DRIVER),
    ATTR(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING),
    ATTR(CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY),
    ATTR(CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED),
    ATTR(CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH),
    ATTR(CU_DEVICE_ATTRIBUTE_COOPERATIVE_MULTI_DEVICE_LAUNCH),
    ATTR(CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID),
    ATTR(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID),
    ATTR(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID),
    ATTR(CU_DEVICE_ATTRIBUTE_COMPUTE_MODE),
};

static int attribute(CUdevice dev, CUdevice_attribute attr) {
    int value = -1;
    CHECK(cuDeviceGetAttribute(&value, attr, dev));
    return value;
}

/* A context of its own on `dev`, made while `outer` (or nothing) is current. */
static void check_context(CUdevice dev, CUcontext outer) {
    const size_t size = 1 << 20;
    CUcontext ctx = NULL, current = NULL;
    CHECK(cuCtxCreate(&ctx, CU_CTX_SCHED_YIELD, dev));
    EXPECT(ctx != NULL && ctx != outer, "cuCtxCreate gave %p", (void *)ctx);
    CHECK(cuCtxGetCurrent(&current));
    EXPECT(current == ctx, "the new context is not current");
    CUdevice on = -1;
    CHECK(cuCtxGetDevice(&on));
    EXPECT(on == dev, "the context of device %d is on device %d", dev, on);
    unsigned int flags = 0;
    CHECK(cuCtxGetFlags(&flags));
    EXPECT((flags & CU_CTX_SCHED_MASK) == CU_CTX_SCHED_YIELD, "context flags 0x%x", flags);

    size_t free_before = 0, total = 0, free_now = 0;
    CHECK(cuMemGetInfo(&free_before, &total));
    CUdeviceptr block = 0;
    CHECK(cuMemAlloc(&block, size));
    unsigned char host[4096], back[4096];
    for (size_t i = 0; i < sizeof host; i++) host[i] = (unsigned char)(i * 13 + dev);
    CHECK(cuMemcpyHtoD(block, host, sizeof host));
    CHECK(cuMemcpyDtoH(back, block, sizeof back));
    EXPECT(memcmp(host, back, sizeof host) == 0, "device %d: data differs", dev);
    CUstream stream;
    CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    CHECK(cuMemsetD8Async(block, 0x5a, size, stream));
    CHECK(cuStreamSynchronize(stream));
    CHECK(cuMemGetInfo(&free_now, &total));
    EXPECT(free_now + size <= free_before, "device %d: %zu free after 1 MiB (%zu before)", dev,
           free_now, free_before);

    /* Destroying it pops it: the outer context is current again, and its memory is back. */
    CHECK(cuCtxDestroy(ctx));
    CHECK(cuCtxGetCurrent(&current));
    EXPECT(current == outer, "after cuCtxDestroy %p is current, not %p", (void *)current,
           (void *)outer);
    CUcontext primary = NULL;
    CHECK(cuDevicePrimaryCtxRetain(&primary, dev));
    CHECK(cuCtxPushCurrent(primary));
    CHECK(cuMemGetInfo(&free_now, &total));
    EXPECT(free_now == free_before, "device %d: %zu free after cuCtxDestroy, %zu before", dev,
           free_now, free_before);
    CHECK(cuCtxPopCurrent(&current));
    EXPECT(current == primary, "popped %p, not the primary context", (void *)current);
    CHECK(cuDevicePrimaryCtxRelease(dev));
}

/* A second thread makes a context current, waits until main destroyed it, then uses it. */
struct shared {
    CUcontext ctx;
    pthread_mutex_t lock;
    pthread_cond_t changed;
    int step; /* 1: current on the thread, 2: destroyed by main */
    CUresult after;
};

static void *other_thread(void *arg) {
    struct shared *s = arg;
    CUresult set = cuCtxSetCurrent(s->ctx);
    pthread_mutex_lock(&s->lock);
    s->step = 1;
    pthread_cond_broadcast(&s->changed);
    while (s->step != 2) pthread_cond_wait(&s->changed, &s->lock);
    pthread_mutex_unlock(&s->lock);
    s->after = set != CUDA_SUCCESS ? set : cuCtxSynchronize();
    return NULL;
}

static void check_destroyed_elsewhere(void) {
    struct shared s = {.step = 0, .after = CUDA_SUCCESS};
    pthread_mutex_init(&s.lock, NULL);
    pthread_cond_init(&s.changed, NULL);
    CHECK(cuCtxCreate(&s.ctx, 0, 0));
    pthread_t thread;
    EXPECT(pthread_create(&thread, NULL, other_thread, &s) == 0, "pthread_create");
    pthread_mutex_lock(&s.lock);
    while (s.step != 1) pthread_cond_wait(&s.changed, &s.lock);
    pthread_mutex_unlock(&s.lock);
    CHECK(cuCtxDestroy(s.ctx));
    pthread_mutex_lock(&s.lock);
    s.step = 2;
    pthread_cond_broadcast(&s.changed);
    pthread_mutex_unlock(&s.lock);
    pthread_join(thread, NULL);
    EXPECT(s.after == CUDA_ERROR_CONTEXT_IS_DESTROYED,
           "a context destroyed elsewhere answered %d on the thread where it is current", s.after);
}

int main(void) {
    CHECK(cuInit(0));
    int version = 0, count = 0;
    CHECK(cuDriverGetVersion(&version));
    printf("CUDA driver version %d.%d\n", version / 1000, version % 1000 / 10);
    CHECK(cuDeviceGetCount(&count));
    EXPECT(count > 0, "no CUDA device");
    printf("%d CUDA device(s)\n", count);

    for (int i = 0; i < count; i++) {
        CUdevice dev;
        char name[256];
        size_t bytes = 0;
        CHECK(cuDeviceGet(&dev, i));
        CHECK(cuDeviceGetName(name, sizeof name, dev));
        CHECK(cuDeviceTotalMem(&bytes, dev));
        printf("Device %d: \"%s\", %zu bytes\n", i, name, bytes);
        EXPECT(name[0] != '\0' && bytes > 0, "device %d: name \"%s\", %zu bytes", i, name, bytes);
        for (size_t a = 0; a < sizeof ATTRIBUTES / sizeof ATTRIBUTES[0]; a++)
            printf("  %-52s %d\n", ATTRIBUTES[a].name, attribute(dev, ATTRIBUTES[a].attr));
        EXPECT(attribute(dev, CU_DEVICE_ATTRIBUTE_WARP_SIZE) == 32, "warp size");
        EXPECT(attribute(dev, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT) > 0, "no multiprocessor");
        EXPECT(attribute(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) >= 1,
               "compute capability");
    }
    int value;
    EXPECT(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_MAX, 0) == CUDA_ERROR_INVALID_VALUE,
           "CU_DEVICE_ATTRIBUTE_MAX accepted");

    for (int a = 0; a < count; a++) {
        for (int b = 0; b < count; b++) {
            int can = -1;
            CHECK(cuDeviceCanAccessPeer(&can, a, b));
            if (a == b) {
                EXPECT(can == 0, "device %d reports peer access to itself", a);
                continue;
            }
            printf("Peer access from device %d to device %d: %s\n", a, b, can ? "Yes" : "No");
        }
    }

    /* A context of its own on every device: first with nothing current, then above another. */
    CUcontext none = NULL;
    CHECK(cuCtxGetCurrent(&none));
    EXPECT(none == NULL, "a context is current before any was made");
    for (int i = 0; i < count; i++) check_context(i, NULL);
    CUcontext outer = NULL;
    CHECK(cuCtxCreate(&outer, 0, 0));
    for (int i = 0; i < count; i++) check_context(i, outer);
    CHECK(cuCtxDestroy(outer));
    CUcontext current = NULL;
    CHECK(cuCtxGetCurrent(&current));
    EXPECT(current == NULL, "a context is current after all were destroyed");
    check_destroyed_elsewhere();
    printf("PASS\n");
    return 0;
}
