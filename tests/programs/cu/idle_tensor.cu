// idle_tensor.cu: an iteration whose first tensor waits, idle, through the iteration's peak until
// its last use: what a swap planner moves to the host. Each iteration, on the default stream:
//
//   a = x + k            (a: 1 MiB, used again at the end)
//   b = 2a;  c = b + 1;  free b;  d = c * c;  free c     (a, c, d live: the peak, 3 MiB)
//   d = d - a;  free a;  read d back;  free d
//
// Usage: idle_tensor [ITERATIONS] (default 12)
// Prints each iteration's checksum of d, then PASSED (exit 0) or FAILED (exit 1): every element
// of d is checked against the host's arithmetic.
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

constexpr int N = 1 << 18; // 1 MiB of 32-bit integers

__global__ void fill(int *a, int k) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < N) a[i] = i % 1000 + k;
}

__global__ void scale_add(int *out, const int *in, int scale, int add) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < N) out[i] = scale * in[i] + add;
}

__global__ void square(int *out, const int *in) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < N) out[i] = in[i] * in[i];
}

__global__ void subtract(int *x, const int *y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < N) x[i] -= y[i];
}

int *device_ints() {
  int *p = nullptr;
  CHECK(cudaMalloc(&p, N * sizeof(int)));
  return p;
}

int main(int argc, char **argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 12;
  const int blocks = N / 256, threads = 256;
  int *host = static_cast<int *>(std::malloc(N * sizeof(int)));
  long wrong = 0;
  for (int k = 0; k < iterations; ++k) {
    int *a = device_ints();
    fill<<<blocks, threads>>>(a, k);
    int *b = device_ints();
    scale_add<<<blocks, threads>>>(b, a, 2, 0);
    int *c = device_ints();
    scale_add<<<blocks, threads>>>(c, b, 1, 1);
    CHECK(cudaFree(b));
    int *d = device_ints();
    square<<<blocks, threads>>>(d, c);
    CHECK(cudaFree(c));
    subtract<<<blocks, threads>>>(d, a);
    CHECK(cudaGetLastError());
    CHECK(cudaFree(a));
    CHECK(cudaMemcpy(host, d, N * sizeof(int), cudaMemcpyDeviceToHost));
    CHECK(cudaFree(d));
    long long sum = 0;
    for (int i = 0; i < N; ++i) {
      long long x = i % 1000 + k, expected = (2 * x + 1) * (2 * x + 1) - x;
      wrong += host[i] != expected;
      sum += host[i];
    }
    std::printf("iteration %d checksum %lld\n", k, sum);
  }
  std::free(host);
  std::printf(wrong == 0 ? "PASSED\n" : "FAILED\n");
  return wrong == 0 ? 0 : 1;
}
