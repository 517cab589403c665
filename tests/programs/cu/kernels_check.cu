// kernels_check.cu: one kernel for each feature of CUDA's execution model that ordinary programs
// use, each checked on the host against a CPU reference:
//   matmul     tiled matrix product through __shared__ tiles and __syncthreads()
//   reduce     block sum with warp shuffles (__shfl_down_sync) and one shared slot per warp
//   scan       inclusive prefix sum of each block in shared memory (Hillis-Steele, two buffers)
//   transpose  matrix transpose through a padded shared tile
//   histogram  atomicAdd on int bins and on float bins
//   constant   a polynomial whose coefficients live in __constant__ memory
//   dynamic    dynamic shared memory (extern __shared__, size given at launch)
//   math       fmaf, sqrtf, division, expf, __expf, float<->int conversions and integer math
//
// Usage: kernels_check (no arguments). Prints one line per kernel ("NAME ok ..." or
// "NAME FAILED ..."), then PASSED (exit 0) or FAILED (exit 1). Sizes are not multiples of the
// block or tile sizes, so the bounds checks of every kernel are exercised.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

// A small deterministic generator (xorshift32), so every run checks the same data.
static uint32_t rng_state = 12345u;
static uint32_t next_u32() {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 17;
  rng_state ^= rng_state << 5;
  return rng_state;
}
static float next_float(float lo, float hi) {
  return lo + (hi - lo) * static_cast<float>(next_u32() >> 8) * (1.0f / 16777216.0f);
}

template <typename T> struct DeviceBuffer {
  T *ptr = nullptr;
  size_t count = 0;
  explicit DeviceBuffer(size_t n) : count(n) { CHECK(cudaMalloc(&ptr, n * sizeof(T))); }
  DeviceBuffer(const std::vector<T> &host) : DeviceBuffer(host.size()) {
    CHECK(cudaMemcpy(ptr, host.data(), count * sizeof(T), cudaMemcpyHostToDevice));
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  std::vector<T> to_host() const {
    std::vector<T> host(count);
    CHECK(cudaMemcpy(host.data(), ptr, count * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
};

static int failures = 0;
static void report(const char *name, bool ok, const char *detail) {
  std::printf("%s %s %s\n", name, ok ? "ok" : "FAILED", detail);
  if (!ok) ++failures;
}

// ---- matmul: C[m x n] = A[m x k] B[k x n], row-major ----------------------------------------
constexpr int TILE = 16;

__global__ void matmul_tiled(const float *a, const float *b, float *c, int m, int n, int k) {
  __shared__ float as[TILE][TILE];
  __shared__ float bs[TILE][TILE];
  int row = blockIdx.y * TILE + threadIdx.y;
  int col = blockIdx.x * TILE + threadIdx.x;
  float acc = 0.0f;
  for (int t = 0; t < k; t += TILE) {
    int ac = t + threadIdx.x, br = t + threadIdx.y;
    as[threadIdx.y][threadIdx.x] = row < m && ac < k ? a[row * k + ac] : 0.0f;
    bs[threadIdx.y][threadIdx.x] = br < k && col < n ? b[br * n + col] : 0.0f;
    __syncthreads();
    for (int i = 0; i < TILE; ++i) acc += as[threadIdx.y][i] * bs[i][threadIdx.x];
    __syncthreads();
  }
  if (row < m && col < n) c[row * n + col] = acc;
}

static void check_matmul() {
  const int m = 70, n = 45, k = 53;
  std::vector<float> a(m * k), b(k * n);
  for (auto &x : a) x = next_float(-1.0f, 1.0f);
  for (auto &x : b) x = next_float(-1.0f, 1.0f);
  DeviceBuffer<float> da(a), db(b), dc(m * n);
  dim3 block(TILE, TILE), grid((n + TILE - 1) / TILE, (m + TILE - 1) / TILE);
  matmul_tiled<<<grid, block>>>(da.ptr, db.ptr, dc.ptr, m, n, k);
  CHECK(cudaGetLastError());
  std::vector<float> c = dc.to_host();
  // The device may contract a*b+acc into one fma: compare with a double reference within a
  // bound proportional to the sum of |a*b| (k roundings of at most 2^-24 each).
  double worst = 0.0;
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double ref = 0.0, mag = 0.0;
      for (int t = 0; t < k; ++t) {
        ref += static_cast<double>(a[i * k + t]) * b[t * n + j];
        mag += std::fabs(static_cast<double>(a[i * k + t]) * b[t * n + j]);
      }
      double err = std::fabs(c[i * n + j] - ref) / (mag * k * 0x1p-24);
      if (err > worst) worst = err;
    }
  }
  char detail[96];
  std::snprintf(detail, sizeof detail, "%dx%dx%d error/bound %.3f", m, n, k, worst);
  report("matmul", worst <= 1.0, detail);
}

// ---- reduce: one int sum per block with warp shuffles ---------------------------------------
__device__ int warp_sum(int v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
  return v;
}

__global__ void block_sum(const int *in, int *partial, int n) {
  __shared__ int warp_sums[32];
  int sum = 0;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
    sum += in[i];
  }
  sum = warp_sum(sum);
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_sums[warp] = sum;
  __syncthreads();
  if (warp == 0) {
    int nwarps = blockDim.x / 32;
    sum = lane < nwarps ? warp_sums[lane] : 0;
    sum = warp_sum(sum);
    if (lane == 0) partial[blockIdx.x] = sum;
  }
}

static void check_reduce() {
  const int n = 10007, blocks = 7, threads = 256;
  std::vector<int> in(n);
  for (auto &x : in) x = static_cast<int>(next_u32() % 2001) - 1000;
  DeviceBuffer<int> din(in), dpartial(blocks);
  block_sum<<<blocks, threads>>>(din.ptr, dpartial.ptr, n);
  CHECK(cudaGetLastError());
  std::vector<int> partial = dpartial.to_host();
  bool ok = true;
  long long total = 0, ref_total = 0;
  for (int b = 0; b < blocks; ++b) {
    // The same grid-stride split on the host: block b owns every element whose index is in
    // [b*threads, (b+1)*threads) modulo blocks*threads.
    long long ref = 0;
    for (int i = b * threads; i < n; i += blocks * threads) {
      for (int t = 0; t < threads && i + t < n; ++t) ref += in[i + t];
    }
    ok = ok && ref == partial[b];
    total += partial[b];
  }
  for (int x : in) ref_total += x;
  ok = ok && total == ref_total;
  char detail[96];
  std::snprintf(detail, sizeof detail, "n %d sum %lld", n, total);
  report("reduce", ok, detail);
}

// ---- scan: inclusive prefix sum of each block -----------------------------------------------
constexpr int SCAN_BLOCK = 256;

__global__ void block_inclusive_scan(const int *in, int *out, int n) {
  __shared__ int buf[2][SCAN_BLOCK];
  int i = blockIdx.x * SCAN_BLOCK + threadIdx.x;
  int cur = 0;
  buf[cur][threadIdx.x] = i < n ? in[i] : 0;
  __syncthreads();
  for (int offset = 1; offset < SCAN_BLOCK; offset <<= 1) {
    int v = buf[cur][threadIdx.x];
    if (static_cast<int>(threadIdx.x) >= offset) v += buf[cur][threadIdx.x - offset];
    buf[1 - cur][threadIdx.x] = v;
    cur = 1 - cur;
    __syncthreads();
  }
  if (i < n) out[i] = buf[cur][threadIdx.x];
}

static void check_scan() {
  const int n = 1000;
  std::vector<int> in(n);
  for (auto &x : in) x = static_cast<int>(next_u32() % 100) - 30;
  DeviceBuffer<int> din(in), dout(n);
  block_inclusive_scan<<<(n + SCAN_BLOCK - 1) / SCAN_BLOCK, SCAN_BLOCK>>>(din.ptr, dout.ptr, n);
  CHECK(cudaGetLastError());
  std::vector<int> out = dout.to_host();
  int bad = 0, running = 0;
  for (int i = 0; i < n; ++i) {
    if (i % SCAN_BLOCK == 0) running = 0;
    running += in[i];
    if (out[i] != running) ++bad;
  }
  char detail[96];
  std::snprintf(detail, sizeof detail, "n %d last %d mismatches %d", n, out[n - 1], bad);
  report("scan", bad == 0, detail);
}

// ---- transpose through a padded shared tile -------------------------------------------------
constexpr int TT = 32, TROWS = 8;

__global__ void transpose(const float *in, float *out, int rows, int cols) {
  __shared__ float tile[TT][TT + 1];  // +1: no shared-memory bank conflicts on the way out
  int x = blockIdx.x * TT + threadIdx.x;
  int y = blockIdx.y * TT + threadIdx.y;
  for (int j = 0; j < TT; j += TROWS) {
    if (x < cols && y + j < rows) tile[threadIdx.y + j][threadIdx.x] = in[(y + j) * cols + x];
  }
  __syncthreads();
  x = blockIdx.y * TT + threadIdx.x;
  y = blockIdx.x * TT + threadIdx.y;
  for (int j = 0; j < TT; j += TROWS) {
    if (x < rows && y + j < cols) out[(y + j) * rows + x] = tile[threadIdx.x][threadIdx.y + j];
  }
}

static void check_transpose() {
  const int rows = 67, cols = 45;
  std::vector<float> in(rows * cols);
  for (auto &x : in) x = next_float(-100.0f, 100.0f);
  DeviceBuffer<float> din(in), dout(rows * cols);
  dim3 block(TT, TROWS), grid((cols + TT - 1) / TT, (rows + TT - 1) / TT);
  transpose<<<grid, block>>>(din.ptr, dout.ptr, rows, cols);
  CHECK(cudaGetLastError());
  std::vector<float> out = dout.to_host();
  int bad = 0;
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) bad += out[c * rows + r] != in[r * cols + c];
  }
  char detail[96];
  std::snprintf(detail, sizeof detail, "%dx%d mismatches %d", rows, cols, bad);
  report("transpose", bad == 0, detail);
}

// ---- histogram with atomicAdd on ints and floats --------------------------------------------
constexpr int BINS = 16;

__global__ void histogram(const int *values, int n, int *counts, float *weights) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
    int bin = values[i] % BINS;
    atomicAdd(&counts[bin], 1);
    // Weights are multiples of 1/4 below 2^12 in total: every partial sum is exact in float,
    // so the result does not depend on the order of the atomic additions.
    atomicAdd(&weights[bin], 0.25f * static_cast<float>(values[i] / BINS % 4));
  }
}

static void check_histogram() {
  const int n = 5000;
  std::vector<int> values(n);
  for (auto &x : values) x = static_cast<int>(next_u32() % 1000);
  DeviceBuffer<int> dvalues(values), dcounts(BINS);
  DeviceBuffer<float> dweights(BINS);
  CHECK(cudaMemset(dcounts.ptr, 0, BINS * sizeof(int)));
  CHECK(cudaMemset(dweights.ptr, 0, BINS * sizeof(float)));
  histogram<<<8, 128>>>(dvalues.ptr, n, dcounts.ptr, dweights.ptr);
  CHECK(cudaGetLastError());
  std::vector<int> counts = dcounts.to_host();
  std::vector<float> weights = dweights.to_host();
  std::vector<int> ref_counts(BINS, 0);
  std::vector<float> ref_weights(BINS, 0.0f);
  for (int v : values) {
    ref_counts[v % BINS] += 1;
    ref_weights[v % BINS] += 0.25f * static_cast<float>(v / BINS % 4);
  }
  bool ok = counts == ref_counts && weights == ref_weights;
  char detail[96];
  std::snprintf(detail, sizeof detail, "n %d bin0 %d weight0 %g", n, counts[0], weights[0]);
  report("histogram", ok, detail);
}

// ---- __constant__ memory ---------------------------------------------------------------------
constexpr int DEGREE = 4;
__constant__ float poly[DEGREE + 1];

__global__ void eval_poly(const float *x, float *y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float acc = poly[DEGREE];
  for (int d = DEGREE - 1; d >= 0; --d) acc = acc * x[i] + poly[d];
  y[i] = acc;
}

static void check_constant() {
  const int n = 300;
  // Small integers and halves: every Horner step is exact, with or without fma contraction.
  const float coeffs[DEGREE + 1] = {3.0f, -2.0f, 0.5f, 1.0f, -0.5f};
  CHECK(cudaMemcpyToSymbol(poly, coeffs, sizeof coeffs));
  std::vector<float> x(n);
  for (int i = 0; i < n; ++i) x[i] = static_cast<float>(i % 33 - 16) * 0.5f;
  DeviceBuffer<float> dx(x), dy(n);
  eval_poly<<<(n + 127) / 128, 128>>>(dx.ptr, dy.ptr, n);
  CHECK(cudaGetLastError());
  std::vector<float> y = dy.to_host();
  int bad = 0;
  for (int i = 0; i < n; ++i) {
    float acc = coeffs[DEGREE];
    for (int d = DEGREE - 1; d >= 0; --d) acc = acc * x[i] + coeffs[d];
    bad += y[i] != acc;
  }
  char detail[96];
  std::snprintf(detail, sizeof detail, "n %d y[0] %g mismatches %d", n, y[0], bad);
  report("constant", bad == 0, detail);
}

// ---- dynamic shared memory: reverse each block's segment ------------------------------------
__global__ void reverse_segments(const float *in, float *out, int n) {
  extern __shared__ float segment[];
  int base = blockIdx.x * blockDim.x;
  int t = threadIdx.x;
  int len = min(static_cast<int>(blockDim.x), n - base);
  if (t < len) segment[t] = in[base + t];
  __syncthreads();
  if (t < len) out[base + t] = segment[len - 1 - t];
}

static void check_dynamic() {
  const int n = 777, threads = 96;
  std::vector<float> in(n);
  for (int i = 0; i < n; ++i) in[i] = static_cast<float>(i);
  DeviceBuffer<float> din(in), dout(n);
  reverse_segments<<<(n + threads - 1) / threads, threads, threads * sizeof(float)>>>(
      din.ptr, dout.ptr, n);
  CHECK(cudaGetLastError());
  std::vector<float> out = dout.to_host();
  int bad = 0;
  for (int i = 0; i < n; ++i) {
    int base = i / threads * threads;
    int len = std::min(threads, n - base);
    bad += out[i] != in[base + len - 1 - (i - base)];
  }
  char detail[96];
  std::snprintf(detail, sizeof detail, "n %d shared %d bytes mismatches %d", n,
                static_cast<int>(threads * sizeof(float)), bad);
  report("dynamic", bad == 0, detail);
}

// ---- math -----------------------------------------------------------------------------------
// Per element: 9 float results and 8 int results.
constexpr int FOUT = 9, IOUT = 8;

__global__ void math_ops(const float *a, const float *b, const int *p, const int *q, float *fo,
                         int *io, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float x = a[i], y = b[i];
  float *f = fo + i * FOUT;
  f[0] = fmaf(x, y, 1.0f);
  f[1] = sqrtf(fabsf(x));
  f[2] = x / y;
  f[3] = expf(y);
  f[4] = __expf(y);
  f[5] = static_cast<float>(p[i]);  // int -> float, round to nearest even
  f[6] = __int2float_rz(p[i]);      // int -> float, toward zero
  f[7] = floorf(x) + ceilf(y);
  f[8] = static_cast<float>(static_cast<unsigned>(q[i]) * 2654435761u);
  int *o = io + i * IOUT;
  o[0] = static_cast<int>(x * 1000.0f);  // float -> int, truncation
  o[1] = __float2int_rn(x * 1000.0f);    // round to nearest even
  o[2] = lrintf(y * 10.0f);              // current rounding mode: nearest even
  o[3] = static_cast<int>(roundf(y * 10.0f));  // halves away from zero
  o[4] = p[i] / q[i] + p[i] % q[i];
  o[5] = (p[i] >> 3) ^ static_cast<int>(static_cast<unsigned>(q[i]) << 2);
  o[6] = static_cast<int>(__umulhi(static_cast<unsigned>(p[i]), 3000000019u));
  o[7] = __popc(p[i]) + __clz(q[i]);
}

// Distance in units in the last place between two finite floats of the same sign.
static int64_t ulps(float u, float v) {
  int32_t iu, iv;
  std::memcpy(&iu, &u, 4);
  std::memcpy(&iv, &v, 4);
  return std::llabs(static_cast<int64_t>(iu) - iv);
}

static int popcount(uint32_t v) {
  int c = 0;
  for (; v; v &= v - 1) ++c;
  return c;
}
static int clz(uint32_t v) {
  int c = 0;
  for (uint32_t bit = 0x80000000u; bit && !(v & bit); bit >>= 1) ++c;
  return c;
}

static void check_math() {
  const int n = 513;
  std::vector<float> a(n), b(n);
  std::vector<int> p(n), q(n);
  for (int i = 0; i < n; ++i) {
    a[i] = next_float(-50.0f, 50.0f);
    b[i] = next_float(-10.0f, 10.0f);
    if (std::fabs(b[i]) < 0.01f) b[i] = 0.5f;
    p[i] = static_cast<int>(next_u32());
    q[i] = static_cast<int>(next_u32() % 20001) - 10000;
    if (q[i] == 0 || q[i] == -1) q[i] = 7;  // no division by 0, no INT_MIN / -1
  }
  // Halfway cases for the rounding conversions: y*10 is exactly 2.5 and -7.5 for these.
  b[0] = 0.25f;  // lrintf -> 2 (to even), roundf -> 3 (away from zero)
  b[1] = -0.75f; // lrintf -> -8, roundf -> -8
  DeviceBuffer<float> da(a), db(b), dfo(n * FOUT);
  DeviceBuffer<int> dp(p), dq(q), dio(n * IOUT);
  math_ops<<<(n + 127) / 128, 128>>>(da.ptr, db.ptr, dp.ptr, dq.ptr, dfo.ptr, dio.ptr, n);
  CHECK(cudaGetLastError());
  std::vector<float> fo = dfo.to_host();
  std::vector<int> io = dio.to_host();
  int bad = 0;
  int64_t worst_exp = 0, worst_fast_exp = 0;
  for (int i = 0; i < n; ++i) {
    float x = a[i], y = b[i];
    const float *f = &fo[i * FOUT];
    // Correctly rounded on both sides (nvcc's defaults: -prec-div=true -prec-sqrt=true).
    bad += f[0] != std::fmaf(x, y, 1.0f);
    bad += f[1] != std::sqrt(std::fabs(x));
    bad += f[2] != x / y;
    // CUDA's expf: at most 2 ulp from the exact result (CUDA C++ Programming Guide, mathematical
    // functions); glibc's expf is within 1 ulp of it, so the two are at most 3 ulp apart.
    int64_t e = ulps(f[3], std::exp(y));
    worst_exp = std::max(worst_exp, e);
    bad += e > 3;
    // __expf: at most 2 + floor(|1.173 y|) ulp from the exact result (intrinsic functions), 1
    // more against glibc.
    int64_t fe = ulps(f[4], std::exp(y));
    worst_fast_exp = std::max(worst_fast_exp, fe);
    bad += fe > 3 + static_cast<int64_t>(std::floor(std::fabs(1.173f * y)));
    bad += f[5] != static_cast<float>(p[i]);
    // Toward zero: the largest float of magnitude <= |p|.
    float rz = static_cast<float>(p[i]);
    if (std::fabs(static_cast<double>(rz)) > std::fabs(static_cast<double>(p[i]))) {
      rz = std::nextafter(rz, 0.0f);
    }
    bad += f[6] != rz;
    bad += f[7] != std::floor(x) + std::ceil(y);
    bad += f[8] != static_cast<float>(static_cast<unsigned>(q[i]) * 2654435761u);
    const int *o = &io[i * IOUT];
    bad += o[0] != static_cast<int>(x * 1000.0f);
    bad += o[1] != static_cast<int>(std::nearbyint(x * 1000.0f));
    bad += o[2] != static_cast<int>(std::nearbyint(y * 10.0f));
    bad += o[3] != static_cast<int>(std::round(y * 10.0f));
    bad += o[4] != p[i] / q[i] + p[i] % q[i];
    bad += o[5] != ((p[i] >> 3) ^ static_cast<int>(static_cast<unsigned>(q[i]) << 2));
    bad += o[6] != static_cast<int>((static_cast<uint64_t>(static_cast<unsigned>(p[i])) *
                                     3000000019ull) >> 32);
    bad += o[7] != popcount(static_cast<uint32_t>(p[i])) + clz(static_cast<uint32_t>(q[i]));
  }
  char detail[192];
  std::snprintf(detail, sizeof detail,
                "n %d expf worst %lld ulp __expf worst %lld ulp lrintf(2.5) %d roundf(2.5) %d "
                "mismatches %d",
                n, static_cast<long long>(worst_exp), static_cast<long long>(worst_fast_exp),
                io[2], io[3], bad);
  report("math", bad == 0, detail);
}

int main() {
  check_matmul();
  check_reduce();
  check_scan();
  check_transpose();
  check_histogram();
  check_constant();
  check_dynamic();
  check_math();
  if (failures) {
    std::printf("%d kernels failed\nFAILED\n", failures);
    return 1;
  }
  std::printf("PASSED\n");
  return 0;
}
