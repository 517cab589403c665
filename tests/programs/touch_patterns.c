/*
 * touch_patterns.c — kernel arguments in the forms itermem must resolve to allocations: a base
 * pointer, an interior pointer, a pointer inside a struct parameter, the same block twice, a
 * plain integer, and a pointer into a freed block. Device blocks are allocated first, in the
 * order a (id 1), b (id 2), c (id 3), d (id 4), so a recorded trace's ids are known.
 * Prints "ok" when every launch succeeded.
 */
#include <cuda_runtime.h>
#include <cuda_shim.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                                          \
    do {                                                                                     \
        cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess) {                                                             \
            fprintf(stderr, "touch_patterns: %s failed: %s\n", #call, cudaGetErrorName(e_)); \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

struct view {
    int rows;
    int cols;
    float *data; /* at offset 8 */
    double scale;
};

static void k_one(void **args) { (void)args; }
static void k_two(void **args) { (void)args; }
static void k_view(void **args) { (void)args; }
static void k_count(void **args) { (void)args; }

static void launch(const void *kernel, void **args) {
    dim3 one = {1, 1, 1};
    CHECK(cudaLaunchKernel(kernel, one, one, args, 0, 0));
}

int main(void) {
    size_t pointer[] = {sizeof(float *)};
    size_t two[] = {sizeof(float *), sizeof(float *)};
    size_t view[] = {sizeof(struct view)};
    size_t count[] = {sizeof(long)};
    CHECK(cudaShimRegisterKernel(k_one, "one", 1, pointer, 0));
    CHECK(cudaShimRegisterKernel(k_two, "two", 2, two, 0));
    CHECK(cudaShimRegisterKernel(k_view, "view", 1, view, 0));
    CHECK(cudaShimRegisterKernel(k_count, "count", 1, count, 0));
    float *a, *b, *c, *d;
    CHECK(cudaMalloc((void **)&a, 4096));
    CHECK(cudaMalloc((void **)&b, 4096));
    CHECK(cudaMalloc((void **)&c, 4096));
    CHECK(cudaMalloc((void **)&d, 4096));

    void *args_a[] = {&a};
    launch((const void *)k_one, args_a); /* base pointer: touches a */

    float *inside_b = b + 100;
    void *args_b[] = {&inside_b};
    launch((const void *)k_one, args_b); /* interior pointer: touches b */

    struct view v = {4, 8, c, 0.5};
    void *args_v[] = {&v};
    launch((const void *)k_view, args_v); /* pointer inside a struct: touches c */

    float *a1 = a + 1;
    void *args_aa[] = {&a, &a1};
    launch((const void *)k_two, args_aa); /* a twice: touches a once */

    long n = 12345;
    void *args_n[] = {&n};
    launch((const void *)k_count, args_n); /* no pointer: touches nothing */

    CHECK(cudaFree(d));
    float *stale = d + 8;
    void *args_d[] = {&stale};
    launch((const void *)k_one, args_d); /* freed block: touches nothing */

    CHECK(cudaDeviceSynchronize());
    CHECK(cudaFree(a));
    CHECK(cudaFree(b));
    CHECK(cudaFree(c));
    printf("ok\n");
    return 0;
}
