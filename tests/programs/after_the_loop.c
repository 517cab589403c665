/*
 * after_the_loop.c — a training loop, then one large allocation that fits on the device only if
 * nothing else holds memory: as an evaluation pass or a checkpoint after training does. Each
 * iteration allocates a 1 MiB and a 2 MiB block, fills them, copies one into the other, reads it
 * back and frees both. Then it allocates BIG bytes (command line), fills it and checks it; with
 * `managed`, as managed memory (an allocation no itermem allocator serves).
 *
 * Usage: after_the_loop ITERS BIG [managed]. Prints "loop ok" and "big ok", or the failing call.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                          \
    do {                                                                                     \
        cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess) {                                                             \
            fprintf(stderr, "after_the_loop: %s failed: %s\n", #call, cudaGetErrorName(e_)); \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

enum { MIB = 1 << 20 };

static void fill_and_check(unsigned char *device, size_t bytes, unsigned char seed) {
    unsigned char *host = malloc(bytes), *back = malloc(bytes);
    for (size_t i = 0; i < bytes; i++) host[i] = (unsigned char)(seed + i);
    CHECK(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(back, device, bytes, cudaMemcpyDeviceToHost));
    if (memcmp(host, back, bytes) != 0) {
        fprintf(stderr, "after_the_loop: a block read back differs\n");
        exit(1);
    }
    free(host);
    free(back);
}

int main(int argc, char **argv) {
    if (argc != 3 && !(argc == 4 && strcmp(argv[3], "managed") == 0)) {
        fprintf(stderr, "usage: after_the_loop ITERS BIG [managed]\n");
        return 2;
    }
    int iters = atoi(argv[1]);
    size_t big = strtoull(argv[2], NULL, 10);
    for (int it = 0; it < iters; it++) {
        unsigned char *small, *large;
        CHECK(cudaMalloc((void **)&small, MIB));
        CHECK(cudaMalloc((void **)&large, 2 * MIB));
        fill_and_check(small, MIB, (unsigned char)it);
        CHECK(cudaMemcpy(large, small, MIB, cudaMemcpyDeviceToDevice));
        fill_and_check(large + MIB, MIB, (unsigned char)(it + 1));
        CHECK(cudaFree(small));
        CHECK(cudaFree(large));
    }
    printf("loop ok\n");
    unsigned char *block;
    if (argc == 4) {
        CHECK(cudaMallocManaged((void **)&block, big, cudaMemAttachGlobal));
    } else {
        CHECK(cudaMalloc((void **)&block, big));
    }
    fill_and_check(block, big, 7);
    CHECK(cudaFree(block));
    printf("big ok\n");
    return 0;
}
