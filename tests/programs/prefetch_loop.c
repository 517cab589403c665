/*
 * prefetch_loop.c — a training-like loop that loads its next input before it releases the last
 * one, as `for x in loader: x = x.cuda()` does in Python (the old tensor is freed when the name
 * is rebound, after the new one exists): each input lives a little longer than an iteration,
 * past the allocation of its successor. Each iteration uploads the next input, sums the current
 * one into a temporary, scales it into an output, reads the output back and frees the
 * temporaries; then frees the previous input.
 *
 * Usage: prefetch_loop [--iters N]  (default 12). Prints "sum I S" per iteration (S depends on
 * every byte of the input and of the device's arithmetic) and "ok".
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

static unsigned *upload(const unsigned *host) {
    unsigned *x;
    CHECK(cudaMalloc((void **)&x, N * sizeof(unsigned)));
    CHECK(cudaMemcpy(x, host, N * sizeof(unsigned), cudaMemcpyHostToDevice));
    return x;
}

int main(int argc, char **argv) {
    int iters = 12;
    if (argc == 3 && strcmp(argv[1], "--iters") == 0) iters = atoi(argv[2]);
    size_t sizes[] = {sizeof(void *), sizeof(void *), sizeof(unsigned)};
    CHECK(cudaShimRegisterKernel(k_scale, "scale", 3, sizes, 0));
    static unsigned host[N];
    make_input(host, 0);
    unsigned *x = upload(host);
    for (int it = 0; it < iters; it++) {
        make_input(host, it + 1);
        unsigned *next = upload(host); /* the next input, while x is still held */
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
    printf("ok\n");
    return 0;
}
