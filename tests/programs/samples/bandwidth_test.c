/* bandwidth_test: what NVIDIA's bandwidthTest sample measures, written for itermem's tests.
 *
 * Built against NVIDIA's headers and linked to NVIDIA's libcudart.so.12 (tests/samples.rs), run
 * on cuda-shim. On every device: host-to-device, device-to-host and device-to-device copies
 * from pageable memory, from cudaMallocHost memory and from cudaHostAlloc memory (default,
 * write-combined, and portable|mapped through its device pointer), each timed with events and
 * its data verified. Prints PASS and exits 0, or names the failing call and exits 1. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

enum { SIZE = 4 << 20, REPEAT = 8 };

enum host_kind { PAGEABLE, MALLOC_HOST, HOST_ALLOC, WRITE_COMBINED, MAPPED };
static const char *const KIND_NAMES[] = {"pageable", "cudaMallocHost", "cudaHostAlloc",
                                         "write-combined", "portable|mapped"};

static void *host_alloc(enum host_kind kind) {
    void *p = NULL;
    switch (kind) {
    case PAGEABLE:
        p = malloc(SIZE);
        EXPECT(p != NULL, "malloc");
        break;
    case MALLOC_HOST: CHECK(cudaMallocHost(&p, SIZE)); break;
    case HOST_ALLOC: CHECK(cudaHostAlloc(&p, SIZE, cudaHostAllocDefault)); break;
    case WRITE_COMBINED: CHECK(cudaHostAlloc(&p, SIZE, cudaHostAllocWriteCombined)); break;
    case MAPPED: CHECK(cudaHostAlloc(&p, SIZE, cudaHostAllocPortable | cudaHostAllocMapped)); break;
    }
    return p;
}

static void host_free(enum host_kind kind, void *p) {
    if (kind == PAGEABLE)
        free(p);
    else
        CHECK(cudaFreeHost(p));
}

static void fill(unsigned char *p, unsigned seed) {
    for (size_t i = 0; i < SIZE; i++) p[i] = (unsigned char)((i * 2654435761u) >> 13 ^ seed);
}

/* Copies SIZE bytes REPEAT times between `start` and `stop`; returns GB/s. Pinned memory is
 * copied asynchronously on the legacy stream, pageable memory synchronously, as the sample does. */
static double timed_copy(void *dst, const void *src, enum cudaMemcpyKind dir, int async,
                         cudaEvent_t start, cudaEvent_t stop) {
    CHECK(cudaEventRecord(start, 0));
    for (int r = 0; r < REPEAT; r++) {
        if (async)
            CHECK(cudaMemcpyAsync(dst, src, SIZE, dir, 0));
        else
            CHECK(cudaMemcpy(dst, src, SIZE, dir));
    }
    CHECK(cudaEventRecord(stop, 0));
    CHECK(cudaEventSynchronize(stop));
    float ms = -1;
    CHECK(cudaEventElapsedTime(&ms, start, stop));
    EXPECT(ms >= 0, "elapsed time %f ms", ms);
    return ms > 0 ? (double)SIZE * REPEAT / (ms * 1e6) : 0.0;
}

static void measure(int dev, enum host_kind kind) {
    unsigned char *in = host_alloc(kind), *out = host_alloc(kind);
    void *d_a = NULL, *d_b = NULL;
    cudaEvent_t start, stop;
    CHECK(cudaMalloc(&d_a, SIZE));
    CHECK(cudaMalloc(&d_b, SIZE));
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    int async = kind != PAGEABLE;
    unsigned seed = (unsigned)(dev * 16 + kind);
    fill(in, seed);
    memset(out, 0, SIZE);

    double h2d = timed_copy(d_a, in, cudaMemcpyHostToDevice, async, start, stop);
    double d2d = timed_copy(d_b, d_a, cudaMemcpyDeviceToDevice, 1, start, stop);
    double d2h = timed_copy(out, d_b, cudaMemcpyDeviceToHost, async, start, stop);
    EXPECT(memcmp(in, out, SIZE) == 0, "device %d, %s: data differs after H2D, D2D, D2H", dev,
           KIND_NAMES[kind]);

    if (kind == MAPPED) {
        /* Mapped memory has a device address; a device-to-device copy reads it as the GPU would. */
        void *mapped = NULL;
        CHECK(cudaHostGetDevicePointer(&mapped, in, 0));
        memset(out, 0, SIZE);
        CHECK(cudaMemcpy(d_a, mapped, SIZE, cudaMemcpyDefault));
        CHECK(cudaMemcpy(out, d_a, SIZE, cudaMemcpyDefault));
        EXPECT(memcmp(in, out, SIZE) == 0, "device %d: data differs through the mapped pointer",
               dev);
    }
    printf("device %d  %-16s  H2D %8.2f GB/s  D2H %8.2f GB/s  D2D %8.2f GB/s\n", dev,
           KIND_NAMES[kind], h2d, d2h, d2d);

    CHECK(cudaEventDestroy(start));
    CHECK(cudaEventDestroy(stop));
    CHECK(cudaFree(d_a));
    CHECK(cudaFree(d_b));
    host_free(kind, in);
    host_free(kind, out);
}

int main(void) {
    int count = 0;
    CHECK(cudaGetDeviceCount(&count));
    EXPECT(count > 0, "no CUDA device");
    for (int dev = 0; dev < count; dev++) {
        CHECK(cudaSetDevice(dev));
        /* Before the device is used: mapped pinned memory and blocking synchronisation. */
        CHECK(cudaSetDeviceFlags(cudaDeviceMapHost | cudaDeviceScheduleBlockingSync));
        unsigned int flags = 0;
        CHECK(cudaGetDeviceFlags(&flags));
        EXPECT((flags & (cudaDeviceMapHost | cudaDeviceScheduleMask)) ==
                   (cudaDeviceMapHost | cudaDeviceScheduleBlockingSync),
               "device %d: flags 0x%x", dev, flags);
        struct cudaDeviceProp prop;
        CHECK(cudaGetDeviceProperties(&prop, dev));
        EXPECT(prop.canMapHostMemory, "device %d cannot map host memory", dev);
        printf("Device %d: %s, %d bytes per copy, %d copies\n", dev, prop.name, SIZE, REPEAT);
        for (int kind = PAGEABLE; kind <= MAPPED; kind++) measure(dev, (enum host_kind)kind);
        CHECK(cudaDeviceSynchronize());
    }
    printf("PASS\n");
    return 0;
}
