/*
 * reset_midway.c — a training loop, cudaDeviceReset, and the same loop again, as a program that
 * resets the device between two phases does (NVIDIA's samples reset before they exit). Each
 * phase allocates a 1 MiB weights block that lives through the phase and is never freed (the
 * reset takes it); each iteration allocates three blocks, fills them by copies, checks them and
 * frees them.
 *
 * Usage: reset_midway ITERS. Prints "phase N ok" for each phase, or the failing call.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                         \
    do {                                                                                    \
        cudaError_t e_ = (call);                                                            \
        if (e_ != cudaSuccess) {                                                            \
            fprintf(stderr, "reset_midway: %s failed: %s\n", #call, cudaGetErrorName(e_)); \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)

enum { KIB = 1 << 10 };

/* Fills `bytes` of `device` from a pattern of `seed` and checks what comes back, through
 * `through` (a device block at least as large) when it is not NULL. */
static void fill_and_check(unsigned char *device, unsigned char *through, size_t bytes, int seed) {
    unsigned char *host = malloc(bytes), *back = malloc(bytes);
    for (size_t i = 0; i < bytes; i++) host[i] = (unsigned char)(seed * 31 + i);
    CHECK(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice));
    if (through != NULL) {
        CHECK(cudaMemcpy(through, device, bytes, cudaMemcpyDeviceToDevice));
        device = through;
    }
    CHECK(cudaMemcpy(back, device, bytes, cudaMemcpyDeviceToHost));
    if (memcmp(host, back, bytes) != 0) {
        fprintf(stderr, "reset_midway: a block read back differs\n");
        exit(1);
    }
    free(host);
    free(back);
}

static void phase(int number, int iters) {
    unsigned char *weights;
    CHECK(cudaMalloc((void **)&weights, 1024 * KIB));
    fill_and_check(weights, NULL, 1024 * KIB, number);
    for (int it = 0; it < iters; it++) {
        unsigned char *a, *b, *c;
        CHECK(cudaMalloc((void **)&a, 256 * KIB));
        CHECK(cudaMalloc((void **)&b, 512 * KIB));
        CHECK(cudaMalloc((void **)&c, 128 * KIB));
        fill_and_check(a, b, 256 * KIB, it);
        fill_and_check(c, b + 256 * KIB, 128 * KIB, it + 1);
        CHECK(cudaFree(a));
        CHECK(cudaFree(b));
        CHECK(cudaFree(c));
    }
    printf("phase %d ok\n", number);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: reset_midway ITERS\n");
        return 2;
    }
    int iters = atoi(argv[1]);
    phase(1, iters);
    CHECK(cudaDeviceReset());
    phase(2, iters);
    CHECK(cudaDeviceReset());
    return 0;
}
