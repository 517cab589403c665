// hook_bench.cu — what a CUDA call costs the host, for `tools/gpu-check`: run it with and
// without itermem; the difference is itermem's hooks. The CUDA C++ twin of hook_bench.c, with a
// real kernel, so it runs on a GPU as on the shim.
//
// Usage: hook_bench [--live N] [--pairs N] [--launches N]
//   --live N      allocations kept live during the measurement (default 10000)
//   --pairs N     cudaMalloc+cudaFree pairs of 4 KiB timed (default 100000)
//   --launches N  launches of an 8-parameter kernel whose six pointers point into live blocks
//                 (default 100000)
// Prints malloc_free_pair_ns X and launch_ns X (mean wall-clock ns per operation), then PASSED.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>
#include <vector>

#define CHECK(call)                                                                      \
  do {                                                                                   \
    cudaError_t e_ = (call);                                                             \
    if (e_ != cudaSuccess) {                                                             \
      std::fprintf(stderr, "hook_bench: %s failed: %s\n", #call, cudaGetErrorName(e_)); \
      std::exit(1);                                                                      \
    }                                                                                    \
  } while (0)

// Does nothing: only its launch is measured.
__global__ void eight(float *p0, float *p1, float *p2, float *p3, float *p4, float *p5, int n,
                      float x) {
  if (n < 0) p0[0] = p1[0] + p2[0] + p3[0] + p4[0] + p5[0] + x;
}

static double now_ns() {
  return std::chrono::duration<double, std::nano>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

static long parse(const char *flag, const char *value) {
  char *end;
  long v = std::strtol(value, &end, 10);
  if (*end != '\0' || v < 1 || v > 100000000) {
    std::fprintf(stderr, "hook_bench: %s expects a positive whole number, got '%s'\n", flag,
                 value);
    std::exit(2);
  }
  return v;
}

int main(int argc, char **argv) {
  long live = 10000, pairs = 100000, launches = 100000;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--live") == 0) live = parse(argv[i], argv[i + 1]);
    else if (std::strcmp(argv[i], "--pairs") == 0) pairs = parse(argv[i], argv[i + 1]);
    else if (std::strcmp(argv[i], "--launches") == 0) launches = parse(argv[i], argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: hook_bench [--live N] [--pairs N] [--launches N]\n");
      return 2;
    }
  }
  std::vector<float *> blocks(live);
  for (auto &b : blocks) CHECK(cudaMalloc(&b, 4096));
  CHECK(cudaDeviceSynchronize());

  double start = now_ns();
  for (long i = 0; i < pairs; i++) {
    void *p = nullptr;
    CHECK(cudaMalloc(&p, 4096));
    CHECK(cudaFree(p));
  }
  double pair_ns = (now_ns() - start) / pairs;

  start = now_ns();
  for (long i = 0; i < launches; i++) {
    long k = (i * 7) % live;
    eight<<<1, 32>>>(blocks[k], blocks[(k + 1) % live], blocks[(k + 2) % live],
                     blocks[(k + 3) % live], blocks[(k + 4) % live], blocks[(k + 5) % live], 1,
                     0.5f);
  }
  double launch_ns = (now_ns() - start) / launches;
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  for (auto b : blocks) CHECK(cudaFree(b));
  std::printf("malloc_free_pair_ns %.1f\nlaunch_ns %.1f\nPASSED\n", pair_ns, launch_ns);
  return 0;
}
