/* p2p_bandwidth: what NVIDIA's p2pBandwidthLatencyTest measures, written for itermem's tests,
 * with its kernels replaced by copies (cuda-shim runs no device code compiled by nvcc).
 *
 * Built against NVIDIA's headers and linked to NVIDIA's libcudart.so.12 (tests/samples.rs), run
 * on cuda-shim with two or more devices. For every ordered pair of devices, with peer access
 * disabled and then enabled: unidirectional and bidirectional bandwidth and a latency of small
 * copies, all with cudaMemcpyPeerAsync on non-blocking streams, timed with events (the second
 * direction's stream waits for the first's start event), each copy's data verified. Peer access
 * is enabled and disabled both ways, with the errors of doing either twice. Prints PASS and exits
 * 0, names the failing call and exits 1, or says WAIVED and exits 2 with fewer than 2 devices. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

enum { MAX_DEVICES = 16, SIZE = 2 << 20, REPEAT = 5, LATENCY_SIZE = 4, LATENCY_REPEAT = 100 };

static int count;
static void *buffers[MAX_DEVICES], *scratch[MAX_DEVICES];
static cudaStream_t streams[MAX_DEVICES];
static cudaEvent_t starts[MAX_DEVICES], stops[MAX_DEVICES];
static unsigned char *host;

/* Every byte of device `dev`'s buffer becomes a value telling `dev` and `round` apart. */
static unsigned char tag(int dev, int round) { return (unsigned char)(0x11 * dev + round + 1); }

static void verify(const void *device_ptr, int dev, size_t size, unsigned char expected,
                   const char *what) {
    CHECK(cudaSetDevice(dev));
    CHECK(cudaMemcpy(host, device_ptr, size, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < size; i++)
        EXPECT(host[i] == expected, "%s: byte %zu on device %d is 0x%02x, expected 0x%02x", what,
               i, dev, host[i], expected);
}

static float elapsed(int dev) {
    float ms = -1;
    CHECK(cudaSetDevice(dev));
    CHECK(cudaEventSynchronize(stops[dev]));
    CHECK(cudaEventElapsedTime(&ms, starts[dev], stops[dev]));
    EXPECT(ms >= 0, "elapsed %f ms", ms);
    return ms;
}

static void set_peer(int a, int b, int enable) {
    int can = 0;
    CHECK(cudaDeviceCanAccessPeer(&can, a, b));
    if (!can) return;
    CHECK(cudaSetDevice(a));
    if (enable) {
        CHECK(cudaDeviceEnablePeerAccess(b, 0));
        EXPECT(cudaDeviceEnablePeerAccess(b, 0) == cudaErrorPeerAccessAlreadyEnabled,
               "enabling %d -> %d twice", a, b);
    } else {
        CHECK(cudaDeviceDisablePeerAccess(b));
        EXPECT(cudaDeviceDisablePeerAccess(b) == cudaErrorPeerAccessNotEnabled,
               "disabling %d -> %d twice", a, b);
    }
    cudaGetLastError();
}

/* Unidirectional: a -> b on a's stream. Returns GB/s. */
static double one_way(int a, int b, int round) {
    CHECK(cudaSetDevice(a));
    CHECK(cudaMemsetAsync(buffers[a], tag(a, round), SIZE, streams[a]));
    CHECK(cudaEventRecord(starts[a], streams[a]));
    for (int r = 0; r < REPEAT; r++)
        CHECK(cudaMemcpyPeerAsync(buffers[b], b, buffers[a], a, SIZE, streams[a]));
    CHECK(cudaEventRecord(stops[a], streams[a]));
    CHECK(cudaStreamSynchronize(streams[a]));
    float ms = elapsed(a);
    verify(buffers[b], b, SIZE, tag(a, round), "one way");
    return ms > 0 ? (double)SIZE * REPEAT / (ms * 1e6) : 0.0;
}

/* Bidirectional: a -> b on a's stream and b -> a on b's, b's stream starting after a's start
 * event. Uses each device's scratch buffer as the destination. Returns GB/s. */
static double both_ways(int a, int b, int round) {
    CHECK(cudaSetDevice(a));
    CHECK(cudaMemsetAsync(buffers[a], tag(a, round), SIZE, streams[a]));
    CHECK(cudaSetDevice(b));
    CHECK(cudaMemsetAsync(buffers[b], tag(b, round), SIZE, streams[b]));
    CHECK(cudaStreamSynchronize(streams[b]));
    CHECK(cudaSetDevice(a));
    CHECK(cudaEventRecord(starts[a], streams[a]));
    CHECK(cudaStreamWaitEvent(streams[b], starts[a], 0));
    for (int r = 0; r < REPEAT; r++) {
        CHECK(cudaMemcpyPeerAsync(scratch[b], b, buffers[a], a, SIZE, streams[a]));
        CHECK(cudaMemcpyPeerAsync(scratch[a], a, buffers[b], b, SIZE, streams[b]));
    }
    CHECK(cudaSetDevice(b));
    CHECK(cudaEventRecord(stops[b], streams[b]));
    CHECK(cudaSetDevice(a));
    CHECK(cudaStreamWaitEvent(streams[a], stops[b], 0));
    CHECK(cudaEventRecord(stops[a], streams[a]));
    float ms = elapsed(a);
    verify(scratch[b], b, SIZE, tag(a, round), "both ways, a -> b");
    verify(scratch[a], a, SIZE, tag(b, round), "both ways, b -> a");
    return ms > 0 ? 2.0 * SIZE * REPEAT / (ms * 1e6) : 0.0;
}

/* Latency of small copies a -> b, in microseconds. */
static double latency(int a, int b, int round) {
    CHECK(cudaSetDevice(a));
    CHECK(cudaMemsetAsync(buffers[a], tag(a, round), LATENCY_SIZE, streams[a]));
    CHECK(cudaEventRecord(starts[a], streams[a]));
    for (int r = 0; r < LATENCY_REPEAT; r++)
        CHECK(cudaMemcpyPeerAsync(buffers[b], b, buffers[a], a, LATENCY_SIZE, streams[a]));
    CHECK(cudaEventRecord(stops[a], streams[a]));
    float ms = elapsed(a);
    verify(buffers[b], b, LATENCY_SIZE, tag(a, round), "latency");
    return ms * 1e3 / LATENCY_REPEAT;
}

int main(void) {
    CHECK(cudaGetDeviceCount(&count));
    if (count < 2) {
        printf("p2p_bandwidth needs at least 2 devices, found %d: WAIVED\n", count);
        return 2;
    }
    if (count > MAX_DEVICES) count = MAX_DEVICES;
    CHECK(cudaMallocHost((void **)&host, SIZE));
    for (int d = 0; d < count; d++) {
        CHECK(cudaSetDevice(d));
        CHECK(cudaStreamCreateWithFlags(&streams[d], cudaStreamNonBlocking));
        CHECK(cudaMalloc(&buffers[d], SIZE));
        CHECK(cudaMalloc(&scratch[d], SIZE));
        CHECK(cudaMemset(buffers[d], 0, SIZE));
        CHECK(cudaMemset(scratch[d], 0, SIZE));
        CHECK(cudaEventCreate(&starts[d]));
        CHECK(cudaEventCreate(&stops[d]));
        /* The memsets ran on the legacy stream, which the non-blocking streams do not wait for. */
        CHECK(cudaDeviceSynchronize());
    }
    int round = 0;
    for (int p2p = 0; p2p <= 1; p2p++) {
        printf("Peer access %s\n", p2p ? "enabled" : "disabled");
        for (int a = 0; a < count; a++) {
            for (int b = 0; b < count; b++) {
                if (a == b) continue;
                if (p2p) {
                    set_peer(a, b, 1);
                    set_peer(b, a, 1);
                }
                round++;
                double uni = one_way(a, b, round);
                double bi = both_ways(a, b, round);
                double lat = latency(a, b, round);
                printf("  GPU%d -> GPU%d: %8.2f GB/s one way, %8.2f GB/s both ways, %8.2f us\n",
                       a, b, uni, bi, lat);
                if (p2p) {
                    set_peer(a, b, 0);
                    set_peer(b, a, 0);
                }
            }
        }
    }
    for (int d = 0; d < count; d++) {
        CHECK(cudaSetDevice(d));
        CHECK(cudaEventDestroy(starts[d]));
        CHECK(cudaEventDestroy(stops[d]));
        CHECK(cudaStreamDestroy(streams[d]));
        CHECK(cudaFree(buffers[d]));
        CHECK(cudaFree(scratch[d]));
    }
    CHECK(cudaFreeHost(host));
    printf("PASS\n");
    return 0;
}
