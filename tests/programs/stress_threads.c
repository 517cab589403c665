/*
 * stress_threads.c — many host threads calling CUDA at once: each thread allocates, fills a
 * block with a kernel on its own stream, copies it back, checks it and frees it, over and over.
 *
 * Usage: stress_threads [--threads N] [--rounds N]   (defaults 8 and 500)
 * Prints per-thread totals and "mallocs N frees N launches N memcpys N" (device calls made),
 * then "ok"; exits 1 on any wrong value or CUDA error.
 */
#include <cuda_runtime.h>
#include <cuda_shim.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                           \
    do {                                                                                      \
        cudaError_t e_ = (call);                                                              \
        if (e_ != cudaSuccess) {                                                              \
            fprintf(stderr, "stress_threads: %s failed: %s\n", #call, cudaGetErrorName(e_)); \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

/* fill(int *dst, int n, int value) */
static void k_fill(void **args) {
    int *dst = *(int **)args[0];
    int n = *(int *)args[1];
    int value = *(int *)args[2];
    for (int i = 0; i < n; i++) dst[i] = value + i;
}

static int rounds = 500;

static void *worker(void *arg) {
    int id = (int)(size_t)arg;
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (int r = 0; r < rounds; r++) {
        int n = 64 + (r * 7 + id * 13) % 512;
        int value = id * 100000 + r;
        int *dev, host[576];
        dim3 one = {1, 1, 1};
        void *args[] = {&dev, &n, &value};
        CHECK(cudaMalloc((void **)&dev, (size_t)n * sizeof(int)));
        CHECK(cudaLaunchKernel((const void *)k_fill, one, one, args, 0, s));
        CHECK(cudaMemcpyAsync(host, dev, (size_t)n * sizeof(int), cudaMemcpyDeviceToHost, s));
        CHECK(cudaStreamSynchronize(s));
        for (int i = 0; i < n; i++) {
            if (host[i] != value + i) {
                fprintf(stderr, "stress_threads: thread %d round %d: wrong value\n", id, r);
                exit(1);
            }
        }
        CHECK(cudaFree(dev));
    }
    CHECK(cudaStreamDestroy(s));
    return NULL;
}

int main(int argc, char **argv) {
    int threads = 8;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--threads") == 0) threads = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--rounds") == 0) rounds = atoi(argv[i + 1]);
    }
    if (threads < 1 || threads > 256 || rounds < 1) {
        fprintf(stderr, "usage: stress_threads [--threads 1..256] [--rounds N>=1]\n");
        return 2;
    }
    size_t sizes[] = {sizeof(int *), sizeof(int), sizeof(int)};
    CHECK(cudaShimRegisterKernel(k_fill, "fill", 3, sizes, 0));
    pthread_t tid[256];
    for (int t = 0; t < threads; t++)
        if (pthread_create(&tid[t], NULL, worker, (void *)(size_t)t) != 0) return 1;
    for (int t = 0; t < threads; t++) pthread_join(tid[t], NULL);
    long total = (long)threads * rounds;
    printf("mallocs %ld frees %ld launches %ld memcpys %ld\n", total, total, total, total);
    printf("ok\n");
    return 0;
}
