/*
 * early_out.c — a tensor written once and then only read for a while before a gap, as a
 * framework reads an activation back to the host for logging: swap mode can start its copy-out
 * right after the write, while the reads run (an early copy-out), and let it leave the device
 * when both the copy and the last read have ended.
 *
 * Each iteration: a (4 MiB) is written from the weight x (1 MiB, allocated once) and read back
 * to the host; a kernel works on x for about a millisecond; a is read back again (its last use
 * before the gap); b (8 MiB) is written from x and folded into x, and freed; finally a is folded
 * into x and freed. x + a + b is the peak, so under a limit of 10 MB a must be away while b
 * lives.
 *
 * With --deviate N, from iteration N on every third iteration's middle kernel also writes a
 * (through an extra pointer argument that is NULL otherwise: the same kernel, so the program
 * stays in its period): a write between the copy-out that the plan starts after a's write and
 * a's last read, which makes that copy stale.
 *
 * Usage: early_out [--iters N] [--deviate N]  (default 40 iterations, no deviation). Prints
 * "sum I S R1 R2" per iteration (S over x, R1 and R2 over the read-backs of a: each depends on every byte)
 * and "ok".
 */
#include <cuda_runtime.h>
#include <cuda_shim.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(call)                                                                      \
    do {                                                                                 \
        cudaError_t e_ = (call);                                                         \
        if (e_ != cudaSuccess) {                                                         \
            fprintf(stderr, "early_out: %s failed: %s\n", #call, cudaGetErrorName(e_)); \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

enum { NX = 1 << 18, NA = 4 * NX, NB = 8 * NX };

/* spread(const unsigned *x, unsigned *y, unsigned n, unsigned salt): y[i] = x[i % NX] * 3 + salt + i */
static void k_spread(void **args) {
    const unsigned *x = *(const unsigned **)args[0];
    unsigned *y = *(unsigned **)args[1];
    unsigned n = *(unsigned *)args[2];
    unsigned salt = *(unsigned *)args[3];
    for (unsigned i = 0; i < n; i++) y[i] = x[i % NX] * 3u + salt + i;
    usleep(1000);
}

/* work(unsigned *x, unsigned *extra): x[i] = x[i] * 5 + 1, and extra[i] += x[i] if extra is not
 * NULL (NA elements); about a millisecond */
static void k_work(void **args) {
    unsigned *x = *(unsigned **)args[0];
    unsigned *extra = *(unsigned **)args[1];
    for (unsigned i = 0; i < NX; i++) x[i] = x[i] * 5u + 1u;
    if (extra)
        for (unsigned i = 0; i < NA; i++) extra[i] += x[i % NX];
    usleep(1000);
}

/* fold(const unsigned *y, unsigned *x, unsigned n): x[i % NX] ^= y[i] * 7 */
static void k_fold(void **args) {
    const unsigned *y = *(const unsigned **)args[0];
    unsigned *x = *(unsigned **)args[1];
    unsigned n = *(unsigned *)args[2];
    for (unsigned i = 0; i < n; i++) x[i % NX] ^= y[i] * 7u;
    usleep(1000);
}

static const dim3 one = {1, 1, 1};

static void spread(const unsigned *x, unsigned *y, unsigned n, unsigned salt) {
    void *args[] = {&x, &y, &n, &salt};
    CHECK(cudaLaunchKernel((const void *)k_spread, one, one, args, 0, 0));
}

static void work(unsigned *x, unsigned *extra) {
    void *args[] = {&x, &extra};
    CHECK(cudaLaunchKernel((const void *)k_work, one, one, args, 0, 0));
}

static void fold(const unsigned *y, unsigned *x, unsigned n) {
    void *args[] = {&y, &x, &n};
    CHECK(cudaLaunchKernel((const void *)k_fold, one, one, args, 0, 0));
}

static unsigned long long sum(const unsigned *v, unsigned n) {
    unsigned long long s = 0;
    for (unsigned i = 0; i < n; i++) s = s * 31u + v[i];
    return s;
}

int main(int argc, char **argv) {
    int iters = 40, deviate = -1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
            iters = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--deviate") == 0 && i + 1 < argc) {
            deviate = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: early_out [--iters N] [--deviate N]\n");
            return 2;
        }
    }
    size_t ptr = sizeof(void *), word = sizeof(unsigned);
    size_t spread_sizes[] = {ptr, ptr, word, word}, work_sizes[] = {ptr, ptr},
           fold_sizes[] = {ptr, ptr, word};
    CHECK(cudaShimRegisterKernel(k_spread, "spread", 4, spread_sizes, 0));
    CHECK(cudaShimRegisterKernel(k_work, "work", 2, work_sizes, 0));
    CHECK(cudaShimRegisterKernel(k_fold, "fold", 3, fold_sizes, 0));
    unsigned *host, *read1, *read2;
    CHECK(cudaMallocHost((void **)&host, NX * sizeof(unsigned)));
    CHECK(cudaMallocHost((void **)&read1, NA * sizeof(unsigned)));
    CHECK(cudaMallocHost((void **)&read2, NA * sizeof(unsigned)));
    for (unsigned i = 0; i < NX; i++) host[i] = i * 2654435761u;
    unsigned *x;
    CHECK(cudaMalloc((void **)&x, NX * sizeof(unsigned)));
    CHECK(cudaMemcpy(x, host, NX * sizeof(unsigned), cudaMemcpyHostToDevice));
    for (int it = 0; it < iters; it++) {
        unsigned *a, *b;
        CHECK(cudaMalloc((void **)&a, NA * sizeof(unsigned)));
        spread(x, a, NA, (unsigned)it);
        CHECK(cudaMemcpyAsync(read1, a, NA * sizeof(unsigned), cudaMemcpyDeviceToHost, 0));
        int write_a = deviate >= 0 && it >= deviate && (it - deviate) % 3 == 0;
        work(x, write_a ? a : NULL);
        CHECK(cudaMemcpyAsync(read2, a, NA * sizeof(unsigned), cudaMemcpyDeviceToHost, 0));
        CHECK(cudaMalloc((void **)&b, NB * sizeof(unsigned)));
        spread(x, b, NB, 7u);
        fold(b, x, NB);
        CHECK(cudaFree(b));
        fold(a, x, NA);
        CHECK(cudaFree(a));
        CHECK(cudaMemcpy(host, x, NX * sizeof(unsigned), cudaMemcpyDeviceToHost));
        printf("sum %d %llu %llu %llu\n", it, sum(host, NX), sum(read1, NA), sum(read2, NA));
    }
    CHECK(cudaFree(x));
    CHECK(cudaFreeHost(host));
    CHECK(cudaFreeHost(read1));
    CHECK(cudaFreeHost(read2));
    printf("ok\n");
    return 0;
}
