/*
 * hook_bench.c — the workload of `itermem bench hooks`: times CUDA calls whose cost itermem's
 * hooks add to. Run it with and without LD_PRELOAD=libitermem.so; the difference is the hooks'.
 *
 * Usage: hook_bench [--live N] [--pairs N] [--launches N]
 *   --live N      allocations kept live during the measurement (default 10000)
 *   --pairs N     cudaMalloc+cudaFree pairs timed, and as many cuMemAlloc+cuMemFree pairs
 *                 (default 200000)
 *   --launches N  launches of an 8-parameter kernel (all pointers to live blocks) timed, through
 *                 cudaLaunchKernel and as many through cuLaunchKernel (default 200000)
 * Prints: malloc_free_pair_ns X, launch_ns X, driver_malloc_free_pair_ns X and driver_launch_ns X
 * (mean wall-clock ns per operation).
 */
#define _POSIX_C_SOURCE 199309L
#include <cuda.h>
#include <cuda_runtime.h>
#include <cuda_shim.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(call)                                                                       \
    do {                                                                                  \
        cudaError_t e_ = (call);                                                          \
        if (e_ != cudaSuccess) {                                                          \
            fprintf(stderr, "hook_bench: %s failed: %s\n", #call, cudaGetErrorName(e_)); \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

/* eight(p0..p5, n, x): does nothing; only its launch is measured */
static void k_eight(void **args) { (void)args; }

static long option(int argc, char **argv, const char *name, long fallback) {
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0) return strtol(argv[i + 1], NULL, 10);
    return fallback;
}

int main(int argc, char **argv) {
    long live = option(argc, argv, "--live", 10000);
    long pairs = option(argc, argv, "--pairs", 200000);
    long launches = option(argc, argv, "--launches", 200000);
    if (live < 8 || pairs < 1 || launches < 1) {
        fprintf(stderr, "hook_bench: --live must be >= 8, --pairs and --launches >= 1\n");
        return 2;
    }
    size_t sizes[8] = {8, 8, 8, 8, 8, 8, 8, 8};
    CHECK(cudaShimRegisterKernel(k_eight, "eight", 8, sizes, 0));
    void **blocks = malloc((size_t)live * sizeof *blocks);
    for (long i = 0; i < live; i++) CHECK(cudaMalloc(&blocks[i], 4096));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    double t0 = now_ns();
    for (long i = 0; i < pairs; i++) {
        void *p;
        CHECK(cudaMalloc(&p, 4096));
        CHECK(cudaFree(p));
    }
    double pair_ns = (now_ns() - t0) / (double)pairs;

    t0 = now_ns();
    for (long i = 0; i < pairs; i++) {
        CUdeviceptr p;
        CHECK((cudaError_t)cuMemAlloc(&p, 4096));
        CHECK((cudaError_t)cuMemFree(p));
    }
    double driver_pair_ns = (now_ns() - t0) / (double)pairs;

    dim3 one = {1, 1, 1};
    void *p[6];
    long n = 42;
    double x = 1.5;
    void *args[8] = {&p[0], &p[1], &p[2], &p[3], &p[4], &p[5], &n, &x};
    double launch_total = 0;
    for (long i = 0; i < launches; i++) {
        for (int k = 0; k < 6; k++) p[k] = blocks[(i * 6 + k * 997) % live];
        double t = now_ns();
        CHECK(cudaLaunchKernel((const void *)k_eight, one, one, args, 0, s));
        launch_total += now_ns() - t;
        if (i % 4096 == 4095) CHECK(cudaStreamSynchronize(s));
    }
    CHECK(cudaStreamSynchronize(s));

    CUfunction eight;
    CHECK(cudaGetFuncBySymbol((cudaFunction_t *)&eight, (const void *)k_eight));
    double driver_launch_total = 0;
    for (long i = 0; i < launches; i++) {
        for (int k = 0; k < 6; k++) p[k] = blocks[(i * 6 + k * 997) % live];
        double t = now_ns();
        CHECK((cudaError_t)cuLaunchKernel(eight, 1, 1, 1, 1, 1, 1, 0, (CUstream)s, args, NULL));
        driver_launch_total += now_ns() - t;
        if (i % 4096 == 4095) CHECK(cudaStreamSynchronize(s));
    }
    CHECK(cudaStreamSynchronize(s));
    printf("malloc_free_pair_ns %.1f\n", pair_ns);
    printf("launch_ns %.1f\n", launch_total / (double)launches);
    printf("driver_malloc_free_pair_ns %.1f\n", driver_pair_ns);
    printf("driver_launch_ns %.1f\n", driver_launch_total / (double)launches);
    for (long i = 0; i < live; i++) CHECK(cudaFree(blocks[i]));
    free(blocks);
    return 0;
}
