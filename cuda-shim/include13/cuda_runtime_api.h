/*
 * cuda_runtime_api.h — the CUDA 13 runtime API as implemented by cuda-shim's libcudart.so.13.
 *
 * Compile a program for CUDA 13 with -I cuda-shim/include13 -I cuda-shim/include: this header
 * sets the CUDA 13.5 version and includes the shared header of cuda-shim/include, whose
 * `#if CUDART_VERSION >= 13000` blocks hold what differs from CUDA 12 (docs/cuda13.md).
 * tools/abi-check --cuda 13 proves the result against NVIDIA's CUDA 13.5 headers.
 */
#ifndef ITERMEM_SHIM13_CUDA_RUNTIME_API_H
#define ITERMEM_SHIM13_CUDA_RUNTIME_API_H
#define CUDART_VERSION 13050
#include "../include/cuda_runtime_api.h"
#endif
