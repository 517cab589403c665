/* cuda_runtime.h — what a CUDA 13 program includes; on cuda-shim it is the CUDA 13 runtime API. */
#ifndef ITERMEM_SHIM13_CUDA_RUNTIME_H
#define ITERMEM_SHIM13_CUDA_RUNTIME_H
#include "cuda_runtime_api.h"
#endif
