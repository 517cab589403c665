/*
 * pluggable.c — a program that routes its allocations through a pluggable allocator library,
 * as PyTorch does with CUDAPluggableAllocator(path, "itermem_malloc", "itermem_free"): the
 * library is dlopen'ed (never preloaded) and only its two functions are called. Each
 * iteration allocates blocks of mixed sizes on a stream, fills them, copies one into another,
 * reads it back, checks every byte and frees them on the stream.
 *
 * Usage: pluggable LIBRARY [--iters N] (default 12). Prints the allocations made and "ok".
 */
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#define CHECK(call)                                                                       \
    do {                                                                                  \
        cudaError_t e_ = (call);                                                          \
        if (e_ != cudaSuccess) {                                                          \
            fprintf(stderr, "pluggable: %s failed: %s\n", #call, cudaGetErrorName(e_)); \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

typedef void *(*AllocFn)(ssize_t size, int device, cudaStream_t stream);
typedef void (*FreeFn)(void *ptr, ssize_t size, int device, cudaStream_t stream);

enum { BLOCKS = 5 };
static const size_t sizes[BLOCKS] = {4096, 1 << 20, 300000, 65536, 2 << 20};

int main(int argc, char **argv) {
    if (argc != 2 && !(argc == 4 && strcmp(argv[2], "--iters") == 0)) {
        fprintf(stderr, "usage: pluggable LIBRARY [--iters N]\n");
        return 2;
    }
    int iters = argc == 4 ? atoi(argv[3]) : 12;
    void *library = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (library == NULL) {
        fprintf(stderr, "pluggable: %s\n", dlerror());
        return 1;
    }
    AllocFn alloc = (AllocFn)dlsym(library, "itermem_malloc");
    FreeFn release = (FreeFn)dlsym(library, "itermem_free");
    if (alloc == NULL || release == NULL) {
        fprintf(stderr, "pluggable: the allocator functions are missing\n");
        return 1;
    }
    cudaStream_t stream;
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    unsigned char *host = malloc(2 << 20), *back = malloc(2 << 20);
    long allocations = 0;
    for (int it = 0; it < iters; it++) {
        unsigned char *blocks[BLOCKS];
        for (int b = 0; b < BLOCKS; b++) {
            blocks[b] = alloc((ssize_t)sizes[b], 0, stream);
            if (blocks[b] == NULL) {
                fprintf(stderr, "pluggable: no memory for block %d of iteration %d\n", b, it);
                return 1;
            }
            allocations++;
            memset(host, (it * BLOCKS + b) & 0xff, sizes[b]);
            CHECK(cudaMemcpyAsync(blocks[b], host, sizes[b], cudaMemcpyHostToDevice, stream));
        }
        /* the 1 MiB block into the second half of the 2 MiB one, then read back */
        CHECK(cudaMemcpyAsync(blocks[4] + (1 << 20), blocks[1], 1 << 20, cudaMemcpyDeviceToDevice,
                              stream));
        CHECK(cudaMemcpyAsync(back, blocks[4], 2 << 20, cudaMemcpyDeviceToHost, stream));
        CHECK(cudaStreamSynchronize(stream));
        for (size_t i = 0; i < (size_t)(2 << 20); i++) {
            unsigned char want = (unsigned char)((it * BLOCKS + (i < (1u << 20) ? 4 : 1)) & 0xff);
            if (back[i] != want) {
                fprintf(stderr, "pluggable: iteration %d byte %zu is %u, expected %u\n", it, i,
                        back[i], want);
                return 1;
            }
        }
        for (int b = BLOCKS - 1; b >= 0; b--) release(blocks[b], (ssize_t)sizes[b], 0, stream);
    }
    CHECK(cudaStreamSynchronize(stream));
    printf("allocations=%ld\nok\n", allocations);
    return 0;
}
