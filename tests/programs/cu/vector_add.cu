// vector_add.cu: the simplest CUDA program. Adds two vectors on the device with a grid-stride
// loop and checks every element against the host's sum.
//
// Usage: vector_add [N]   (default N = 100000)
// Prints the size, the launch shape and a few elements, then PASSED (exit 0) or FAILED (exit 1).
#include <cstdio>
#include <cstdlib>
#include <vector>

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

__global__ void vector_add(const float *a, const float *b, float *c, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
    c[i] = a[i] + b[i];
  }
}

int main(int argc, char **argv) {
  int n = argc > 1 ? std::atoi(argv[1]) : 100000;
  if (n <= 0) {
    std::fprintf(stderr, "usage: vector_add [N > 0]\n");
    return 2;
  }
  std::vector<float> a(n), b(n), c(n);
  for (int i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i) * 0.5f;
    b[i] = static_cast<float>(n - i) * 0.25f;
  }

  size_t bytes = static_cast<size_t>(n) * sizeof(float);
  float *da, *db, *dc;
  CHECK(cudaMalloc(&da, bytes));
  CHECK(cudaMalloc(&db, bytes));
  CHECK(cudaMalloc(&dc, bytes));
  CHECK(cudaMemcpy(da, a.data(), bytes, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, b.data(), bytes, cudaMemcpyHostToDevice));

  // Fewer threads than elements, so the grid-stride loop runs several rounds.
  int threads = 256;
  int blocks = (n + threads - 1) / threads;
  if (blocks > 64) blocks = 64;
  std::printf("n %d blocks %d threads %d\n", n, blocks, threads);
  vector_add<<<blocks, threads>>>(da, db, dc, n);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(c.data(), dc, bytes, cudaMemcpyDeviceToHost));
  CHECK(cudaFree(da));
  CHECK(cudaFree(db));
  CHECK(cudaFree(dc));

  int errors = 0;
  for (int i = 0; i < n; ++i) {
    // One float addition on each side: the results must be identical.
    if (c[i] != a[i] + b[i]) {
      if (errors < 5) std::printf("mismatch at %d: %g != %g\n", i, c[i], a[i] + b[i]);
      ++errors;
    }
  }
  std::printf("c[0] %g c[%d] %g c[%d] %g\n", c[0], n / 2, c[n / 2], n - 1, c[n - 1]);
  if (errors) {
    std::printf("%d mismatches\nFAILED\n", errors);
    return 1;
  }
  std::printf("PASSED\n");
  return 0;
}
