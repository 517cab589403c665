/* device_query: what NVIDIA's deviceQuery sample checks, written for itermem's tests.
 *
 * Built against NVIDIA's headers and linked to NVIDIA's libcudart.so.12 (tests/samples.rs) or,
 * with CUDA 13's headers, libcudart.so.13 (tests/cuda13.rs), run on cuda-shim. For every
 * device: the properties of cudaGetDeviceProperties must agree with cudaDeviceGetAttribute (CUDA
 * 13 removed some fields of struct cudaDeviceProp, compared only before 13, and added others),
 * and the memory the runtime reports with the device's size; peer access
 * is queried between every pair; cudaSetDeviceFlags/cudaGetDeviceFlags round-trip; and
 * cudaDeviceReset destroys the device's allocations and state, the next call starting afresh.
 * Prints PASS and exits 0, or names the failing call and exits 1. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

/* One property of struct cudaDeviceProp and the attribute that reports it. */
struct pair {
    const char *name;
    enum cudaDeviceAttr attr;
    long long value;
};

static void check_properties(int dev, const struct cudaDeviceProp *p) {
    const struct pair pairs[] = {
        {"major", cudaDevAttrComputeCapabilityMajor, p->major},
        {"minor", cudaDevAttrComputeCapabilityMinor, p->minor},
        {"multiProcessorCount", cudaDevAttrMultiProcessorCount, p->multiProcessorCount},
        {"warpSize", cudaDevAttrWarpSize, p->warpSize},
        {"maxThreadsPerBlock", cudaDevAttrMaxThreadsPerBlock, p->maxThreadsPerBlock},
        {"maxThreadsDim[0]", cudaDevAttrMaxBlockDimX, p->maxThreadsDim[0]},
        {"maxThreadsDim[1]", cudaDevAttrMaxBlockDimY, p->maxThreadsDim[1]},
        {"maxThreadsDim[2]", cudaDevAttrMaxBlockDimZ, p->maxThreadsDim[2]},
        {"maxGridSize[0]", cudaDevAttrMaxGridDimX, p->maxGridSize[0]},
        {"maxGridSize[1]", cudaDevAttrMaxGridDimY, p->maxGridSize[1]},
        {"maxGridSize[2]", cudaDevAttrMaxGridDimZ, p->maxGridSize[2]},
        {"sharedMemPerBlock", cudaDevAttrMaxSharedMemoryPerBlock, (long long)p->sharedMemPerBlock},
        {"totalConstMem", cudaDevAttrTotalConstantMemory, (long long)p->totalConstMem},
        {"regsPerBlock", cudaDevAttrMaxRegistersPerBlock, p->regsPerBlock},
        {"memPitch", cudaDevAttrMaxPitch, (long long)p->memPitch},
#if CUDART_VERSION < 13000
        {"clockRate", cudaDevAttrClockRate, p->clockRate},
        {"memoryClockRate", cudaDevAttrMemoryClockRate, p->memoryClockRate},
#endif
        {"memoryBusWidth", cudaDevAttrGlobalMemoryBusWidth, p->memoryBusWidth},
        {"l2CacheSize", cudaDevAttrL2CacheSize, p->l2CacheSize},
        {"maxThreadsPerMultiProcessor", cudaDevAttrMaxThreadsPerMultiProcessor,
         p->maxThreadsPerMultiProcessor},
        {"sharedMemPerMultiprocessor", cudaDevAttrMaxSharedMemoryPerMultiprocessor,
         (long long)p->sharedMemPerMultiprocessor},
        {"textureAlignment", cudaDevAttrTextureAlignment, (long long)p->textureAlignment},
        {"surfaceAlignment", cudaDevAttrSurfaceAlignment, (long long)p->surfaceAlignment},
#if CUDART_VERSION < 13000
        {"deviceOverlap", cudaDevAttrGpuOverlap, p->deviceOverlap},
        {"kernelExecTimeoutEnabled", cudaDevAttrKernelExecTimeout, p->kernelExecTimeoutEnabled},
        {"computeMode", cudaDevAttrComputeMode, p->computeMode},
#endif
        {"asyncEngineCount", cudaDevAttrAsyncEngineCount, p->asyncEngineCount},
        {"integrated", cudaDevAttrIntegrated, p->integrated},
        {"canMapHostMemory", cudaDevAttrCanMapHostMemory, p->canMapHostMemory},
        {"concurrentKernels", cudaDevAttrConcurrentKernels, p->concurrentKernels},
        {"ECCEnabled", cudaDevAttrEccEnabled, p->ECCEnabled},
        {"pciBusID", cudaDevAttrPciBusId, p->pciBusID},
        {"pciDeviceID", cudaDevAttrPciDeviceId, p->pciDeviceID},
        {"pciDomainID", cudaDevAttrPciDomainId, p->pciDomainID},
        {"tccDriver", cudaDevAttrTccDriver, p->tccDriver},
        {"unifiedAddressing", cudaDevAttrUnifiedAddressing, p->unifiedAddressing},
        {"managedMemory", cudaDevAttrManagedMemory, p->managedMemory},
        {"computePreemptionSupported", cudaDevAttrComputePreemptionSupported,
         p->computePreemptionSupported},
        {"cooperativeLaunch", cudaDevAttrCooperativeLaunch, p->cooperativeLaunch},
#if CUDART_VERSION < 13000
        {"cooperativeMultiDeviceLaunch", cudaDevAttrCooperativeMultiDeviceLaunch,
         p->cooperativeMultiDeviceLaunch},
#else
        {"deviceNumaConfig", cudaDevAttrNumaConfig, p->deviceNumaConfig},
        {"deviceNumaId", cudaDevAttrNumaId, p->deviceNumaId},
        {"mpsEnabled", cudaDevAttrMpsEnabled, p->mpsEnabled},
        {"hostNumaId", cudaDevAttrHostNumaId, p->hostNumaId},
        {"gpuPciDeviceID", cudaDevAttrGpuPciDeviceId, p->gpuPciDeviceID},
        {"gpuPciSubsystemID", cudaDevAttrGpuPciSubsystemId, p->gpuPciSubsystemID},
        {"hostNumaMultinodeIpcSupported", cudaDevAttrHostNumaMultinodeIpcSupported,
         p->hostNumaMultinodeIpcSupported},
#endif
        {"maxTexture1D", cudaDevAttrMaxTexture1DWidth, p->maxTexture1D},
        {"maxTexture2D[0]", cudaDevAttrMaxTexture2DWidth, p->maxTexture2D[0]},
        {"maxTexture2D[1]", cudaDevAttrMaxTexture2DHeight, p->maxTexture2D[1]},
        {"maxTexture3D[0]", cudaDevAttrMaxTexture3DWidth, p->maxTexture3D[0]},
        {"maxTexture3D[1]", cudaDevAttrMaxTexture3DHeight, p->maxTexture3D[1]},
        {"maxTexture3D[2]", cudaDevAttrMaxTexture3DDepth, p->maxTexture3D[2]},
        {"maxTexture1DLayered[0]", cudaDevAttrMaxTexture1DLayeredWidth, p->maxTexture1DLayered[0]},
        {"maxTexture1DLayered[1]", cudaDevAttrMaxTexture1DLayeredLayers, p->maxTexture1DLayered[1]},
        {"maxTexture2DLayered[0]", cudaDevAttrMaxTexture2DLayeredWidth, p->maxTexture2DLayered[0]},
        {"maxTexture2DLayered[1]", cudaDevAttrMaxTexture2DLayeredHeight, p->maxTexture2DLayered[1]},
        {"maxTexture2DLayered[2]", cudaDevAttrMaxTexture2DLayeredLayers, p->maxTexture2DLayered[2]},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        int value = -1;
        CHECK(cudaDeviceGetAttribute(&value, pairs[i].attr, dev));
        EXPECT(value == pairs[i].value, "device %d: cudaDeviceProp.%s is %lld, attribute %d is %d",
               dev, pairs[i].name, pairs[i].value, (int)pairs[i].attr, value);
    }
}

/* Allocates and copies on the current device, resets it, and checks what the reset did. */
static void check_reset(int dev) {
    const size_t size = 1 << 20;
    size_t free_before = 0, total = 0, free_now = 0;
    CHECK(cudaSetDevice(dev));
    CHECK(cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync));
    unsigned int flags = 0;
    CHECK(cudaGetDeviceFlags(&flags));
    EXPECT((flags & cudaDeviceScheduleMask) == cudaDeviceScheduleBlockingSync,
           "device %d: flags 0x%x after cudaSetDeviceFlags(BlockingSync)", dev, flags);
    EXPECT(flags & cudaDeviceMapHost, "device %d: cudaDeviceMapHost is implicit (0x%x)", dev,
           flags);
    EXPECT(cudaSetDeviceFlags(0x100) == cudaErrorInvalidValue, "unknown device flag accepted");
    EXPECT(cudaGetLastError() == cudaErrorInvalidValue, "last error not recorded");

    CHECK(cudaMemGetInfo(&free_before, &total));
    void *block = NULL, *pinned = NULL;
    cudaStream_t stream;
    cudaEvent_t event;
    CHECK(cudaMalloc(&block, size));
    CHECK(cudaMallocHost(&pinned, 4096));
    CHECK(cudaStreamCreate(&stream));
    CHECK(cudaEventCreate(&event));
    CHECK(cudaMemsetAsync(block, 7, size, stream));
    CHECK(cudaEventRecord(event, stream));
    CHECK(cudaMemGetInfo(&free_now, &total));
    EXPECT(free_now + size <= free_before, "device %d: %zu free after a 1 MiB allocation (%zu before)",
           dev, free_now, free_before);

    /* The reset waits for nothing the program must see and frees everything of the device. */
    CHECK(cudaDeviceReset());
    CHECK(cudaMemGetInfo(&free_now, &total));
    EXPECT(free_now == free_before, "device %d: %zu bytes free after cudaDeviceReset, %zu before",
           dev, free_now, free_before);
    CHECK(cudaGetDeviceFlags(&flags));
    EXPECT((flags & cudaDeviceScheduleMask) == cudaDeviceScheduleAuto,
           "device %d: flags 0x%x survived cudaDeviceReset", dev, flags);

    /* The device works again: a fresh allocation round-trips data. */
    unsigned char host[256], back[256];
    for (int i = 0; i < 256; i++) host[i] = (unsigned char)(i * 7 + dev);
    CHECK(cudaMalloc(&block, sizeof host));
    CHECK(cudaMemcpy(block, host, sizeof host, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(back, block, sizeof back, cudaMemcpyDeviceToHost));
    EXPECT(memcmp(host, back, sizeof host) == 0, "device %d: data differs after reset", dev);
    /* The runtime writes its whole struct cudaPointerAttributes: 24 bytes in CUDA 12, 88 in 13
     * (whose reserved words NVIDIA's runtime leaves undefined: only the fields are checked). */
    struct cudaPointerAttributes attributes;
    memset(&attributes, 0xAB, sizeof attributes);
    CHECK(cudaPointerGetAttributes(&attributes, block));
    EXPECT(attributes.type == cudaMemoryTypeDevice && attributes.device == dev &&
               attributes.devicePointer == block && attributes.hostPointer == NULL,
           "device %d: wrong attributes of a device block", dev);
#if CUDART_VERSION >= 13000
    /* -1: not localized to a locality domain (what NVIDIA's 13.5 runtime writes). */
    EXPECT(attributes.localityDomainOrdinal == -1, "device %d: localityDomainOrdinal not written",
           dev);
#endif
    CHECK(cudaFree(block));
    CHECK(cudaDeviceReset());
}

int main(void) {
    int count = 0, driver = 0, runtime = 0;
    CHECK(cudaGetDeviceCount(&count));
    EXPECT(count > 0, "no CUDA device");
    CHECK(cudaDriverGetVersion(&driver));
    CHECK(cudaRuntimeGetVersion(&runtime));
    printf("CUDA driver version %d.%d, runtime version %d.%d\n", driver / 1000,
           driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10);
    EXPECT(runtime > 0 && driver >= runtime, "driver %d older than the runtime %d", driver,
           runtime);
    printf("%d CUDA device(s)\n", count);

    for (int dev = 0; dev < count; dev++) {
        struct cudaDeviceProp prop;
        CHECK(cudaSetDevice(dev));
        CHECK(cudaGetDeviceProperties(&prop, dev));
        size_t free_bytes = 0, total = 0;
        CHECK(cudaMemGetInfo(&free_bytes, &total));
        printf("Device %d: \"%s\"\n", dev, prop.name);
        printf("  compute capability %d.%d, %d multiprocessors, warp size %d\n", prop.major,
               prop.minor, prop.multiProcessorCount, prop.warpSize);
        printf("  global memory %zu bytes (%zu free), L2 %d bytes, bus %d bits\n",
               prop.totalGlobalMem, free_bytes, prop.l2CacheSize, prop.memoryBusWidth);
        printf("  PCI %04x:%02x:%02x, unified addressing %s\n", prop.pciDomainID, prop.pciBusID,
               prop.pciDeviceID, prop.unifiedAddressing ? "yes" : "no");
        EXPECT(prop.name[0] != '\0', "device %d has no name", dev);
        EXPECT(total == prop.totalGlobalMem, "cudaMemGetInfo total %zu, totalGlobalMem %zu",
               total, prop.totalGlobalMem);
        EXPECT(free_bytes <= total, "free %zu > total %zu", free_bytes, total);
        check_properties(dev, &prop);
    }

    for (int a = 0; a < count; a++) {
        for (int b = 0; b < count; b++) {
            int can = -1;
            CHECK(cudaDeviceCanAccessPeer(&can, a, b));
            if (a == b) {
                EXPECT(can == 0, "device %d reports peer access to itself", a);
                continue;
            }
            printf("Peer access from device %d to device %d: %s\n", a, b, can ? "Yes" : "No");
        }
    }
    EXPECT(cudaDeviceCanAccessPeer(&driver, 0, count) == cudaErrorInvalidDevice,
           "peer query of device %d accepted", count);
    cudaGetLastError();

    for (int dev = 0; dev < count; dev++) check_reset(dev);
    printf("PASS\n");
    return 0;
}
