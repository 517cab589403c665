/*
 * cnmem_replay.c — replays an allocation sequence through the REAL cnmem library, so that
 * tests/cnmem.rs can compare it with itermem's re-creation (src/policy/cnmem.rs).
 *
 * Usage: cnmem_replay LIBCNMEM RESERVATION SEQUENCE
 *   LIBCNMEM     path of libcnmem.so (built by tools/build-cnmem into target/cnmem/); loaded
 *                with dlopen, so this program builds without it.
 *   RESERVATION  bytes passed to cnmemInit as the device's size (> 0: real cnmem treats 0 as
 *                "half the device memory"), flags CNMEM_FLAGS_DEFAULT (growth allowed).
 *   SEQUENCE     a text file, one operation per line:
 *                  a ID SIZE   cnmemMalloc(SIZE bytes) for buffer ID (0 <= ID < 2^24)
 *                  f ID        cnmemFree of buffer ID
 *
 * Output (stdout), one line per fact, in order:
 *   region BASE SIZE   a region held by cnmem: first the reservation, then one line per
 *                      cudaMalloc made by a miss, printed before the allocation it serves
 *   a ID ADDR          address returned for buffer ID
 *   reserved BYTES     cnmemMemGetInfo's total at the end (Σ regions)
 * Addresses are printed in decimal. Regions are detected through cnmemMemGetInfo: when the
 * total grows during a cnmemMalloc, cnmem made exactly one cudaMalloc of the rounded request
 * and handed it out whole, so the returned pointer is the new region's base.
 *
 * The reservation's base is found by allocating the whole reservation and freeing it again:
 * best fit takes the only free block (exact size, so unsplit) and the free puts it back as it
 * was, leaving cnmem's state unchanged.
 *
 * cnmemFinalize is deliberately not called: it would cudaFree every region, and cuda-shim
 * poisons freed device memory byte by byte, which for multi-GiB regions is pure cost.
 *
 * Exit status: 0 on success, 1 on any cnmem error (message on stderr), 2 on bad usage/input.
 */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The part of cnmem.h's ABI used here (cnmem 1.0.0), declared locally so that the program
 * needs no header outside this repository. */
typedef int cnmem_status;
#define CNMEM_SUCCESS 0
#define CNMEM_FLAGS_DEFAULT 0u
typedef struct {
    int device;
    size_t size;
    int numStreams;
    cudaStream_t *streams;
    size_t *streamSizes;
} cnmem_device;

typedef cnmem_status (*init_fn)(int, const cnmem_device *, unsigned);
typedef cnmem_status (*malloc_fn)(void **, size_t, cudaStream_t);
typedef cnmem_status (*free_fn)(void *, cudaStream_t);
typedef cnmem_status (*info_fn)(size_t *, size_t *, cudaStream_t);
typedef const char *(*error_fn)(cnmem_status);

static error_fn error_string;

#define MAX_IDS (1u << 24)

static void *symbol(void *lib, const char *name) {
    void *f = dlsym(lib, name);
    if (!f) {
        fprintf(stderr, "cnmem_replay: %s not found: %s\n", name, dlerror());
        exit(1);
    }
    return f;
}

static void check(cnmem_status status, const char *what, unsigned long line) {
    if (status != CNMEM_SUCCESS) {
        fprintf(stderr, "cnmem_replay: line %lu: %s failed: %s (%d)\n", line, what,
                error_string(status), status);
        exit(1);
    }
}

static size_t total_reserved(info_fn info, unsigned long line) {
    size_t free_bytes = 0, total = 0;
    check(info(&free_bytes, &total, NULL), "cnmemMemGetInfo", line);
    return total;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: cnmem_replay LIBCNMEM RESERVATION SEQUENCE\n");
        return 2;
    }
    char *end = NULL;
    errno = 0;
    unsigned long long reservation = strtoull(argv[2], &end, 10);
    if (errno || *end || reservation == 0) {
        fprintf(stderr, "cnmem_replay: RESERVATION must be a positive byte count, got '%s'\n",
                argv[2]);
        return 2;
    }
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "cnmem_replay: cannot load %s: %s\n", argv[1], dlerror());
        return 1;
    }
    init_fn cnmem_init = (init_fn)symbol(lib, "cnmemInit");
    malloc_fn cnmem_malloc = (malloc_fn)symbol(lib, "cnmemMalloc");
    free_fn cnmem_free = (free_fn)symbol(lib, "cnmemFree");
    info_fn cnmem_info = (info_fn)symbol(lib, "cnmemMemGetInfo");
    error_string = (error_fn)symbol(lib, "cnmemGetErrorString");

    FILE *input = fopen(argv[3], "r");
    if (!input) {
        fprintf(stderr, "cnmem_replay: cannot open %s: %s\n", argv[3], strerror(errno));
        return 2;
    }

    cnmem_device device = {0, (size_t)reservation, 0, NULL, NULL};
    check(cnmem_init(1, &device, CNMEM_FLAGS_DEFAULT), "cnmemInit", 0);
    size_t reserved = total_reserved(cnmem_info, 0);
    void *base = NULL;
    check(cnmem_malloc(&base, reserved, NULL), "cnmemMalloc(whole reservation)", 0);
    check(cnmem_free(base, NULL), "cnmemFree(whole reservation)", 0);
    printf("region %" PRIuPTR " %zu\n", (uintptr_t)base, reserved);

    size_t capacity = 0;
    void **pointers = NULL;
    char text[256];
    unsigned long line = 0;
    while (fgets(text, sizeof text, input)) {
        line++;
        char op = 0;
        unsigned long id = 0;
        unsigned long long size = 0;
        int fields = sscanf(text, " %c %lu %llu", &op, &id, &size);
        if (fields <= 0 || op == '#') {
            continue;
        }
        if (id >= MAX_IDS || !((op == 'a' && fields == 3) || (op == 'f' && fields == 2))) {
            fprintf(stderr, "cnmem_replay: %s:%lu: expected 'a ID SIZE' or 'f ID': %s", argv[3],
                    line, text);
            return 2;
        }
        if (id >= capacity) {
            size_t grown = capacity ? capacity : 1024;
            while (grown <= id) {
                grown *= 2;
            }
            void **bigger = realloc(pointers, grown * sizeof *pointers);
            if (!bigger) {
                fprintf(stderr, "cnmem_replay: out of host memory\n");
                return 1;
            }
            memset(bigger + capacity, 0, (grown - capacity) * sizeof *pointers);
            pointers = bigger;
            capacity = grown;
        }
        if (op == 'a') {
            void *p = NULL;
            check(cnmem_malloc(&p, (size_t)size, NULL), "cnmemMalloc", line);
            size_t now = total_reserved(cnmem_info, line);
            if (now != reserved) {
                printf("region %" PRIuPTR " %zu\n", (uintptr_t)p, now - reserved);
                reserved = now;
            }
            pointers[id] = p;
            printf("a %lu %" PRIuPTR "\n", id, (uintptr_t)p);
        } else {
            if (!pointers[id]) {
                fprintf(stderr, "cnmem_replay: %s:%lu: buffer %lu is not allocated\n", argv[3],
                        line, id);
                return 2;
            }
            check(cnmem_free(pointers[id], NULL), "cnmemFree", line);
            pointers[id] = NULL;
        }
    }
    if (ferror(input)) {
        fprintf(stderr, "cnmem_replay: error reading %s\n", argv[3]);
        return 2;
    }
    fclose(input);
    printf("reserved %zu\n", total_reserved(cnmem_info, line));
    free(pointers);
    return 0;
}
