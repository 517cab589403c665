// runtime_api.cu: the runtime calls around kernels that NVIDIA's runtime turns into driver calls
// of its own (library loading, kernel attributes, context-local storage, primary-context reset),
// run twice with a cudaDeviceReset in between, which frees a block left allocated: after a reset
// every __device__ variable starts again from its initial value and every kernel loads again.
//
// Usage: runtime_api
// Prints what each round found, then PASSED (exit 0) or FAILED (exit 1).
#include <cstdio>
#include <cstdlib>

#define CHECK(call)                                                                    \
  do {                                                                                 \
    cudaError_t err_ = (call);                                                         \
    if (err_ != cudaSuccess) {                                                         \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,       \
                   cudaGetErrorString(err_));                                          \
      std::printf("FAILED\n");                                                         \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

__device__ float offset = 0.5f;
__device__ int launches = 0;

__global__ void affine(float *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = 2.0f * i + offset;
  if (i == 0) atomicAdd(&launches, 1);
}

// The value of a __device__ variable, read through its address (cudaGetSymbolAddress).
template <typename T> T read_symbol(const T &symbol) {
  void *address = nullptr;
  CHECK(cudaGetSymbolAddress(&address, symbol));
  T value;
  CHECK(cudaMemcpy(&value, address, sizeof value, cudaMemcpyDeviceToHost));
  return value;
}

int main() {
  const int n = 1000;
  int failures = 0;
  for (int round = 0; round < 2; ++round) {
    // Initial values, whatever the previous round stored: the reset dropped them.
    int seen = read_symbol(launches);
    float initial = read_symbol(offset);
    std::printf("round %d launches %d offset %g\n", round, seen, initial);
    failures += seen != 0 || initial != 0.5f;

    float three = 3;
    CHECK(cudaMemcpyToSymbol(offset, &three, sizeof three));
    float *device = nullptr, *host = nullptr;
    CHECK(cudaMalloc(&device, n * sizeof(float)));
    CHECK(cudaMallocHost(&host, n * sizeof(float)));
    cudaStream_t stream;
    CHECK(cudaStreamCreate(&stream));
    cudaEvent_t start, stop;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    CHECK(cudaEventRecord(start, stream));
    affine<<<(n + 255) / 256, 256, 0, stream>>>(device, n);
    CHECK(cudaGetLastError());
    void *args[] = {&device, const_cast<int *>(&n)};
    CHECK(cudaLaunchKernel(reinterpret_cast<const void *>(affine), dim3(1), dim3(32), args, 0,
                           stream));
    CHECK(cudaEventRecord(stop, stream));
    CHECK(cudaMemcpyAsync(host, device, n * sizeof(float), cudaMemcpyDeviceToHost, stream));
    CHECK(cudaStreamSynchronize(stream));
    float ms = -1;
    CHECK(cudaEventElapsedTime(&ms, start, stop));
    int wrong = 0;
    for (int i = 0; i < n; ++i) wrong += host[i] != 2.0f * i + 3.0f;
    seen = read_symbol(launches);
    std::printf("round %d out[999] %g wrong %d launches %d elapsed_ok %d\n", round, host[999],
                wrong, seen, ms >= 0);
    failures += wrong != 0 || seen != 2 || ms < 0;

    CHECK(cudaFuncSetAttribute(affine, cudaFuncAttributeMaxDynamicSharedMemorySize, 65536));
    cudaFuncAttributes attributes;
    CHECK(cudaFuncGetAttributes(&attributes, affine));
    int blocks = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, affine, 256, 0));
    std::printf("round %d max_dynamic_shared %d resident_blocks_positive %d\n", round,
                attributes.maxDynamicSharedSizeBytes, blocks > 0);
    failures += attributes.maxDynamicSharedSizeBytes != 65536 || blocks <= 0;

    CHECK(cudaEventDestroy(start));
    CHECK(cudaEventDestroy(stop));
    CHECK(cudaStreamDestroy(stream));
    CHECK(cudaFreeHost(host));
    CHECK(cudaFree(device));
    // Left to the reset, which frees it (as it does on CUDA).
    void *kept = nullptr;
    CHECK(cudaMalloc(&kept, 4096));
    CHECK(cudaDeviceReset());
  }
  std::printf(failures == 0 ? "PASSED\n" : "FAILED\n");
  return failures == 0 ? 0 : 1;
}
