/*
 * cuda.h — the CUDA 13 driver API as cuda-shim's libcuda.so.1 implements it.
 *
 * Sets the CUDA 13.5 version and includes the shared header of cuda-shim/include, whose
 * `#if CUDA_VERSION >= 13000` blocks hold what CUDA 13's header declares differently (the
 * driver library is one for both majors; docs/cuda13.md).
 */
#ifndef ITERMEM_SHIM13_CUDA_H
#define ITERMEM_SHIM13_CUDA_H
#define CUDA_VERSION 13050
#include "../include/cuda.h"
#endif
