/* topology_query: what NVIDIA's topologyQuery sample asks, written for itermem's tests.
 *
 * Built against NVIDIA's headers and linked to NVIDIA's libcudart.so.12 (tests/samples.rs), run
 * on cuda-shim. Every P2P attribute between every ordered pair of devices (which must agree with
 * cudaDeviceCanAccessPeer), the errors for a device and itself or an unknown attribute, and each
 * device's host atomics. Prints PASS and exits 0, or names the failing call and exits 1. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"

int main(void) {
    int count = 0;
    CHECK(cudaGetDeviceCount(&count));
    EXPECT(count > 0, "no CUDA device");
    const struct {
        const char *name;
        enum cudaDeviceP2PAttr attr;
    } attrs[] = {
        {"performance rank", cudaDevP2PAttrPerformanceRank},
        {"access supported", cudaDevP2PAttrAccessSupported},
        {"native atomics", cudaDevP2PAttrNativeAtomicSupported},
        {"CUDA array access", cudaDevP2PAttrCudaArrayAccessSupported},
    };
    for (int a = 0; a < count; a++) {
        for (int b = 0; b < count; b++) {
            int value = -1;
            if (a == b) {
                EXPECT(cudaDeviceGetP2PAttribute(&value, cudaDevP2PAttrAccessSupported, a, b) ==
                           cudaErrorInvalidDevice,
                       "device %d is its own peer", a);
                EXPECT(cudaGetLastError() == cudaErrorInvalidDevice, "last error");
                continue;
            }
            printf("GPU%d <-> GPU%d:\n", a, b);
            int values[4];
            for (int i = 0; i < 4; i++) {
                CHECK(cudaDeviceGetP2PAttribute(&values[i], attrs[i].attr, a, b));
                printf("  * %s: %d\n", attrs[i].name, values[i]);
                EXPECT(values[i] >= 0, "%s is %d", attrs[i].name, values[i]);
            }
            int can = -1;
            CHECK(cudaDeviceCanAccessPeer(&can, a, b));
            EXPECT(can == values[1], "cudaDeviceCanAccessPeer %d, access supported %d", can,
                   values[1]);
            EXPECT(values[1] || !values[2], "atomics without access");
            EXPECT(cudaDeviceGetP2PAttribute(&value, (enum cudaDeviceP2PAttr)99, a, b) ==
                       cudaErrorInvalidValue,
                   "an unknown attribute was answered");
            cudaGetLastError();
        }
    }
    int value;
    EXPECT(cudaDeviceGetP2PAttribute(&value, cudaDevP2PAttrAccessSupported, 0, count) ==
               cudaErrorInvalidDevice,
           "device %d accepted", count);
    cudaGetLastError();
    for (int dev = 0; dev < count; dev++) {
        int atomics = -1;
        CHECK(cudaDeviceGetAttribute(&atomics, cudaDevAttrHostNativeAtomicSupported, dev));
        printf("GPU%d <-> CPU:\n  * native atomics: %s\n", dev, atomics ? "yes" : "no");
    }
    printf("PASS\n");
    return 0;
}
