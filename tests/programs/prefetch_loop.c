/*
 * prefetch_loop.c — a training-like loop that loads its next input before it releases the last
 * one, as `for x in loader: x = x.cuda()` does in Python (the old tensor is freed when the name
 * is rebound, after the new one exists): each input lives a little longer than an iteration,
 * past the allocation of its successor. Each iteration uploads the next input, sums the current
 * one into a temporary, scales it into an output, reads the output back and frees the
 * temporaries; then frees the previous input.
 *
 * With --pinned-cache, each input reaches the device through page-locked staging blocks, as
 * PyTorch's pinned-memory cache serves `x.pin_memory()`: a free block is reused, and a new one
 * is allocated (cudaHostAlloc) when the cache finds all of its blocks still in flight, which here
 * a pseudo-random test of the iteration decides; past STAGING_BLOCKS blocks the oldest is given
 * back (cudaFreeHost). So host allocations come at points that change from one iteration to
 * the next, as they do under torch.
 *
 * Usage: prefetch_loop [--iters N] [--pinned-cache]  (default 12 iterations). Prints "sum I S"
 * per iteration (S depends on every byte of the input and of the device's arithmetic),
 * "host_allocs K" with --pinned-cache, and "ok".
 */
#include <cuda_runtime.h>
#include <cuda_shim.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                         \
    do {                                                                                    \
        cudaError_t e_ = (call);                                                            \
        if (e_ != cudaSuccess) {                                                            \
            fprintf(stderr, "prefetch_loop: %s failed: %s\n", #call, cudaGetErrorName(e_)); \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)

enum { N = 1 << 18 };

/* scale(const unsigned *x, unsigned *y, unsigned factor): y = x * factor, element-wise */
static void k_scale(void **args) {
    const unsigned *x = *(const unsigned **)args[0];
    unsigned *y = *(unsigned **)args[1];
    unsigned factor = *(unsigned *)args[2];
    for (int i = 0; i < N; i++) y[i] = x[i] * factor;
}

static void scale(const unsigned *x, unsigned *y, unsigned factor) {
    dim3 one = {1, 1, 1};
    void *args[] = {&x, &y, &factor};
    CHECK(cudaLaunchKernel((const void *)k_scale, one, one, args, 0, 0));
}

/* The input of iteration `it` (host side). */
static void make_input(unsigned *host, int it) {
    for (int i = 0; i < N; i++) host[i] = (unsigned)(i * 2654435761u) ^ (unsigned)it;
}

enum { STAGING_BLOCKS = 3 };

/* The pinned staging cache of --pinned-cache: blocks[0] is the newest. */
static struct {
    int on;
    unsigned *blocks[STAGING_BLOCKS];
    int count;
    int allocs;
} staging;

/* The staging block for iteration `it`'s input: a new one when the cache has none or finds
 * its blocks in flight (irregularly, after a hash of `it`), else the newest. */
static unsigned *staging_block(int it) {
    int in_flight = ((unsigned)it * 2654435761u >> 7) % 3 == 0;
    if (staging.count == 0 || in_flight) {
        if (staging.count == STAGING_BLOCKS) CHECK(cudaFreeHost(staging.blocks[--staging.count]));
        memmove(staging.blocks + 1, staging.blocks, staging.count * sizeof(staging.blocks[0]));
        CHECK(cudaHostAlloc((void **)&staging.blocks[0], N * sizeof(unsigned), 0));
        staging.count++;
        staging.allocs++;
    }
    return staging.blocks[0];
}

static unsigned *upload(const unsigned *host, int it) {
    const unsigned *from = host;
    if (staging.on) {
        unsigned *block = staging_block(it);
        memcpy(block, host, N * sizeof(unsigned));
        from = block;
    }
    unsigned *x;
    CHECK(cudaMalloc((void **)&x, N * sizeof(unsigned)));
    CHECK(cudaMemcpy(x, from, N * sizeof(unsigned), cudaMemcpyHostToDevice));
    return x;
}

int main(int argc, char **argv) {
    int iters = 12;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
            iters = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--pinned-cache") == 0) {
            staging.on = 1;
        } else {
            fprintf(stderr, "usage: prefetch_loop [--iters N] [--pinned-cache]\n");
            return 2;
        }
    }
    size_t sizes[] = {sizeof(void *), sizeof(void *), sizeof(unsigned)};
    CHECK(cudaShimRegisterKernel(k_scale, "scale", 3, sizes, 0));
    static unsigned host[N];
    make_input(host, 0);
    unsigned *x = upload(host, 0);
    for (int it = 0; it < iters; it++) {
        make_input(host, it + 1);
        unsigned *next = upload(host, it + 1); /* the next input, while x is still held */
        unsigned *t, *y;
        CHECK(cudaMalloc((void **)&t, N * sizeof(unsigned)));
        scale(x, t, 3);
        CHECK(cudaMalloc((void **)&y, N * sizeof(unsigned)));
        scale(t, y, 5);
        CHECK(cudaFree(t));
        CHECK(cudaMemcpy(host, y, N * sizeof(unsigned), cudaMemcpyDeviceToHost));
        CHECK(cudaFree(y));
        unsigned long long sum = 0;
        for (int i = 0; i < N; i++) sum += host[i];
        printf("sum %d %llu\n", it, sum);
        CHECK(cudaFree(x)); /* the last input goes when the name takes the next one */
        x = next;
    }
    CHECK(cudaFree(x));
    while (staging.count > 0) CHECK(cudaFreeHost(staging.blocks[--staging.count]));
    if (staging.on) printf("host_allocs %d\n", staging.allocs);
    printf("ok\n");
    return 0;
}
