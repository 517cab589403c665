/*
 * check.h — the samples' checks: a failing call or expectation prints FAIL with the call (or
 * condition) and its line, and exits 1. A driver-API sample defines SAMPLE_DRIVER_API before
 * including it, so that CHECK takes a CUresult (cuda.h) instead of a cudaError_t.
 */
#ifndef SAMPLES_CHECK_H
#define SAMPLES_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#ifdef SAMPLE_DRIVER_API
#define CHECK(call)                                                                        \
    do {                                                                                   \
        CUresult err_ = (call);                                                            \
        if (err_ != CUDA_SUCCESS) {                                                        \
            const char *name_ = NULL;                                                      \
            cuGetErrorName(err_, &name_);                                                  \
            fprintf(stderr, "FAIL: %s returned %d (%s) at line %d\n", #call, (int)err_,     \
                    name_ ? name_ : "?", __LINE__);                                        \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)
#else
#define CHECK(call)                                                                        \
    do {                                                                                   \
        cudaError_t err_ = (call);                                                         \
        if (err_ != cudaSuccess) {                                                         \
            fprintf(stderr, "FAIL: %s returned %d (%s) at line %d\n", #call, (int)err_,     \
                    cudaGetErrorName(err_), __LINE__);                                     \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)
#endif

#define EXPECT(cond, ...)                                                                  \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "FAIL: %s: ", #cond);                                          \
            fprintf(stderr, __VA_ARGS__);                                                  \
            fprintf(stderr, "\n");                                                         \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

#endif
