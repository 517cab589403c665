/*
 * access_paths.c — reaches CUDA by every path a program can take to it, so a test can check that
 * itermem sees each call exactly once. Path k makes 2^k allocations per iteration, each used by
 * one upload, one memset, one kernel launch and one download (all made through the functions
 * the same path found) and freed the same way:
 *
 *   0  cudaMalloc, linked                         (runtime)
 *   1  cuMemAlloc_v2, linked                       (driver)
 *   2  cuGetProcAddress_v2 at CUDA 12.0, and the legacy cuGetProcAddress it answers for
 *      CUDA 11.3 (one allocation in two each)       (driver)
 *   3  cudaGetDriverEntryPoint                     (driver)
 *   4  dlopen("libcuda.so.1") + dlsym              (driver)
 *   5  dlopen("libcudart.so.12") + dlsym           (runtime, as TensorFlow and cudarc load it)
 *   6  dlsym(RTLD_DEFAULT)                         (runtime)
 *   7  cudaMallocAsync / cudaFreeAsync, linked     (runtime, stream-ordered)
 *   8  cuGetProcAddress_v2 with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM: the per-thread
 *      default stream variants (cuMemcpyHtoD_v2_ptds, cuLaunchKernel_ptsz, ...)  (driver)
 *
 * Every byte is checked after the kernel (which adds one to each byte). Prints the totals
 * (mallocs, frees, memcpys, memsets, launches) and a checksum of the data read back.
 * Usage: access_paths [--iters N] (default 3).
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <cuda_shim.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PATHS 9
#define MAX_BLOCKS ((1 << PATHS) - 1)
#define MAX_BYTES (5 * 4096)

#define CHECK(call)                                                                         \
    do {                                                                                    \
        long e_ = (long)(call);                                                             \
        if (e_ != 0) {                                                                      \
            fprintf(stderr, "access_paths: %s failed with error %ld\n", #call, e_);         \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)

typedef CUresult (*MemAlloc)(CUdeviceptr *, size_t);
typedef CUresult (*MemFree)(CUdeviceptr);
typedef CUresult (*CopyHtoD)(CUdeviceptr, const void *, size_t);
typedef CUresult (*CopyDtoH)(void *, CUdeviceptr, size_t);
typedef CUresult (*SetD8)(CUdeviceptr, unsigned char, size_t);
typedef CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                                 unsigned, unsigned, CUstream, void **, void **);
typedef CUresult (*LegacyGetProcAddress)(const char *, void **, int, cuuint64_t);
typedef cudaError_t (*Malloc)(void **, size_t);
typedef cudaError_t (*Free)(void *);
typedef cudaError_t (*Copy)(void *, const void *, size_t, enum cudaMemcpyKind);
typedef cudaError_t (*Set)(void *, int, size_t);

/* The driver functions one path found. */
struct driver_path {
    MemAlloc alloc;
    MemFree free;
    CopyHtoD upload;
    CopyDtoH download;
    SetD8 set;
    LaunchKernel launch;
};

/* The runtime functions one path found. */
struct runtime_path {
    Malloc alloc;
    Free free;
    Copy copy;
    Set set;
};

static void add_one(void **args) {
    unsigned char *data = *(unsigned char **)args[0];
    size_t bytes = *(size_t *)args[1];
    for (size_t i = 0; i < bytes; i++) data[i] += 1;
}

static unsigned long long mallocs, frees, memcpys, memsets, launches, checksum;
static CUfunction add_one_function;

static void *must(void *pointer, const char *what) {
    if (pointer == NULL) {
        fprintf(stderr, "access_paths: %s not found (%s)\n", what, dlerror());
        exit(1);
    }
    return pointer;
}

static void *by_proc_address_flags(const char *name, int version, cuuint64_t flags) {
    void *pfn = NULL;
    CUdriverProcAddressQueryResult status;
    CHECK(cuGetProcAddress(name, &pfn, version, flags, &status));
    return must(pfn, name);
}

static void *by_proc_address(const char *name, int version) {
    return by_proc_address_flags(name, version, CU_GET_PROC_ADDRESS_DEFAULT);
}

static void *per_thread(const char *name) {
    return by_proc_address_flags(name, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
}

static void *by_legacy_proc_address(LegacyGetProcAddress get, const char *name) {
    void *pfn = NULL;
    CHECK(get(name, &pfn, 11030, CU_GET_PROC_ADDRESS_DEFAULT));
    return must(pfn, name);
}

static void *by_entry_point(const char *name) {
    void *pfn = NULL;
    enum cudaDriverEntryPointQueryResult status;
    CHECK(cudaGetDriverEntryPoint(name, &pfn, cudaEnableDefault, &status));
    return must(pfn, name);
}

/* The expected content of a block after the kernel: the uploaded pattern plus one, except the
 * bytes the memset cleared (then one). */
static unsigned char expected(size_t i, size_t bytes, unsigned seed) {
    return i < bytes / 4 ? 1 : (unsigned char)(seed + i * 7 + 1);
}

static void fill(unsigned char *host, size_t bytes, unsigned seed) {
    for (size_t i = 0; i < bytes; i++) host[i] = (unsigned char)(seed + i * 7);
}

static void verify(const unsigned char *host, size_t bytes, unsigned seed) {
    for (size_t i = 0; i < bytes; i++) {
        if (host[i] != expected(i, bytes, seed)) {
            fprintf(stderr, "access_paths: byte %zu of a block is %u, expected %u\n", i,
                    host[i], expected(i, bytes, seed));
            exit(1);
        }
        checksum = checksum * 31 + host[i];
    }
}

static void use_driver_block(const struct driver_path *p, CUdeviceptr block, size_t bytes,
                             unsigned seed) {
    static unsigned char host[MAX_BYTES];
    fill(host, bytes, seed);
    CHECK(p->upload(block, host, bytes));
    CHECK(p->set(block, 0, bytes / 4));
    void *args[] = {&block, &bytes};
    CHECK(p->launch(add_one_function, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
    CHECK(p->download(host, block, bytes));
    verify(host, bytes, seed);
    memcpys += 2, memsets += 1, launches += 1;
}

static void use_runtime_block(const struct runtime_path *p, void *block, size_t bytes,
                              unsigned seed) {
    static unsigned char host[MAX_BYTES];
    fill(host, bytes, seed);
    CHECK(p->copy(block, host, bytes, cudaMemcpyHostToDevice));
    CHECK(p->set(block, 0, bytes / 4));
    void *args[] = {&block, &bytes};
    dim3 one = {1, 1, 1};
    CHECK(cudaLaunchKernel((const void *)add_one, one, one, args, 0, 0));
    CHECK(p->copy(host, block, bytes, cudaMemcpyDeviceToHost));
    verify(host, bytes, seed);
    memcpys += 2, memsets += 1, launches += 1;
}

static size_t size_of(int block) { return 4096 * (size_t)(1 + block % 5) - 256 * (block % 3); }

int main(int argc, char **argv) {
    int iters = 3;
    if (argc == 3 && strcmp(argv[1], "--iters") == 0) iters = atoi(argv[2]);
    size_t sizes[] = {sizeof(void *), sizeof(size_t)};
    CHECK(cudaShimRegisterKernel(add_one, "add_one", 2, sizes, 0));
    CHECK(cudaFree(0)); /* initialises the runtime and makes its context current */
    CHECK(cudaGetFuncBySymbol((cudaFunction_t *)&add_one_function, (const void *)add_one));

    struct driver_path linked = {cuMemAlloc, cuMemFree, cuMemcpyHtoD, cuMemcpyDtoH,
                                 cuMemsetD8, cuLaunchKernel};
    struct driver_path proc = {
        by_proc_address("cuMemAlloc", 12000),   by_proc_address("cuMemFree", 12000),
        by_proc_address("cuMemcpyHtoD", 12000), by_proc_address("cuMemcpyDtoH", 12000),
        by_proc_address("cuMemsetD8", 12000),   by_proc_address("cuLaunchKernel", 12000)};
    LegacyGetProcAddress legacy = by_proc_address("cuGetProcAddress", 11030);
    struct driver_path proc_11 = {by_legacy_proc_address(legacy, "cuMemAlloc"),
                                  by_legacy_proc_address(legacy, "cuMemFree"),
                                  by_legacy_proc_address(legacy, "cuMemcpyHtoD"),
                                  by_legacy_proc_address(legacy, "cuMemcpyDtoH"),
                                  by_legacy_proc_address(legacy, "cuMemsetD8"),
                                  by_legacy_proc_address(legacy, "cuLaunchKernel")};
    struct driver_path threaded = {per_thread("cuMemAlloc"),   per_thread("cuMemFree"),
                                   per_thread("cuMemcpyHtoD"), per_thread("cuMemcpyDtoH"),
                                   per_thread("cuMemsetD8"),   per_thread("cuLaunchKernel")};
    if ((void *)threaded.launch == (void *)proc.launch) {
        fprintf(stderr, "access_paths: no per-thread variant of cuLaunchKernel was returned\n");
        return 1;
    }
    struct driver_path entry = {by_entry_point("cuMemAlloc"),   by_entry_point("cuMemFree"),
                                by_entry_point("cuMemcpyHtoD"), by_entry_point("cuMemcpyDtoH"),
                                by_entry_point("cuMemsetD8"),   by_entry_point("cuLaunchKernel")};
    void *driver = must(dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL), "libcuda.so.1");
    struct driver_path opened = {
        must(dlsym(driver, "cuMemAlloc_v2"), "cuMemAlloc_v2"),
        must(dlsym(driver, "cuMemFree_v2"), "cuMemFree_v2"),
        must(dlsym(driver, "cuMemcpyHtoD_v2"), "cuMemcpyHtoD_v2"),
        must(dlsym(driver, "cuMemcpyDtoH_v2"), "cuMemcpyDtoH_v2"),
        must(dlsym(driver, "cuMemsetD8_v2"), "cuMemsetD8_v2"),
        must(dlsym(driver, "cuLaunchKernel"), "cuLaunchKernel")};
    void *runtime = must(dlopen("libcudart.so.12", RTLD_NOW | RTLD_LOCAL), "libcudart.so.12");
    struct runtime_path runtime_opened = {must(dlsym(runtime, "cudaMalloc"), "cudaMalloc"),
                                          must(dlsym(runtime, "cudaFree"), "cudaFree"),
                                          must(dlsym(runtime, "cudaMemcpy"), "cudaMemcpy"),
                                          must(dlsym(runtime, "cudaMemset"), "cudaMemset")};
    struct runtime_path global = {must(dlsym(RTLD_DEFAULT, "cudaMalloc"), "cudaMalloc"),
                                  must(dlsym(RTLD_DEFAULT, "cudaFree"), "cudaFree"),
                                  must(dlsym(RTLD_DEFAULT, "cudaMemcpy"), "cudaMemcpy"),
                                  must(dlsym(RTLD_DEFAULT, "cudaMemset"), "cudaMemset")};
    struct runtime_path plain = {cudaMalloc, cudaFree, cudaMemcpy, cudaMemset};

    for (int iter = 0; iter < iters; iter++) {
        CUdeviceptr driver_blocks[MAX_BLOCKS];
        void *runtime_blocks[MAX_BLOCKS];
        const struct driver_path *driver_paths[MAX_BLOCKS];
        const struct runtime_path *runtime_paths[MAX_BLOCKS];
        int block = 0;
        for (int path = 0; path < PATHS; path++) {
            for (int i = 0; i < (1 << path); i++, block++) {
                size_t bytes = size_of(block);
                unsigned seed = (unsigned)(iter * 131 + block);
                const struct driver_path *d = path == 1   ? &linked
                                              : path == 2 ? (i % 2 ? &proc_11 : &proc)
                                              : path == 3 ? &entry
                                              : path == 4 ? &opened
                                              : path == 8 ? &threaded
                                                          : NULL;
                const struct runtime_path *r = path == 0   ? &plain
                                               : path == 5 ? &runtime_opened
                                               : path == 6 ? &global
                                                           : NULL;
                driver_paths[block] = d, runtime_paths[block] = r;
                if (d != NULL) {
                    CHECK(d->alloc(&driver_blocks[block], bytes));
                    use_driver_block(d, driver_blocks[block], bytes, seed);
                } else if (r != NULL) {
                    CHECK(r->alloc(&runtime_blocks[block], bytes));
                    use_runtime_block(r, runtime_blocks[block], bytes, seed);
                } else {
                    CHECK(cudaMallocAsync(&runtime_blocks[block], bytes, 0));
                    use_runtime_block(&plain, runtime_blocks[block], bytes, seed);
                }
                mallocs++;
            }
        }
        /* Freed newest first, each through the path that allocated it. */
        while (block-- > 0) {
            if (driver_paths[block] != NULL) {
                CHECK(driver_paths[block]->free(driver_blocks[block]));
            } else if (runtime_paths[block] != NULL) {
                CHECK(runtime_paths[block]->free(runtime_blocks[block]));
            } else {
                CHECK(cudaFreeAsync(runtime_blocks[block], 0));
            }
            frees++;
        }
    }
    CHECK(cudaDeviceSynchronize());
    printf("mallocs=%llu\nfrees=%llu\nmemcpys=%llu\nmemsets=%llu\nlaunches=%llu\n", mallocs,
           frees, memcpys, memsets, launches);
    printf("checksum=%llx\n", checksum);
    return 0;
}
