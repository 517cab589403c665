/*
 * two_streams.c — a training-like loop whose tensors change streams between tenants: each
 * iteration a kernel on stream 1 fills tensor a slowly, a is freed (its kernel may still be
 * running: the host does not wait), then tensor b of the same size is allocated and filled on
 * stream 2 and read back. An allocator that hands b the memory of a without making stream 2
 * wait for stream 1 lets the late writes of a's kernel overwrite b.
 *
 * Usage: two_streams [--iters N]  (default 24). Prints "wrong N" (iterations whose b was
 * overwritten) and "ok" when there were none; exits 1 otherwise.
 */
#define _DEFAULT_SOURCE
#include <cuda_runtime.h>
#include <cuda_shim.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(call)                                                                       \
    do {                                                                                  \
        cudaError_t e_ = (call);                                                          \
        if (e_ != cudaSuccess) {                                                          \
            fprintf(stderr, "two_streams: %s failed: %s\n", #call, cudaGetErrorName(e_)); \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

enum { N = 1 << 16 };

/* fill(int *dst, int value, int sleep_us): sleeps, then writes value into all N ints */
static void k_fill(void **args) {
    int *dst = *(int **)args[0];
    int value = *(int *)args[1];
    int sleep_us = *(int *)args[2];
    if (sleep_us > 0) usleep((useconds_t)sleep_us);
    for (int i = 0; i < N; i++) dst[i] = value;
}

static void fill(int *dst, int value, int sleep_us, cudaStream_t s) {
    dim3 one = {1, 1, 1};
    void *args[] = {&dst, &value, &sleep_us};
    CHECK(cudaLaunchKernel((const void *)k_fill, one, one, args, 0, s));
}

int main(int argc, char **argv) {
    int iters = 24;
    if (argc == 3 && strcmp(argv[1], "--iters") == 0) iters = atoi(argv[2]);
    size_t sizes[] = {sizeof(int *), sizeof(int), sizeof(int)};
    CHECK(cudaShimRegisterKernel(k_fill, "fill", 3, sizes, 0));
    cudaStream_t s1, s2;
    CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    static int host[N];
    int wrong = 0;
    for (int it = 0; it < iters; it++) {
        int *a, *b;
        CHECK(cudaMalloc((void **)&a, N * sizeof(int)));
        fill(a, 1, 20000, s1);
        CHECK(cudaFree(a));
        CHECK(cudaMalloc((void **)&b, N * sizeof(int)));
        fill(b, 2, 0, s2);
        CHECK(cudaStreamSynchronize(s1)); /* a's kernel has written by now */
        CHECK(cudaMemcpyAsync(host, b, N * sizeof(int), cudaMemcpyDeviceToHost, s2));
        CHECK(cudaStreamSynchronize(s2));
        wrong += host[0] != 2 || host[N - 1] != 2;
        CHECK(cudaFree(b));
    }
    printf("wrong %d\n", wrong);
    if (wrong) return 1;
    printf("ok\n");
    return 0;
}
