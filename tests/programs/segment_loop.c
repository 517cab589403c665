/*
 * segment_loop.c — a caching allocator's iteration in miniature: the program allocates its
 * device memory once, as three segments (activations and weights of 4 MiB each, a scratch
 * segment of 1 MiB), and every tensor of every iteration lives inside one of them, as under
 * PyTorch's caching allocator. Each iteration uploads a batch into the first half of the
 * activations segment, copies the weights' first half after it (a device-to-device copy
 * between the two large segments, like a weight slice copied into an activation), scales the
 * activations into the scratch segment with a kernel, reads the scratch segment back, and
 * uploads the next weights (the "optimizer step").
 *
 * Usage: segment_loop [--iters N]  (default 12 iterations). Prints "sum I S" per iteration (S
 * depends on every byte the device computed) and "ok".
 */
#include <cuda_runtime.h>
#include <cuda_shim.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                        \
    do {                                                                                   \
        cudaError_t e_ = (call);                                                           \
        if (e_ != cudaSuccess) {                                                           \
            fprintf(stderr, "segment_loop: %s failed: %s\n", #call, cudaGetErrorName(e_)); \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

enum {
    SEGMENT = 4 << 20,         /* bytes of the activations and of the weights segments */
    HALF = SEGMENT / 2,        /* bytes of the batch, and of the weights' slice */
    SCRATCH = 1 << 20,         /* bytes of the scratch segment */
    N = SCRATCH / sizeof(unsigned), /* elements the kernel writes */
};

/* scale_sum(const unsigned *x, unsigned *y): y[i] = 3 x[i] + x[i + N] (reads 2 N elements) */
static void k_scale_sum(void **args) {
    const unsigned *x = *(const unsigned **)args[0];
    unsigned *y = *(unsigned **)args[1];
    for (int i = 0; i < N; i++) y[i] = 3 * x[i] + x[i + N];
}

static void fill(unsigned *host, size_t bytes, unsigned seed) {
    for (size_t i = 0; i < bytes / sizeof(unsigned); i++)
        host[i] = (unsigned)(i * 2654435761u) + seed * 0x9E3779B9u;
}

int main(int argc, char **argv) {
    int iters = 12;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
            iters = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: segment_loop [--iters N]\n");
            return 2;
        }
    }
    size_t sizes[] = {sizeof(void *), sizeof(void *)};
    CHECK(cudaShimRegisterKernel(k_scale_sum, "scale_sum", 2, sizes, 0));
    char *activations, *weights, *scratch;
    CHECK(cudaMalloc((void **)&activations, SEGMENT));
    CHECK(cudaMalloc((void **)&weights, SEGMENT));
    CHECK(cudaMalloc((void **)&scratch, SCRATCH));
    static unsigned host[SEGMENT / sizeof(unsigned)];
    fill(host, SEGMENT, 0);
    CHECK(cudaMemcpy(weights, host, SEGMENT, cudaMemcpyHostToDevice));
    dim3 one = {1, 1, 1};
    for (int it = 0; it < iters; it++) {
        fill(host, HALF, 1000 + it);
        CHECK(cudaMemcpy(activations, host, HALF, cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(activations + HALF, weights, HALF, cudaMemcpyDeviceToDevice));
        /* a kernel argument inside a segment: the slice at the batch's end */
        const char *x = activations + HALF - SCRATCH;
        void *args[] = {&x, &scratch};
        CHECK(cudaLaunchKernel((const void *)k_scale_sum, one, one, args, 0, 0));
        CHECK(cudaMemcpy(host, scratch, SCRATCH, cudaMemcpyDeviceToHost));
        unsigned long long sum = 0;
        for (int i = 0; i < N; i++) sum += host[i];
        printf("sum %d %llu\n", it, sum);
        fill(host, SEGMENT, it + 1);
        CHECK(cudaMemcpy(weights, host, SEGMENT, cudaMemcpyHostToDevice));
    }
    CHECK(cudaFree(scratch));
    CHECK(cudaFree(weights));
    CHECK(cudaFree(activations));
    printf("ok\n");
    return 0;
}
