/* cuda_runtime.h — what a CUDA program includes; on cuda-shim it is the runtime API. */
#ifndef ITERMEM_SHIM_CUDA_RUNTIME_H
#define ITERMEM_SHIM_CUDA_RUNTIME_H
#include "cuda_runtime_api.h"
#endif
