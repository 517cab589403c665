// mlp_train.cu: the CUDA C++ twin of tests/programs/mlp_train.c. The same kind of workload (a
// small multi-layer perceptron trained for a few iterations, fresh batches from a seeded
// generator, a loss line per iteration and a checksum of the final weights), but with the math
// done on the device by ordinary CUDA kernels, built by nvcc, instead of host functions
// registered with the shim.
//
// Model: x[B x D] -> z1 = x W1 + b1 -> h = relu(z1) -> logits = h W2 + b2 -> softmax
// cross-entropy against labels, mean over the batch. Labels come from a fixed random linear
// "teacher" T [D x C]: label = argmax(x T). x is uniform in [-1, 1).
//
// Kernels: a tiled shared-memory matmul (the three products of the backward pass are the same
// kernel with transposed strides), bias + ReLU forward and ReLU backward, softmax cross-entropy
// with one warp per row (max, sum and argmax with warp shuffles), the batch mean of the loss with
// a block reduction (warp shuffles, then one shared slot per warp), a column sum for b1's
// gradient, b2's gradient with atomicAdd, and SGD or Adam (--adam) update kernels.
//
// Streams and memory: the batch is uploaded from pinned memory on a side stream; the compute
// stream waits for it (event). Layer 2's update runs on the side stream as soon as its gradients
// exist (event), while the compute stream goes on with layer 1's backward pass; the next
// iteration's forward pass waits for that update (event). Activations and gradients are
// temporaries from cudaMallocAsync, released with cudaFreeAsync on the stream that last uses
// them (layer 2's gradients on the side stream).
//
// Determinism: every printed float is computed in a fixed order whatever the scheduling: each
// matmul output by one thread summing k in order, reductions as fixed trees of shuffles, and b2's
// gradient summed with atomicAdd on 64-bit fixed-point integers (integer addition is
// associative, so the order of the atomics does not matter). The only other atomic counts the
// correct predictions (integers). So a run prints the same bits every time.
//
// Check: the program trains the same model on the host (the same algorithm, the same summation
// order) and compares. The device may contract a*b+c into fma (nvcc's default -fmad=true) and
// its expf/logf differ from glibc's by a few ulp, so results agree within a tolerance, not
// bitwise: each iteration's loss within 1e-3 relative (plus 1e-5 absolute), and the final
// weights within 1e-3 absolute for SGD. Adam divides by the root of the squared gradient, so a
// gradient that is zero up to rounding can step by up to lr either way: with --adam at most 0.1%
// of the weights may differ by more than 1e-3, none by more than 2 lr iters.
//
// Usage: mlp_train [--batch N] [--in N] [--hidden N] [--classes N] [--iters N] [--seed N]
//                  [--lr X] [--adam]
// defaults: --batch 64 --in 64 --hidden 128 --classes 10 --iters 10 --seed 1, --lr 0.5 (SGD) or
// 0.01 (Adam). Output: a config line, "iter K loss X correct N" per iteration (X with %.9g),
// "checksum 0x..." (FNV-1a of the bits of W1, b1, W2, b2), "weight_sum S", the differences from
// the host reference, then PASSED (exit 0) or FAILED (exit 1).
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
      std::fprintf(stderr, "mlp_train: %s:%d: %s failed: %s\n", __FILE__, __LINE__,   \
                   #call, cudaGetErrorString(err_));                                   \
      std::printf("FAILED\n");                                                         \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

constexpr int TILE = 16;
constexpr int WARP = 32;
constexpr float FIXED_SCALE = 4294967296.0f;  // 2^32: b2's gradient in 32.32 fixed point

// ---- Kernels ----------------------------------------------------------------------------------

// C[M x N] = op(A)[M x K] op(B)[K x N], where element (i, k) of op(A) is A[i * a_row + k * a_col]
// and element (k, j) of op(B) is B[k * b_row + j * b_col]: row-major operands and their
// transposes alike. Each thread sums its output over k in increasing order.
__global__ void matmul(const float *a, int a_row, int a_col, const float *b, int b_row, int b_col,
                       float *c, int m, int n, int k) {
  __shared__ float as[TILE][TILE];
  __shared__ float bs[TILE][TILE];
  int row = blockIdx.y * TILE + threadIdx.y;
  int col = blockIdx.x * TILE + threadIdx.x;
  float acc = 0.0f;
  for (int t = 0; t < k; t += TILE) {
    int ak = t + threadIdx.x, bk = t + threadIdx.y;
    as[threadIdx.y][threadIdx.x] = row < m && ak < k ? a[row * a_row + ak * a_col] : 0.0f;
    bs[threadIdx.y][threadIdx.x] = bk < k && col < n ? b[bk * b_row + col * b_col] : 0.0f;
    __syncthreads();
    for (int i = 0; i < TILE && t + i < k; ++i) acc += as[threadIdx.y][i] * bs[i][threadIdx.x];
    __syncthreads();
  }
  if (row < m && col < n) c[row * n + col] = acc;
}

// out = z + bias (per column), then max(., 0) when relu is set. out may be z.
__global__ void bias_act(const float *z, const float *bias, float *out, int rows, int cols,
                         bool relu) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  float v = z[i] + bias[i % cols];
  out[i] = relu && v < 0.0f ? 0.0f : v;
}

// dz = dh where the ReLU's output h was positive, 0 elsewhere.
__global__ void relu_backward(const float *dh, const float *h, float *dz, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) dz[i] = h[i] > 0.0f ? dh[i] : 0.0f;
}

__device__ float warp_sum(float v) {
  for (int offset = WARP / 2; offset > 0; offset >>= 1) {
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  return v;
}

// One warp per row of logits[rows x classes]: the softmax, the row's loss
// -log softmax[label], the gradient of the mean loss (softmax - onehot(label)) / rows, and a
// count of rows whose argmax (lowest index among equals) is the label.
__global__ void softmax_xent(const float *logits, const int *labels, float *dlogits,
                             float *row_loss, int *correct, int rows, int classes) {
  int lane = threadIdx.x % WARP;
  int row = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;
  if (row >= rows) return;  // the whole warp leaves together
  const float *l = logits + row * classes;
  float best = -INFINITY;
  int best_index = classes;
  for (int c = lane; c < classes; c += WARP) {
    if (l[c] > best) {
      best = l[c];
      best_index = c;
    }
  }
  for (int offset = WARP / 2; offset > 0; offset >>= 1) {
    float other = __shfl_xor_sync(0xffffffffu, best, offset);
    int other_index = __shfl_xor_sync(0xffffffffu, best_index, offset);
    if (other > best || (other == best && other_index < best_index)) {
      best = other;
      best_index = other_index;
    }
  }
  // The butterfly leaves every lane with the row's maximum in best.
  float sum = 0.0f;
  for (int c = lane; c < classes; c += WARP) sum += expf(l[c] - best);
  sum = warp_sum(sum);
  int label = labels[row];
  for (int c = lane; c < classes; c += WARP) {
    float p = expf(l[c] - best) / sum;
    dlogits[row * classes + c] = (p - (c == label ? 1.0f : 0.0f)) / static_cast<float>(rows);
  }
  if (lane == 0) {
    row_loss[row] = logf(sum) - (l[label] - best);
    if (best_index == label) atomicAdd(correct, 1);
  }
}

// *loss = mean of row_loss[0..n): one block; each thread sums a strided slice in order, then a
// fixed tree of warp shuffles and one shared slot per warp.
__global__ void mean_loss(const float *row_loss, float *loss, int n) {
  __shared__ float warp_sums[WARP];
  float sum = 0.0f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) sum += row_loss[i];
  sum = warp_sum(sum);
  int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
  if (lane == 0) warp_sums[warp] = sum;
  __syncthreads();
  if (warp == 0) {
    int warps = blockDim.x / WARP;
    sum = warp_sum(lane < warps ? warp_sums[lane] : 0.0f);
    if (lane == 0) *loss = sum / static_cast<float>(n);
  }
}

// db[c] = sum over rows of dz[r][c], one thread per column, rows in order.
__global__ void column_sum(const float *dz, float *db, int rows, int cols) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float sum = 0.0f;
  for (int r = 0; r < rows; ++r) sum += dz[r * cols + c];
  db[c] = sum;
}

// acc[c] += dz[r][c] * 2^32 rounded to an integer, one thread per element. The accumulator is
// zeroed by the caller; integer atomics make the sum independent of the order of the threads.
__global__ void column_sum_atomic(const float *dz, unsigned long long *acc, int rows, int cols) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  long long q = __float2ll_rn(dz[i] * FIXED_SCALE);
  atomicAdd(&acc[i % cols], static_cast<unsigned long long>(q));
}

__global__ void fixed_to_float(const unsigned long long *acc, float *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = static_cast<float>(static_cast<long long>(acc[i])) / FIXED_SCALE;
}

__global__ void sgd_step(float *w, const float *g, float lr, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) w[i] -= lr * g[i];
}

// Adam with bias corrections corr1 = 1 - beta1^t and corr2 = 1 - beta2^t (from the host).
__global__ void adam_step(float *w, const float *g, float *m, float *v, float lr, float beta1,
                          float beta2, float eps, float corr1, float corr2, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float gi = g[i];
  m[i] = beta1 * m[i] + (1.0f - beta1) * gi;
  v[i] = beta2 * v[i] + (1.0f - beta2) * gi * gi;
  float mhat = m[i] / corr1, vhat = v[i] / corr2;
  w[i] -= lr * mhat / (sqrtf(vhat) + eps);
}

// ---- Host reference: the same algorithms, sequential ----------------------------------------

static void host_matmul(const float *a, int a_row, int a_col, const float *b, int b_row,
                        int b_col, float *c, int m, int n, int k) {
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (int t = 0; t < k; ++t) acc += a[i * a_row + t * a_col] * b[t * b_row + j * b_col];
      c[i * n + j] = acc;
    }
  }
}

// ---- Options and data ---------------------------------------------------------------------

struct Options {
  int batch = 64, in = 64, hidden = 128, classes = 10, iters = 10;
  unsigned long long seed = 1;
  float lr = 0.0f;  // 0: the optimizer's default
  bool adam = false;
};

[[noreturn]] static void usage(const char *problem) {
  if (problem) std::fprintf(stderr, "mlp_train: %s\n", problem);
  std::fprintf(stderr,
               "usage: mlp_train [--batch N] [--in N] [--hidden N] [--classes N] [--iters N] "
               "[--seed N] [--lr X] [--adam]\n"
               "defaults: --batch 64 --in 64 --hidden 128 --classes 10 --iters 10 --seed 1, "
               "--lr 0.5 (SGD) or 0.01 (Adam)\n");
  std::exit(2);
}

static long positive(const char *flag, const char *value, long max) {
  char *end = nullptr;
  long v = std::strtol(value, &end, 10);
  if (*value == '\0' || *end != '\0' || v < 1 || v > max) {
    std::fprintf(stderr, "mlp_train: %s expects a whole number in [1, %ld], got '%s'\n", flag,
                 max, value);
    usage(nullptr);
  }
  return v;
}

static Options parse_args(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const char *flag = argv[i];
    if (std::strcmp(flag, "--help") == 0 || std::strcmp(flag, "-h") == 0) usage(nullptr);
    if (std::strcmp(flag, "--adam") == 0) {
      o.adam = true;
      continue;
    }
    if (i + 1 >= argc) usage("missing value");
    const char *value = argv[++i];
    if (std::strcmp(flag, "--batch") == 0) {
      o.batch = static_cast<int>(positive(flag, value, 1 << 16));
    } else if (std::strcmp(flag, "--in") == 0) {
      o.in = static_cast<int>(positive(flag, value, 1 << 14));
    } else if (std::strcmp(flag, "--hidden") == 0) {
      o.hidden = static_cast<int>(positive(flag, value, 1 << 14));
    } else if (std::strcmp(flag, "--classes") == 0) {
      o.classes = static_cast<int>(positive(flag, value, 1 << 14));
    } else if (std::strcmp(flag, "--iters") == 0) {
      o.iters = static_cast<int>(positive(flag, value, 1 << 20));
    } else if (std::strcmp(flag, "--seed") == 0) {
      char *end = nullptr;
      o.seed = std::strtoull(value, &end, 10);
      if (*value == '\0' || *end != '\0') usage("--seed expects a whole number");
    } else if (std::strcmp(flag, "--lr") == 0) {
      char *end = nullptr;
      o.lr = std::strtof(value, &end);
      if (*value == '\0' || *end != '\0' || !(o.lr > 0.0f)) {
        usage("--lr expects a positive number");
      }
    } else {
      usage("unknown option");
    }
  }
  if (static_cast<long long>(o.batch) * std::max(o.in, std::max(o.hidden, o.classes)) >
      (1 << 26)) {
    usage("--batch times the widest layer must stay below 2^26 elements");
  }
  if (o.lr == 0.0f) o.lr = o.adam ? 0.01f : 0.5f;
  return o;
}

// splitmix64, as in mlp_train.c: the data and initial weights are a pure function of the seed.
static unsigned long long rng_next(unsigned long long *state) {
  unsigned long long z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [-1, 1), exactly representable (24 random bits).
static float rng_uniform(unsigned long long *state) {
  return static_cast<float>(rng_next(state) >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

// ---- Parameters and the optimizer, the same on both sides --------------------------------------

struct Adam {
  static constexpr float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  float corr1 = 1.0f, corr2 = 1.0f;
  void next_step(int t) {
    corr1 = 1.0f - std::pow(beta1, static_cast<float>(t));
    corr2 = 1.0f - std::pow(beta2, static_cast<float>(t));
  }
};

static void host_update(const Options &o, const Adam &adam, std::vector<float> &w,
                        const std::vector<float> &g, std::vector<float> &m,
                        std::vector<float> &v) {
  for (size_t i = 0; i < w.size(); ++i) {
    if (!o.adam) {
      w[i] -= o.lr * g[i];
      continue;
    }
    m[i] = Adam::beta1 * m[i] + (1.0f - Adam::beta1) * g[i];
    v[i] = Adam::beta2 * v[i] + (1.0f - Adam::beta2) * g[i] * g[i];
    float mhat = m[i] / adam.corr1, vhat = v[i] / adam.corr2;
    w[i] -= o.lr * mhat / (std::sqrt(vhat) + Adam::eps);
  }
}

// One parameter tensor: its host reference copy and its device copy (with Adam's moments).
struct Param {
  std::vector<float> host, host_m, host_v;
  float *dev = nullptr, *dev_m = nullptr, *dev_v = nullptr;
  int n() const { return static_cast<int>(host.size()); }
};

static Param make_param(int n, float scale, unsigned long long *state) {
  Param p;
  p.host.resize(n);
  for (auto &x : p.host) x = scale * rng_uniform(state);
  p.host_m.assign(n, 0.0f);
  p.host_v.assign(n, 0.0f);
  size_t bytes = static_cast<size_t>(n) * sizeof(float);
  CHECK(cudaMalloc(&p.dev, bytes));
  CHECK(cudaMemcpy(p.dev, p.host.data(), bytes, cudaMemcpyHostToDevice));
  CHECK(cudaMalloc(&p.dev_m, bytes));
  CHECK(cudaMalloc(&p.dev_v, bytes));
  CHECK(cudaMemset(p.dev_m, 0, bytes));
  CHECK(cudaMemset(p.dev_v, 0, bytes));
  return p;
}

static unsigned blocks_for(int n, int threads) {
  return static_cast<unsigned>((n + threads - 1) / threads);
}

static void device_update(const Options &o, const Adam &adam, Param &p, const float *grad,
                          cudaStream_t s) {
  if (o.adam) {
    adam_step<<<blocks_for(p.n(), 256), 256, 0, s>>>(p.dev, grad, p.dev_m, p.dev_v, o.lr,
                                                     Adam::beta1, Adam::beta2, Adam::eps,
                                                     adam.corr1, adam.corr2, p.n());
  } else {
    sgd_step<<<blocks_for(p.n(), 256), 256, 0, s>>>(p.dev, grad, o.lr, p.n());
  }
  CHECK(cudaGetLastError());
}

static void launch_matmul(const float *a, int a_row, int a_col, const float *b, int b_row,
                          int b_col, float *c, int m, int n, int k, cudaStream_t s) {
  dim3 block(TILE, TILE);
  dim3 grid(blocks_for(n, TILE), blocks_for(m, TILE));
  matmul<<<grid, block, 0, s>>>(a, a_row, a_col, b, b_row, b_col, c, m, n, k);
  CHECK(cudaGetLastError());
}

template <typename T> static T *malloc_async(size_t count, cudaStream_t s) {
  void *p = nullptr;
  CHECK(cudaMallocAsync(&p, count * sizeof(T), s));
  return static_cast<T *>(p);
}

int main(int argc, char **argv) {
  const Options o = parse_args(argc, argv);
  const int B = o.batch, D = o.in, H = o.hidden, C = o.classes;
  std::printf("config in %d hidden %d classes %d batch %d iters %d seed %llu optimizer %s "
              "lr %.9g\n",
              D, H, C, B, o.iters, o.seed, o.adam ? "adam" : "sgd", static_cast<double>(o.lr));

  unsigned long long state = o.seed;
  std::vector<float> teacher(static_cast<size_t>(D) * C);
  for (auto &t : teacher) t = rng_uniform(&state);
  // He-uniform for the ReLU layer, Glorot-uniform for the output layer, biases small.
  Param w1 = make_param(D * H, std::sqrt(6.0f / static_cast<float>(D)), &state);
  Param b1 = make_param(H, 0.01f, &state);
  Param w2 = make_param(H * C, std::sqrt(6.0f / static_cast<float>(H + C)), &state);
  Param b2 = make_param(C, 0.01f, &state);

  cudaStream_t compute, side;
  CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  cudaEvent_t uploaded, grads2_ready, update2_done, iteration_done;
  for (cudaEvent_t *e : {&uploaded, &grads2_ready, &update2_done, &iteration_done}) {
    CHECK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
  }

  // Pinned staging for the batch and the results read back each iteration; persistent device
  // copies of the batch (overwritten by each upload once the previous iteration is done).
  float *x_h, *loss_h;
  int *labels_h, *correct_h;
  CHECK(cudaMallocHost(&x_h, static_cast<size_t>(B) * D * sizeof(float)));
  CHECK(cudaMallocHost(&labels_h, B * sizeof(int)));
  CHECK(cudaMallocHost(&loss_h, sizeof(float)));
  CHECK(cudaMallocHost(&correct_h, sizeof(int)));
  float *x;
  int *labels;
  CHECK(cudaMalloc(&x, static_cast<size_t>(B) * D * sizeof(float)));
  CHECK(cudaMalloc(&labels, B * sizeof(int)));

  // Host reference activations and gradients.
  std::vector<float> rz1(static_cast<size_t>(B) * H), rh(rz1.size()), rdh(rz1.size()),
      rdz1(rz1.size()), rlogits(static_cast<size_t>(B) * C), rdlogits(rlogits.size()),
      rgw1(w1.host.size()), rgb1(H), rgw2(w2.host.size()), rgb2(C);

  // The set-up ran on the legacy default stream, which the two non-blocking streams do not wait
  // for (and a cudaMemset or a pageable cudaMemcpy may return before the device has finished).
  CHECK(cudaDeviceSynchronize());

  Adam adam;
  double worst_loss_error = 0.0;
  bool ok = true;
  for (int it = 0; it < o.iters; ++it) {
    adam.next_step(it + 1);
    // The next batch, host side like a data loader. The previous iteration ended with a
    // synchronisation of the compute stream, after its upload had been consumed.
    for (int i = 0; i < B * D; ++i) x_h[i] = rng_uniform(&state);
    for (int r = 0; r < B; ++r) {
      int best = 0;
      float best_score = -INFINITY;
      for (int c = 0; c < C; ++c) {
        float score = 0.0f;
        for (int d = 0; d < D; ++d) score += x_h[r * D + d] * teacher[d * C + c];
        if (score > best_score) {
          best_score = score;
          best = c;
        }
      }
      labels_h[r] = best;
    }

    // Upload on the side stream, once the previous iteration no longer reads x.
    CHECK(cudaStreamWaitEvent(side, iteration_done, 0));
    CHECK(cudaMemcpyAsync(x, x_h, static_cast<size_t>(B) * D * sizeof(float),
                          cudaMemcpyHostToDevice, side));
    CHECK(cudaMemcpyAsync(labels, labels_h, B * sizeof(int), cudaMemcpyHostToDevice, side));
    CHECK(cudaEventRecord(uploaded, side));

    // Forward, on the compute stream, after the upload and the previous update of layer 2.
    CHECK(cudaStreamWaitEvent(compute, uploaded, 0));
    CHECK(cudaStreamWaitEvent(compute, update2_done, 0));
    float *z1 = malloc_async<float>(static_cast<size_t>(B) * H, compute);
    float *h = malloc_async<float>(static_cast<size_t>(B) * H, compute);
    float *logits = malloc_async<float>(static_cast<size_t>(B) * C, compute);
    float *dlogits = malloc_async<float>(static_cast<size_t>(B) * C, compute);
    float *row_loss = malloc_async<float>(B, compute);
    float *loss = malloc_async<float>(1, compute);
    int *correct = malloc_async<int>(1, compute);
    launch_matmul(x, D, 1, w1.dev, H, 1, z1, B, H, D, compute);
    bias_act<<<blocks_for(B * H, 256), 256, 0, compute>>>(z1, b1.dev, h, B, H, true);
    launch_matmul(h, H, 1, w2.dev, C, 1, logits, B, C, H, compute);
    bias_act<<<blocks_for(B * C, 256), 256, 0, compute>>>(logits, b2.dev, logits, B, C, false);
    CHECK(cudaMemsetAsync(correct, 0, sizeof(int), compute));
    constexpr int rows_per_block = 4;
    softmax_xent<<<blocks_for(B, rows_per_block), rows_per_block * WARP, 0, compute>>>(
        logits, labels, dlogits, row_loss, correct, B, C);
    mean_loss<<<1, 256, 0, compute>>>(row_loss, loss, B);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpyAsync(loss_h, loss, sizeof(float), cudaMemcpyDeviceToHost, compute));
    CHECK(cudaMemcpyAsync(correct_h, correct, sizeof(int), cudaMemcpyDeviceToHost, compute));

    // Backward through layer 2: its gradients, then dh (which reads W2 before its update).
    float *gw2 = malloc_async<float>(static_cast<size_t>(H) * C, compute);
    float *gb2 = malloc_async<float>(C, compute);
    unsigned long long *gb2_fixed = malloc_async<unsigned long long>(C, compute);
    float *dh = malloc_async<float>(static_cast<size_t>(B) * H, compute);
    launch_matmul(h, 1, H, dlogits, C, 1, gw2, H, C, B, compute);  // h^T dlogits
    CHECK(cudaMemsetAsync(gb2_fixed, 0, C * sizeof(unsigned long long), compute));
    column_sum_atomic<<<blocks_for(B * C, 256), 256, 0, compute>>>(dlogits, gb2_fixed, B, C);
    fixed_to_float<<<blocks_for(C, 256), 256, 0, compute>>>(gb2_fixed, gb2, C);
    launch_matmul(dlogits, C, 1, w2.dev, 1, C, dh, B, H, C, compute);  // dlogits W2^T
    CHECK(cudaEventRecord(grads2_ready, compute));

    // Layer 2's update on the side stream, concurrent with layer 1's backward pass.
    CHECK(cudaStreamWaitEvent(side, grads2_ready, 0));
    device_update(o, adam, w2, gw2, side);
    device_update(o, adam, b2, gb2, side);
    CHECK(cudaFreeAsync(gw2, side));
    CHECK(cudaFreeAsync(gb2, side));
    CHECK(cudaFreeAsync(gb2_fixed, side));
    CHECK(cudaEventRecord(update2_done, side));

    // Backward through layer 1 and its update.
    float *dz1 = malloc_async<float>(static_cast<size_t>(B) * H, compute);
    float *gw1 = malloc_async<float>(static_cast<size_t>(D) * H, compute);
    float *gb1 = malloc_async<float>(H, compute);
    relu_backward<<<blocks_for(B * H, 256), 256, 0, compute>>>(dh, h, dz1, B * H);
    launch_matmul(x, 1, D, dz1, H, 1, gw1, D, H, B, compute);  // x^T dz1
    column_sum<<<blocks_for(H, 128), 128, 0, compute>>>(dz1, gb1, B, H);
    device_update(o, adam, w1, gw1, compute);
    device_update(o, adam, b1, gb1, compute);
    for (void *p : {static_cast<void *>(z1), static_cast<void *>(h), static_cast<void *>(logits),
                    static_cast<void *>(dlogits), static_cast<void *>(row_loss),
                    static_cast<void *>(loss), static_cast<void *>(correct),
                    static_cast<void *>(dh), static_cast<void *>(dz1), static_cast<void *>(gw1),
                    static_cast<void *>(gb1)}) {
      CHECK(cudaFreeAsync(p, compute));
    }
    CHECK(cudaEventRecord(iteration_done, compute));
    CHECK(cudaStreamSynchronize(compute));
    std::printf("iter %d loss %.9g correct %d\n", it, static_cast<double>(*loss_h), *correct_h);
    std::fflush(stdout);

    // The same iteration on the host.
    host_matmul(x_h, D, 1, w1.host.data(), H, 1, rz1.data(), B, H, D);
    for (int i = 0; i < B * H; ++i) {
      float v = rz1[i] + b1.host[i % H];
      rh[i] = v < 0.0f ? 0.0f : v;
    }
    host_matmul(rh.data(), H, 1, w2.host.data(), C, 1, rlogits.data(), B, C, H);
    for (int i = 0; i < B * C; ++i) rlogits[i] += b2.host[i % C];
    float loss_sum = 0.0f;
    for (int r = 0; r < B; ++r) {
      const float *l = &rlogits[r * C];
      float max = l[0];
      for (int c = 1; c < C; ++c) max = std::fmax(max, l[c]);
      float sum = 0.0f;
      for (int c = 0; c < C; ++c) sum += std::exp(l[c] - max);
      for (int c = 0; c < C; ++c) {
        float p = std::exp(l[c] - max) / sum;
        rdlogits[r * C + c] = (p - (c == labels_h[r] ? 1.0f : 0.0f)) / static_cast<float>(B);
      }
      loss_sum += std::log(sum) - (l[labels_h[r]] - max);
    }
    float ref_loss = loss_sum / static_cast<float>(B);
    double loss_error = std::fabs(static_cast<double>(*loss_h) - ref_loss);
    worst_loss_error = std::max(worst_loss_error, loss_error);
    if (!(loss_error <= 1e-5 + 1e-3 * std::fabs(ref_loss))) {
      std::printf("iter %d: loss %.9g, host reference %.9g\n", it, static_cast<double>(*loss_h),
                  static_cast<double>(ref_loss));
      ok = false;
    }
    host_matmul(rh.data(), 1, H, rdlogits.data(), C, 1, rgw2.data(), H, C, B);
    for (int c = 0; c < C; ++c) {
      long long acc = 0;
      for (int r = 0; r < B; ++r) acc += std::llrint(rdlogits[r * C + c] * FIXED_SCALE);
      rgb2[c] = static_cast<float>(acc) / FIXED_SCALE;
    }
    host_matmul(rdlogits.data(), C, 1, w2.host.data(), 1, C, rdh.data(), B, H, C);
    host_update(o, adam, w2.host, rgw2, w2.host_m, w2.host_v);
    host_update(o, adam, b2.host, rgb2, b2.host_m, b2.host_v);
    for (int i = 0; i < B * H; ++i) rdz1[i] = rh[i] > 0.0f ? rdh[i] : 0.0f;
    host_matmul(x_h, 1, D, rdz1.data(), H, 1, rgw1.data(), D, H, B);
    for (int c = 0; c < H; ++c) {
      float sum = 0.0f;
      for (int r = 0; r < B; ++r) sum += rdz1[r * H + c];
      rgb1[c] = sum;
    }
    host_update(o, adam, w1.host, rgw1, w1.host_m, w1.host_v);
    host_update(o, adam, b1.host, rgb1, b1.host_m, b1.host_v);
  }

  // Final weights: bits hashed (FNV-1a) and values summed in a fixed order, then compared with
  // the host's.
  CHECK(cudaDeviceSynchronize());
  unsigned long long hash = 0xcbf29ce484222325ull;
  double weight_sum = 0.0, worst_weight_error = 0.0;
  long far_weights = 0, weights = 0;
  for (Param *p : {&w1, &b1, &w2, &b2}) {
    std::vector<float> dev(p->host.size());
    CHECK(cudaMemcpy(dev.data(), p->dev, dev.size() * sizeof(float), cudaMemcpyDeviceToHost));
    const unsigned char *bits = reinterpret_cast<const unsigned char *>(dev.data());
    for (size_t i = 0; i < dev.size() * sizeof(float); ++i) {
      hash ^= bits[i];
      hash *= 0x100000001b3ull;
    }
    for (size_t i = 0; i < dev.size(); ++i) {
      weight_sum += dev[i];
      double error = std::fabs(static_cast<double>(dev[i]) - p->host[i]);
      worst_weight_error = std::max(worst_weight_error, error);
      far_weights += error > 1e-3;
      ++weights;
    }
  }
  std::printf("checksum 0x%016llx\n", hash);
  std::printf("weight_sum %.17g\n", weight_sum);
  std::printf("reference max_loss_error %.3g max_weight_error %.3g weights_beyond_1e-3 %ld\n",
              worst_loss_error, worst_weight_error, far_weights);
  if (o.adam) {
    ok = ok && far_weights * 1000 <= weights && worst_weight_error <= 2.0 * o.lr * o.iters;
  } else {
    ok = ok && far_weights == 0;
  }

  for (Param *p : {&w1, &b1, &w2, &b2}) {
    CHECK(cudaFree(p->dev));
    CHECK(cudaFree(p->dev_m));
    CHECK(cudaFree(p->dev_v));
  }
  CHECK(cudaFree(x));
  CHECK(cudaFree(labels));
  CHECK(cudaFreeHost(x_h));
  CHECK(cudaFreeHost(labels_h));
  CHECK(cudaFreeHost(loss_h));
  CHECK(cudaFreeHost(correct_h));
  for (cudaEvent_t e : {uploaded, grads2_ready, update2_done, iteration_done}) {
    CHECK(cudaEventDestroy(e));
  }
  CHECK(cudaStreamDestroy(compute));
  CHECK(cudaStreamDestroy(side));
  std::printf(ok ? "PASSED\n" : "FAILED\n");
  return ok ? 0 : 1;
}
