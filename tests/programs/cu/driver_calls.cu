// driver_calls.cu: the same work done through the runtime, which calls the driver itself, and
// through the driver directly, with entry points found as programs find them: by
// cudaGetDriverEntryPointByVersion (as PyTorch does) and by dlopen("libcuda.so.1") + dlsym. Each
// iteration, on each of the three paths: one allocation, a memset, a kernel launch (the runtime's
// <<<>>>, or cuLaunchKernel of the function cudaGetFuncBySymbol names), a download and a free.
// A tool that sees every call once counts exactly the totals printed at the end.
//
// Usage: driver_calls [ITERATIONS] (default 3)
// Prints each path's checksum, the totals, then PASSED (exit 0) or FAILED (exit 1).
#include <cuda.h>
#include <dlfcn.h>
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

#define CHECK_CU(call)                                                                 \
  do {                                                                                 \
    CUresult err_ = (call);                                                            \
    if (err_ != CUDA_SUCCESS) {                                                        \
      std::fprintf(stderr, "%s:%d: %s failed: %d\n", __FILE__, __LINE__, #call,       \
                   static_cast<int>(err_));                                            \
      std::printf("FAILED\n");                                                         \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

// Adds one to each of n bytes.
__global__ void increment(unsigned char *data, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] += 1;
}

// The driver functions one path found.
struct Driver {
  decltype(&cuMemAlloc_v2) alloc;
  decltype(&cuMemsetD8_v2) memset;
  decltype(&cuLaunchKernel) launch;
  decltype(&cuMemcpyDtoH_v2) download;
  decltype(&cuMemFree_v2) free;
};

// Each function of a Driver, found by lookup(name, exported name): the name is what
// cudaGetDriverEntryPointByVersion takes, the exported name the library's symbol.
template <typename Lookup> Driver find(const char *how, Lookup lookup) {
  Driver d{};
  const struct {
    const char *name, *exported;
    void **slot;
  } wanted[] = {{"cuMemAlloc", "cuMemAlloc_v2", reinterpret_cast<void **>(&d.alloc)},
                {"cuMemsetD8", "cuMemsetD8_v2", reinterpret_cast<void **>(&d.memset)},
                {"cuLaunchKernel", "cuLaunchKernel", reinterpret_cast<void **>(&d.launch)},
                {"cuMemcpyDtoH", "cuMemcpyDtoH_v2", reinterpret_cast<void **>(&d.download)},
                {"cuMemFree", "cuMemFree_v2", reinterpret_cast<void **>(&d.free)}};
  for (const auto &w : wanted) {
    *w.slot = lookup(w.name, w.exported);
    if (*w.slot == nullptr) {
      std::fprintf(stderr, "driver_calls: %s found no %s\n", how, w.name);
      std::printf("FAILED\n");
      std::exit(1);
    }
  }
  return d;
}

// Each function through cudaGetDriverEntryPointByVersion, at CUDA 12.0.
Driver from_entry_points() {
  return find("cudaGetDriverEntryPointByVersion", [](const char *name, const char *) {
    void *function = nullptr;
    cudaDriverEntryPointQueryResult found;
    CHECK(cudaGetDriverEntryPointByVersion(name, &function, 12000, cudaEnableDefault, &found));
    return found == cudaDriverEntryPointSuccess ? function : nullptr;
  });
}

// Each function by its exported name in the driver library.
Driver from_dlsym() {
  void *library = dlopen("libcuda.so.1", RTLD_NOW);
  if (library == nullptr) {
    std::fprintf(stderr, "driver_calls: %s\n", dlerror());
    std::printf("FAILED\n");
    std::exit(1);
  }
  return find("dlsym", [library](const char *, const char *exported) {
    return dlsym(library, exported);
  });
}

// The sum of the bytes, each expected to be `value`; counts the others in `wrong`.
long checksum(const unsigned char *bytes, int n, unsigned char value, int *wrong) {
  long sum = 0;
  for (int i = 0; i < n; ++i) {
    sum += bytes[i];
    *wrong += bytes[i] != value;
  }
  return sum;
}

int main(int argc, char **argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 3;
  const int n = 3000;
  unsigned char host[n];
  int wrong = 0;
  long sums[3] = {0, 0, 0};
  long mallocs = 0, memsets = 0, launches = 0, memcpys = 0, frees = 0;

  CHECK(cudaSetDevice(0));
  CHECK(cudaFree(nullptr)); // the primary context, current for the driver calls below
  cudaFunction_t function;
  CHECK(cudaGetFuncBySymbol(&function, reinterpret_cast<const void *>(increment)));
  const Driver drivers[2] = {from_entry_points(), from_dlsym()};

  for (int iteration = 0; iteration < iterations; ++iteration) {
    // Through the runtime, which calls the driver itself.
    unsigned char *device = nullptr;
    CHECK(cudaMalloc(&device, n));
    CHECK(cudaMemset(device, 6, n));
    increment<<<(n + 255) / 256, 256>>>(device, n);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(host, device, n, cudaMemcpyDeviceToHost));
    CHECK(cudaFree(device));
    sums[0] += checksum(host, n, 7, &wrong);
    mallocs++, memsets++, launches++, memcpys++, frees++;

    // Through the driver, directly.
    for (int path = 0; path < 2; ++path) {
      const Driver &d = drivers[path];
      CUdeviceptr block = 0;
      CHECK_CU(d.alloc(&block, n + path));
      CHECK_CU(d.memset(block, static_cast<unsigned char>(10 * (path + 1)), n));
      int count = n;
      void *args[] = {&block, &count};
      CHECK_CU(d.launch(reinterpret_cast<CUfunction>(function), (n + 127) / 128, 1, 1, 128, 1, 1,
                        0, nullptr, args, nullptr));
      CHECK_CU(d.download(host, block, n));
      CHECK_CU(d.free(block));
      sums[path + 1] += checksum(host, n, static_cast<unsigned char>(10 * (path + 1) + 1), &wrong);
      mallocs++, memsets++, launches++, memcpys++, frees++;
    }
  }
  std::printf("runtime %ld entry_points %ld dlsym %ld wrong %d\n", sums[0], sums[1], sums[2],
              wrong);
  std::printf("mallocs=%ld\nfrees=%ld\nmemsets=%ld\nlaunches=%ld\nmemcpys=%ld\n", mallocs, frees,
              memsets, launches, memcpys);
  std::printf(wrong == 0 ? "PASSED\n" : "FAILED\n");
  return wrong == 0 ? 0 : 1;
}
