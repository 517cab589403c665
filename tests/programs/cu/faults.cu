// Kernels that go wrong, and what CUDA says about them. Each mode prints the error the
// program saw and exits 0 when it is the one CUDA gives on a GPU:
//   faults oob          a kernel stores past the end of its buffer: cudaErrorIllegalAddress,
//                       sticky (a later allocation fails with it too)
//   faults rounding     a kernel divides with directed rounding (__fdiv_rz, div.rz.f32):
//                       on a GPU it runs; the launch's error is printed either way
//   faults image        the plain kernel of this program, for runs on a device the build has
//                       no image for: cudaErrorNoKernelImageForDevice at the launch
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

__global__ void store_past_the_end(float *data, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  // 64 MiB past the end of a small buffer: outside every allocation.
  data[i + n + (16 << 20)] = 1.0f;
}

__global__ void divide_toward_zero(const float *a, float *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __fdiv_rz(a[i], 3.0f);
}

__global__ void fill(float *data, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] = 2.0f * i;
}

static int report(const char *what, cudaError_t got, cudaError_t expected) {
  std::printf("%s %s\n", what, cudaGetErrorName(got));
  return got == expected ? 0 : 1;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  const int n = 256;
  float *data = nullptr, *out = nullptr;
  if (cudaMalloc(&data, n * sizeof(float)) != cudaSuccess ||
      cudaMalloc(&out, n * sizeof(float)) != cudaSuccess) {
    std::printf("cudaMalloc failed\n");
    return 1;
  }
  if (std::strcmp(mode, "oob") == 0) {
    store_past_the_end<<<1, 32>>>(data, n);
    int failed = report("launch", cudaGetLastError(), cudaSuccess);
    failed |= report("synchronize", cudaDeviceSynchronize(), cudaErrorIllegalAddress);
    float *more = nullptr;
    failed |= report("sticky", cudaMalloc(&more, 4), cudaErrorIllegalAddress);
    return failed;
  }
  if (std::strcmp(mode, "rounding") == 0) {
    divide_toward_zero<<<1, n>>>(data, out, n);
    cudaError_t launch = cudaGetLastError();
    std::printf("launch %s\n", cudaGetErrorName(launch));
    return 0;
  }
  if (std::strcmp(mode, "image") == 0) {
    fill<<<1, n>>>(data, n);
    int failed = report("launch", cudaGetLastError(), cudaErrorNoKernelImageForDevice);
    return failed;
  }
  std::fprintf(stderr, "usage: faults oob|rounding|image\n");
  return 2;
}
