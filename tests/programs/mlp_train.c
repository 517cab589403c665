/*
 * mlp_train.c — trains a multi-layer perceptron with plain SGD, the way a framework WITHOUT a
 * caching allocator drives a GPU: every tensor of an iteration is cudaMalloc'd when it is created
 * and cudaFree'd as soon as it is dead. It is itermem's reference workload on cuda-shim.
 *
 * Model: L linear layers of width W (input, hidden and output dimension are all W), ReLU between
 * them, mean-squared-error loss against a fixed random linear "teacher" T:
 *     h_0 = x,  z_l = h_l W_l + b_l,  h_{l+1} = relu(z_l) (l < L-1),  out = z_{L-1},
 *     loss = mean((out - x T)^2).
 * Each iteration draws a fresh batch (x uniform in [0, 1)) from a generator seeded by --seed,
 * host side like a data loader. Hidden layers start as the identity plus small noise (an
 * identity-initialised ReLU network, which plain SGD trains quickly and stably at any depth);
 * the last layer and the teacher are random. The loss falls steadily, e.g. from about 1.4 to
 * about 0.35 in the default 10 iterations.
 *
 * Memory, as PyTorch >= 2.0 would use it without its caching allocator:
 * - persistent (allocated once, initialised with cudaMemcpy from host): W_l (W*W floats) and
 *   b_l (W floats) for every layer: 2L allocations.
 * - per iteration, in this order (A = one activation, B*W floats; every tensor is a fresh
 *   cudaMalloc):
 *     x, y                          input batch and teacher targets (cudaMemcpyAsync from pinned)
 *     forward, l < L-1:             z_l; h_{l+1} = relu(z_l); free z_l (ReLU saves its output)
 *     forward, l = L-1:             out = z_{L-1}
 *     loss:                         loss scalar, copied back with cudaMemcpyAsync;
 *                                   dz = d loss/d out; free out, y
 *     backward, l = L-1 .. 0:       dW_l, db_l (weight gradients, PyTorch's .grad);
 *                                   l > 0: dh = dz W_l^T, free dz, dz = relu'(dh, h_l),
 *                                          free dh, free h_l (its last use)
 *                                   l = 0: free dz, free x (= h_0)
 *     optimizer:                    SGD on every W_l and b_l; then cudaStreamSynchronize and the
 *                                   loss is read; then the gradients are freed
 *                                   (zero_grad(set_to_none=True), PyTorch's default) and the
 *                                   loss scalar is freed.
 *   so 6L+1 cudaMalloc, 6L+1 cudaFree and 8L-1 kernel launches per iteration.
 *   With --cache, a freed block is kept for the next malloc of its size, as PyTorch's caching
 *   allocator keeps its segments: the first iteration allocates, every later one makes no
 *   cudaMalloc or cudaFree (the counts below are those of the iteration's tensors).
 * The counts and the peak of live per-iteration bytes are computed by running the same iteration
 * code in a dry mode that only counts (sizes rounded up to 256 bytes, as the shim and real
 * cudaMalloc account them) and are cross-checked against the closed forms (A, G = one
 * activation, one layer's dW + db, each rounded; 256 = the loss scalar)
 *     peak_iteration_bytes = max((L+3)A + 256,                     loss: y, h_0..h_{L-1}, out, dz
 *                                (l+3)A + 256 + (L-l)G for 0<l<L,  backward once dh exists
 *                                2A + 256 + L G)                   backward of layer 0
 * They are printed before training so a test can compare them with a recorded trace and with
 * the shim's statistics: for --iters >= 1, nothing else living on the device,
 *     shim peak_device_bytes == persistent_bytes + peak_iteration_bytes
 *                            == expected_peak_device_bytes.
 * Pinned host memory (x, y staging and the loss) is counted by the shim separately, as
 * peak_pinned_bytes == pinned_bytes.
 *
 * Kernels are host functions with the cuda-shim signature void k(void **args), registered once
 * with cudaShimRegisterKernel and launched with cudaLaunchKernel on one stream made with
 * cudaStreamCreate. Everything the device does is ordered on that stream, the host reads the
 * loss only after cudaStreamSynchronize, and every kernel is sequential C with a fixed
 * summation order, so the output is bit-identical from run to run whatever the stream timing
 * (CUDA_SHIM_JITTER_US / CUDA_SHIM_SEED).
 *
 * Output (one "key value..." per line): a config line; persistent_bytes, persistent_allocations,
 * activation_bytes, peak_iteration_bytes, expected_peak_device_bytes, pinned_bytes,
 * mallocs_per_iteration, frees_per_iteration, launches_per_iteration, memcpys_per_iteration;
 * "iter K loss X" for K = 0..iters-1 (X with %.9g: the float exactly); "checksum 0x..." (FNV-1a
 * of the bits of every final weight and bias) and "weight_sum S"; finally shim_* lines with
 * the shim's own counters (these describe the platform, not the training: they differ when an
 * allocator such as itermem sits in between, so compare results on the lines above them).
 *
 * Options for itermem's swap-mode tests and benchmarks (none of them changes the output above
 * when absent):
 * - --gflops X: every kernel also takes its floating-point work / X GFLOP/s on the device (a
 *   simulated duration registered with the kernel, see flops_of), so compute and copies overlap
 *   as on a real GPU over PCIe. Durations are fixed per kernel at the regular batch size.
 * - --extra-read ITER: in iteration ITER, after the loss, one more kernel (sum) reads h_1 (x with
 *   one layer), which every other iteration uses only late in the backward pass; its sum is
 *   copied back and printed as "extra_read ITER S" (%.9g): a read of a tensor moved elsewhere
 *   and not brought back shows as another value. Adds a malloc, a launch, a copy and a free to
 *   that iteration.
 * - --two-streams: the launches and copies alternate between two streams, each made to wait
 *   (cudaStreamWaitEvent) for the call before it: every tensor is used on both streams, with
 *   the one-stream order, so the results are those of one stream.
 * - --batch-change ITER:B: iteration ITER trains on a batch of B rows (1 <= B <= --batch) instead
 *   of --batch: an iteration of another shape (other allocation sizes). The figures printed
 *   before training describe the regular batch.
 * - --adam: Adam (beta1 0.9, beta2 0.999, eps 1e-8, bias-corrected) instead of SGD, with its
 *   first and second moments m, v (zeroed with cudaMemset) as two more persistent tensors per
 *   weight and per bias: the persistent state is three times the parameters, used once per
 *   iteration by the optimizer step, as in real training. The config line then ends with
 *   "optimizer adam" and persistent_bytes / persistent_allocations include the moments.
 *
 * Build: tools/build-programs (cc -O2 ... -I cuda-shim/include -L target/shim/lib -lcudart -lm);
 * run: tools/with-shim target/programs/mlp_train [options]. Plain C99.
 */
#include <cuda_runtime.h>
#include <cuda_shim.h>

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                        \
    do {                                                                                   \
        cudaError_t check_err_ = (call);                                                   \
        if (check_err_ != cudaSuccess) {                                                   \
            fprintf(stderr, "mlp_train: %s:%d: %s failed: %s (%s)\n", __FILE__, __LINE__,  \
                    #call, cudaGetErrorName(check_err_), cudaGetErrorString(check_err_));  \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

/* Granularity of the device allocator's accounting (cudaMalloc alignment on the shim). */
#define GRANULE 256u

/* ------------------------------------------------------------------------------------------ */
/* Kernels. args[i] points to parameter i. Matrices are row-major floats.                     */
/* ------------------------------------------------------------------------------------------ */

#define ARG(type, i) (*(type *)args[i])

/* c[0..n) += a * b[0..n), unrolled by 8 so the compiler can use vector instructions at -O2;
 * every element is computed independently, so the result does not depend on the unrolling. */
static void axpy(float *restrict c, float a, const float *restrict b, int n)
{
    int j = 0;
    for (; j + 8 <= n; j += 8) {
        c[j + 0] += a * b[j + 0];
        c[j + 1] += a * b[j + 1];
        c[j + 2] += a * b[j + 2];
        c[j + 3] += a * b[j + 3];
        c[j + 4] += a * b[j + 4];
        c[j + 5] += a * b[j + 5];
        c[j + 6] += a * b[j + 6];
        c[j + 7] += a * b[j + 7];
    }
    for (; j < n; j++)
        c[j] += a * b[j];
}

/* Dot product with four interleaved partial sums combined in a fixed order (deterministic). */
static float dot(const float *restrict a, const float *restrict b, int n)
{
    float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
    int j = 0;
    for (; j + 4 <= n; j += 4) {
        s0 += a[j + 0] * b[j + 0];
        s1 += a[j + 1] * b[j + 1];
        s2 += a[j + 2] * b[j + 2];
        s3 += a[j + 3] * b[j + 3];
    }
    for (; j < n; j++)
        s0 += a[j] * b[j];
    return (s0 + s1) + (s2 + s3);
}

/* linear_fwd(x[rows][in], w[in][out], b[out], z[rows][out], rows, in, out): z = x w + b.
 * Zero inputs (half of a ReLU output) are skipped: adding 0 * w would change nothing but the
 * sign of a zero. */
static void k_linear_fwd(void **args)
{
    const float *x = ARG(const float *, 0), *w = ARG(const float *, 1);
    const float *b = ARG(const float *, 2);
    float *z = ARG(float *, 3);
    int rows = ARG(int, 4), in = ARG(int, 5), out = ARG(int, 6);
    for (int r = 0; r < rows; r++) {
        float *zr = z + (size_t)r * out;
        const float *xr = x + (size_t)r * in;
        memcpy(zr, b, (size_t)out * sizeof(float));
        for (int i = 0; i < in; i++)
            if (xr[i] != 0.0f)
                axpy(zr, xr[i], w + (size_t)i * out, out);
    }
}

/* relu_fwd(z, h, n): h = max(z, 0). */
static void k_relu_fwd(void **args)
{
    const float *z = ARG(const float *, 0);
    float *h = ARG(float *, 1);
    int n = ARG(int, 2);
    for (int i = 0; i < n; i++)
        h[i] = z[i] > 0.0f ? z[i] : 0.0f;
}

/* mse_loss_fwd(out, y, loss, n): *loss = mean((out - y)^2), summed in double, in order. */
static void k_mse_fwd(void **args)
{
    const float *out = ARG(const float *, 0), *y = ARG(const float *, 1);
    float *loss = ARG(float *, 2);
    int n = ARG(int, 3);
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        double d = (double)out[i] - (double)y[i];
        sum += d * d;
    }
    *loss = (float)(sum / n);
}

/* mse_loss_bwd(out, y, dout, n): dout = 2 (out - y) / n. */
static void k_mse_bwd(void **args)
{
    const float *out = ARG(const float *, 0), *y = ARG(const float *, 1);
    float *dout = ARG(float *, 2);
    int n = ARG(int, 3);
    float scale = 2.0f / (float)n;
    for (int i = 0; i < n; i++)
        dout[i] = scale * (out[i] - y[i]);
}

/* weight_grad(x[rows][in], dz[rows][out], dw[in][out], rows, in, out): dw = x^T dz. */
static void k_weight_grad(void **args)
{
    const float *x = ARG(const float *, 0), *dz = ARG(const float *, 1);
    float *dw = ARG(float *, 2);
    int rows = ARG(int, 3), in = ARG(int, 4), out = ARG(int, 5);
    memset(dw, 0, (size_t)in * out * sizeof(float));
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * in, *dzr = dz + (size_t)r * out;
        for (int i = 0; i < in; i++)
            if (xr[i] != 0.0f)
                axpy(dw + (size_t)i * out, xr[i], dzr, out);
    }
}

/* bias_grad(dz[rows][out], db[out], rows, out): db = sum over rows of dz. */
static void k_bias_grad(void **args)
{
    const float *dz = ARG(const float *, 0);
    float *db = ARG(float *, 1);
    int rows = ARG(int, 2), out = ARG(int, 3);
    memset(db, 0, (size_t)out * sizeof(float));
    for (int r = 0; r < rows; r++)
        axpy(db, 1.0f, dz + (size_t)r * out, out);
}

/* input_grad(dz[rows][out], w[in][out], dx[rows][in], rows, in, out): dx = dz w^T. */
static void k_input_grad(void **args)
{
    const float *dz = ARG(const float *, 0), *w = ARG(const float *, 1);
    float *dx = ARG(float *, 2);
    int rows = ARG(int, 3), in = ARG(int, 4), out = ARG(int, 5);
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < in; i++)
            dx[(size_t)r * in + i] = dot(dz + (size_t)r * out, w + (size_t)i * out, out);
}

/* relu_bwd(dh, h, dz, n): dz = h > 0 ? dh : 0, with h the ReLU's saved output. */
static void k_relu_bwd(void **args)
{
    const float *dh = ARG(const float *, 0), *h = ARG(const float *, 1);
    float *dz = ARG(float *, 2);
    int n = ARG(int, 3);
    for (int i = 0; i < n; i++)
        dz[i] = h[i] > 0.0f ? dh[i] : 0.0f;
}

/* sgd_update(p, g, lr, n): p -= lr g. */
static void k_sgd(void **args)
{
    float *p = ARG(float *, 0);
    const float *g = ARG(const float *, 1);
    float lr = ARG(float, 2);
    int n = ARG(int, 3);
    for (int i = 0; i < n; i++)
        p[i] -= lr * g[i];
}

/* adam_update(p, g, m, v, lr, step, n): Adam with beta1 0.9, beta2 0.999, eps 1e-8 and bias
 * correction for step `step` (1-based); every operation in float, in order, so the result is
 * a pure function of the inputs. */
static void k_adam(void **args)
{
    float *p = ARG(float *, 0);
    const float *g = ARG(const float *, 1);
    float *m = ARG(float *, 2), *v = ARG(float *, 3);
    float lr = ARG(float, 4);
    int step = ARG(int, 5), n = ARG(int, 6);
    const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
    float c1 = 1.0f - powf(b1, (float)step), c2 = 1.0f - powf(b2, (float)step);
    for (int i = 0; i < n; i++) {
        m[i] = b1 * m[i] + (1.0f - b1) * g[i];
        v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
        p[i] -= lr * (m[i] / c1) / (sqrtf(v[i] / c2) + eps);
    }
}

/* sum(x, out, n): *out = sum of x, in double, in order (the --extra-read probe). */
static void k_sum(void **args)
{
    const float *x = ARG(const float *, 0);
    float *out = ARG(float *, 1);
    int n = ARG(int, 2);
    double sum = 0.0;
    for (int i = 0; i < n; i++)
        sum += x[i];
    *out = (float)sum;
}

/* Floating-point operations of one launch of each kernel (all layers have the same shape),
 * for --gflops: a matmul of B x W by W x W is 2 B W^2; elementwise kernels count their
 * arithmetic per element (mse: subtract, square or scale, add: 3); sgd counts the weight
 * update (2 W^2), which overstates the bias update's 2 W. */
struct kernel_flops {
    double linear, relu, mse, matmul, bias, sum, sgd, adam;
};

static struct kernel_flops flops_of(int batch, int width)
{
    double B = batch, W = width;
    struct kernel_flops f = {2 * B * W * W + B * W, B * W, 3 * B * W, 2 * B * W * W, B * W,
                             B * W, 2 * W * W, 12 * W * W};
    return f;
}

/* Simulated duration of `flops` at `gflops` GFLOP/s, in ns (0 = none). */
static unsigned long long duration_ns(double flops, double gflops)
{
    return gflops > 0.0 ? (unsigned long long)(flops / gflops) : 0;
}

static void register_kernels(int batch, int width, double gflops)
{
    const struct kernel_flops f = flops_of(batch, width);
    const size_t P = sizeof(void *), I = sizeof(int), F = sizeof(float);
    const size_t linear[] = {P, P, P, P, I, I, I};
    const size_t unary[] = {P, P, I};
    const size_t binary[] = {P, P, P, I};
    const size_t matmul[] = {P, P, P, I, I, I};
    const size_t bias[] = {P, P, I, I};
    const size_t sgd[] = {P, P, F, I};
    const size_t adam[] = {P, P, P, P, F, I, I};
    const double g = gflops;
    CHECK(cudaShimRegisterKernel(k_linear_fwd, "linear_fwd", 7, linear, duration_ns(f.linear, g)));
    CHECK(cudaShimRegisterKernel(k_relu_fwd, "relu_fwd", 3, unary, duration_ns(f.relu, g)));
    CHECK(cudaShimRegisterKernel(k_mse_fwd, "mse_loss_fwd", 4, binary, duration_ns(f.mse, g)));
    CHECK(cudaShimRegisterKernel(k_mse_bwd, "mse_loss_bwd", 4, binary, duration_ns(f.mse, g)));
    CHECK(cudaShimRegisterKernel(k_weight_grad, "weight_grad", 6, matmul,
                                 duration_ns(f.matmul, g)));
    CHECK(cudaShimRegisterKernel(k_bias_grad, "bias_grad", 4, bias, duration_ns(f.bias, g)));
    CHECK(cudaShimRegisterKernel(k_input_grad, "input_grad", 6, matmul,
                                 duration_ns(f.matmul, g)));
    CHECK(cudaShimRegisterKernel(k_relu_bwd, "relu_bwd", 4, binary, duration_ns(f.relu, g)));
    CHECK(cudaShimRegisterKernel(k_sgd, "sgd_update", 4, sgd, duration_ns(f.sgd, g)));
    CHECK(cudaShimRegisterKernel(k_sum, "sum", 3, unary, duration_ns(f.sum, g)));
    CHECK(cudaShimRegisterKernel(k_adam, "adam_update", 7, adam, duration_ns(f.adam, g)));
}

/* ------------------------------------------------------------------------------------------ */
/* Host side                                                                                   */
/* ------------------------------------------------------------------------------------------ */

struct options {
    int width, batch, iters, layers;
    unsigned long long seed;
    float lr;
    double gflops;         /* simulated kernel rate (0: kernels take their host time only) */
    int extra_read;        /* iteration with the unplanned read of h_1 (-1: none) */
    int change_iter;       /* iteration run with batch change_batch (-1: none) */
    int change_batch;
    int two_streams;       /* calls alternate between two streams */
    int adam;              /* Adam instead of SGD */
    int cache;             /* freed blocks are kept for the next malloc of their size */
    int device;            /* the device it trains on */
};

/* Either drives the device (dry == 0) or only counts what it would do (dry == 1). */
struct run {
    int dry;
    cudaStream_t stream;
    /* --two-streams: calls alternate between stream and other, each waiting for the one
     * before it (event `done`), so the order, and the results, are the one-stream ones. */
    cudaStream_t other;
    cudaEvent_t done;
    int on_other;
    unsigned long long live, peak; /* per-iteration device bytes, GRANULE-rounded */
    /* --cache: blocks freed by the iteration, kept for the next malloc of the same size, as a
     * framework's caching allocator keeps its segments: from the second iteration on, an
     * iteration makes no cudaMalloc or cudaFree at all. Of the blocks of a size, the one at the
     * lowest address is reused first (PyTorch's order), so every iteration gets the same. */
    int cache;
    struct cached { size_t bytes; void *p; } *cached;
    int n_cached, cached_cap;
    unsigned long long mallocs, frees, launches, memcpys;
};

struct net {
    int width, batch, layers;
    float lr;
    float **w, **b;   /* device, persistent */
    float **mw, **vw, **mb, **vb; /* device, persistent: Adam's moments (NULL with SGD) */
    int step;         /* Adam's step, 1-based */
    float *x_h, *y_h; /* pinned: the batch being copied */
    float *loss_h;    /* pinned: the loss copied back */
    float *probe_h;   /* pinned: the --extra-read sum (NULL: no extra read this iteration) */
};

static unsigned long long granules(size_t bytes)
{
    return ((unsigned long long)bytes + GRANULE - 1) / GRANULE * GRANULE;
}

static float *dev_alloc(struct run *r, size_t bytes)
{
    void *p = NULL;
    r->mallocs++;
    r->live += granules(bytes);
    if (r->live > r->peak)
        r->peak = r->live;
    if (r->dry)
        return NULL;
    int best = -1;
    for (int i = 0; r->cache && i < r->n_cached; i++)
        if (r->cached[i].bytes == bytes && (best < 0 || r->cached[i].p < r->cached[best].p))
            best = i;
    if (best >= 0) {
        p = r->cached[best].p;
        r->cached[best] = r->cached[--r->n_cached];
        return p;
    }
    CHECK(cudaMalloc(&p, bytes));
    return p;
}

static void dev_free(struct run *r, float *p, size_t bytes)
{
    r->frees++;
    r->live -= granules(bytes);
    if (r->dry)
        return;
    if (!r->cache) {
        CHECK(cudaFree(p));
        return;
    }
    if (r->n_cached == r->cached_cap) {
        r->cached_cap = r->cached_cap ? 2 * r->cached_cap : 64;
        r->cached = realloc(r->cached, (size_t)r->cached_cap * sizeof *r->cached);
        if (r->cached == NULL) {
            fprintf(stderr, "mlp_train: out of host memory\n");
            exit(1);
        }
    }
    r->cached[r->n_cached].bytes = bytes;
    r->cached[r->n_cached++].p = p;
}

/* The stream of the next call: the one stream, or (--two-streams) the next of the two, made
 * to wait for the call before. */
static cudaStream_t next_stream(struct run *r)
{
    if (r->other == NULL)
        return r->stream;
    cudaStream_t s = r->on_other ? r->other : r->stream;
    CHECK(cudaStreamWaitEvent(s, r->done, 0));
    return s;
}

/* After a call on `s` (--two-streams): the next one waits for it. */
static void call_done(struct run *r, cudaStream_t s)
{
    if (r->other == NULL)
        return;
    CHECK(cudaEventRecord(r->done, s));
    r->on_other = !r->on_other;
}

static void launch(struct run *r, cudaShimKernelFn kernel, unsigned long long work, void **args)
{
    dim3 block = {256, 1, 1};
    dim3 grid = {(unsigned int)((work + 255) / 256), 1, 1};
    r->launches++;
    if (!r->dry) {
        cudaStream_t s = next_stream(r);
        CHECK(cudaLaunchKernel((const void *)kernel, grid, block, args, 0, s));
        call_done(r, s);
    }
}

static void copy_async(struct run *r, void *dst, const void *src, size_t bytes,
                       enum cudaMemcpyKind kind)
{
    r->memcpys++;
    if (!r->dry) {
        cudaStream_t s = next_stream(r);
        CHECK(cudaMemcpyAsync(dst, src, bytes, kind, s));
        call_done(r, s);
    }
}

/* One training iteration; the batch is already in net->x_h / net->y_h. Returns the loss
 * (0 in dry mode). */
static float iteration(struct run *r, const struct net *net)
{
    const int L = net->layers, W = net->width, B = net->batch;
    const int n = B * W, ww = W * W;
    const size_t act = (size_t)n * sizeof(float);
    const size_t wbytes = (size_t)ww * sizeof(float), bbytes = (size_t)W * sizeof(float);
    float lr = net->lr;
    float *h[L], *dw[L], *db[L];

    float *x = dev_alloc(r, act);
    float *y = dev_alloc(r, act);
    copy_async(r, x, net->x_h, act, cudaMemcpyHostToDevice);
    copy_async(r, y, net->y_h, act, cudaMemcpyHostToDevice);

    /* forward */
    h[0] = x;
    float *out = NULL;
    for (int l = 0; l < L; l++) {
        float *z = dev_alloc(r, act);
        void *a_lin[] = {&h[l], &net->w[l], &net->b[l], &z, (void *)&B, (void *)&W, (void *)&W};
        launch(r, k_linear_fwd, (unsigned long long)n, a_lin);
        if (l == L - 1) {
            out = z;
            break;
        }
        h[l + 1] = dev_alloc(r, act);
        void *a_relu[] = {&z, &h[l + 1], (void *)&n};
        launch(r, k_relu_fwd, (unsigned long long)n, a_relu);
        dev_free(r, z, act);
    }

    /* loss */
    float *loss = dev_alloc(r, sizeof(float));
    void *a_loss[] = {&out, &y, &loss, (void *)&n};
    launch(r, k_mse_fwd, 1, a_loss);
    copy_async(r, net->loss_h, loss, sizeof(float), cudaMemcpyDeviceToHost);
    float *dz = dev_alloc(r, act);
    void *a_dloss[] = {&out, &y, &dz, (void *)&n};
    launch(r, k_mse_bwd, (unsigned long long)n, a_dloss);
    dev_free(r, out, act);
    dev_free(r, y, act);

    /* --extra-read: a call no other iteration makes reads h_1 (x when there is one layer),
     * which is otherwise used again only late in the backward pass. */
    if (net->probe_h != NULL) {
        float *probe = dev_alloc(r, sizeof(float));
        float *read = h[L > 1 ? 1 : 0];
        void *a_sum[] = {&read, &probe, (void *)&n};
        launch(r, k_sum, (unsigned long long)n, a_sum);
        copy_async(r, net->probe_h, probe, sizeof(float), cudaMemcpyDeviceToHost);
        dev_free(r, probe, sizeof(float));
    }

    /* backward */
    for (int l = L - 1; l >= 0; l--) {
        dw[l] = dev_alloc(r, wbytes);
        void *a_dw[] = {&h[l], &dz, &dw[l], (void *)&B, (void *)&W, (void *)&W};
        launch(r, k_weight_grad, (unsigned long long)ww, a_dw);
        db[l] = dev_alloc(r, bbytes);
        void *a_db[] = {&dz, &db[l], (void *)&B, (void *)&W};
        launch(r, k_bias_grad, (unsigned long long)W, a_db);
        if (l == 0) {
            dev_free(r, dz, act);
            dev_free(r, h[0], act);
            break;
        }
        float *dh = dev_alloc(r, act);
        void *a_dx[] = {&dz, &net->w[l], &dh, (void *)&B, (void *)&W, (void *)&W};
        launch(r, k_input_grad, (unsigned long long)n, a_dx);
        dev_free(r, dz, act);
        dz = dev_alloc(r, act);
        void *a_relu[] = {&dh, &h[l], &dz, (void *)&n};
        launch(r, k_relu_bwd, (unsigned long long)n, a_relu);
        dev_free(r, dh, act);
        dev_free(r, h[l], act);
    }

    /* optimizer step */
    for (int l = 0; l < L; l++) {
        if (net->mw != NULL) {
            int step = net->step;
            void *a_w[] = {&net->w[l], &dw[l], &net->mw[l], &net->vw[l], &lr, &step, (void *)&ww};
            launch(r, k_adam, (unsigned long long)ww, a_w);
            void *a_b[] = {&net->b[l], &db[l], &net->mb[l], &net->vb[l], &lr, &step, (void *)&W};
            launch(r, k_adam, (unsigned long long)W, a_b);
            continue;
        }
        void *a_w[] = {&net->w[l], &dw[l], &lr, (void *)&ww};
        launch(r, k_sgd, (unsigned long long)ww, a_w);
        void *a_b[] = {&net->b[l], &db[l], &lr, (void *)&W};
        launch(r, k_sgd, (unsigned long long)W, a_b);
    }

    /* loss.item(): the only point where the host waits for the device */
    float result = 0.0f;
    if (!r->dry) {
        CHECK(cudaStreamSynchronize(r->stream));
        if (r->other != NULL)
            CHECK(cudaStreamSynchronize(r->other));
        result = *net->loss_h;
    }

    /* zero_grad(set_to_none=True) */
    for (int l = 0; l < L; l++) {
        dev_free(r, dw[l], wbytes);
        dev_free(r, db[l], bbytes);
    }
    dev_free(r, loss, sizeof(float));
    return result;
}

/* The same quantities in closed form (see the comment at the top), to check the dry run. */
static void closed_form(const struct options *o, unsigned long long *peak,
                        unsigned long long *mallocs, unsigned long long *launches)
{
    unsigned long long L = (unsigned long long)o->layers;
    unsigned long long A = granules((size_t)o->batch * o->width * sizeof(float));
    unsigned long long G = granules((size_t)o->width * o->width * sizeof(float)) +
                           granules((size_t)o->width * sizeof(float));
    unsigned long long S = granules(sizeof(float));
    /* loss phase: y, h_0..h_{L-1}, out, loss, dz */
    unsigned long long p = (L + 3) * A + S;
    /* backward at layer l > 0, once dh exists: h_0..h_l, dz, dh, loss, grads of layers l..L-1 */
    for (unsigned long long l = 1; l < L; l++) {
        unsigned long long q = (l + 3) * A + S + (L - l) * G;
        if (q > p)
            p = q;
    }
    /* backward at layer 0: h_0, dz, loss, all grads */
    if (2 * A + S + L * G > p)
        p = 2 * A + S + L * G;
    *peak = p;
    *mallocs = 6 * L + 1;
    *launches = 8 * L - 1;
}

/* splitmix64: the data and initial weights are a pure function of the seed. */
static unsigned long long rng_next(unsigned long long *state)
{
    unsigned long long z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [-1, 1), exactly representable (24 random bits). */
static float rng_uniform(unsigned long long *state)
{
    return (float)(rng_next(state) >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

/* Next batch: x uniform in [0, 1), y = x T (T is W x W). */
static void make_batch(unsigned long long *state, const float *teacher, float *x, float *y,
                       int batch, int width)
{
    for (size_t i = 0; i < (size_t)batch * width; i++)
        x[i] = 0.5f * (rng_uniform(state) + 1.0f);
    for (int r = 0; r < batch; r++) {
        float *yr = y + (size_t)r * width;
        memset(yr, 0, (size_t)width * sizeof(float));
        for (int i = 0; i < width; i++)
            axpy(yr, x[(size_t)r * width + i], teacher + (size_t)i * width, width);
    }
}

static void usage(FILE *to)
{
    fprintf(to, "usage: mlp_train [--width N] [--batch N] [--iters N] [--layers N] [--seed N] "
                "[--lr X] [--gflops X] [--extra-read ITER] [--batch-change ITER:B]\n"
                "       [--two-streams] [--adam] [--cache] [--device N]\n"
                "defaults: --width 128 --batch 2048 --iters 10 --layers 6 --seed 1 --lr 0.1\n"
                "          --device 0\n"
                "  --gflops X            kernels also take their FLOPs / X GFLOP/s on the device\n"
                "  --extra-read ITER     iteration ITER reads h_1 once more, after the loss, and\n"
                "                        prints extra_read ITER SUM\n"
                "  --batch-change ITER:B iteration ITER uses batch B (1 <= B <= --batch)\n"
                "  --two-streams         calls alternate between two streams, ordered by events\n"
                "  --adam                Adam (moments m, v persistent on the device) instead of SGD\n"
                "  --cache               keep freed blocks for the next malloc of their size (a\n"
                "                        caching allocator: iterations after the first allocate nothing)\n");
}

static int parse_int(const char *flag, const char *text, long min, long max)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v < min || v > max) {
        fprintf(stderr, "mlp_train: %s expects a whole number in [%ld, %ld], got '%s'\n", flag,
                min, max, text);
        exit(2);
    }
    return (int)v;
}

static void parse_args(int argc, char **argv, struct options *o)
{
    o->width = 128;
    o->batch = 2048;
    o->iters = 10;
    o->layers = 6;
    o->seed = 1;
    o->lr = 0.1f;
    o->gflops = 0.0;
    o->extra_read = -1;
    o->change_iter = -1;
    o->change_batch = 0;
    o->two_streams = 0;
    o->adam = 0;
    o->cache = 0;
    o->device = 0;
    for (int i = 1; i < argc; i++) {
        const char *flag = argv[i];
        if (strcmp(flag, "--help") == 0 || strcmp(flag, "-h") == 0) {
            usage(stdout);
            exit(0);
        }
        if (strcmp(flag, "--two-streams") == 0) {
            o->two_streams = 1;
            continue;
        }
        if (strcmp(flag, "--adam") == 0) {
            o->adam = 1;
            continue;
        }
        if (strcmp(flag, "--cache") == 0) {
            o->cache = 1;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "mlp_train: unknown option or missing value: '%s'\n", flag);
            usage(stderr);
            exit(2);
        }
        const char *value = argv[++i];
        if (strcmp(flag, "--width") == 0) {
            o->width = parse_int(flag, value, 1, 8192);
        } else if (strcmp(flag, "--batch") == 0) {
            o->batch = parse_int(flag, value, 1, 1 << 20);
        } else if (strcmp(flag, "--iters") == 0) {
            o->iters = parse_int(flag, value, 0, 1000000);
        } else if (strcmp(flag, "--layers") == 0) {
            o->layers = parse_int(flag, value, 1, 1000);
        } else if (strcmp(flag, "--seed") == 0) {
            char *end;
            errno = 0;
            o->seed = strtoull(value, &end, 10);
            if (errno != 0 || end == value || *end != '\0' || value[0] == '-') {
                fprintf(stderr, "mlp_train: --seed expects a whole number, got '%s'\n", value);
                exit(2);
            }
        } else if (strcmp(flag, "--lr") == 0) {
            char *end;
            errno = 0;
            double v = strtod(value, &end);
            if (errno != 0 || end == value || *end != '\0' || !(v > 0.0) || v > 1e6) {
                fprintf(stderr, "mlp_train: --lr expects a positive number, got '%s'\n", value);
                exit(2);
            }
            o->lr = (float)v;
        } else if (strcmp(flag, "--gflops") == 0) {
            char *end;
            errno = 0;
            double v = strtod(value, &end);
            if (errno != 0 || end == value || *end != '\0' || !(v > 0.0) || v > 1e9) {
                fprintf(stderr, "mlp_train: --gflops expects a positive number, got '%s'\n",
                        value);
                exit(2);
            }
            o->gflops = v;
        } else if (strcmp(flag, "--extra-read") == 0) {
            o->extra_read = parse_int(flag, value, 0, 1000000);
        } else if (strcmp(flag, "--device") == 0) {
            o->device = parse_int(flag, value, 0, 1023);
        } else if (strcmp(flag, "--batch-change") == 0) {
            char *end;
            errno = 0;
            long it = strtol(value, &end, 10);
            long b = -1;
            if (errno == 0 && end != value && *end == ':' && it >= 0 && it <= 1000000) {
                const char *rest = end + 1;
                b = strtol(rest, &end, 10);
                if (errno != 0 || end == rest || *end != '\0')
                    b = -1;
            }
            if (b < 1 || b > (1 << 20)) {
                fprintf(stderr,
                        "mlp_train: --batch-change expects ITER:B (whole numbers, B >= 1), "
                        "got '%s'\n",
                        value);
                exit(2);
            }
            o->change_iter = (int)it;
            o->change_batch = (int)b;
        } else {
            fprintf(stderr, "mlp_train: unknown option '%s'\n", flag);
            usage(stderr);
            exit(2);
        }
    }
    if (o->change_iter >= 0 && o->change_batch > o->batch) {
        fprintf(stderr, "mlp_train: --batch-change batch %d is larger than --batch %d\n",
                o->change_batch, o->batch);
        exit(2);
    }
    if ((long long)o->batch * o->width > INT_MAX / 2) {
        fprintf(stderr, "mlp_train: --batch x --width must stay below %d elements\n",
                INT_MAX / 2);
        exit(2);
    }
}

int main(int argc, char **argv)
{
    struct options o;
    parse_args(argc, argv, &o);
    const int L = o.layers, W = o.width, B = o.batch;
    const size_t act = (size_t)B * W * sizeof(float);
    const size_t wbytes = (size_t)W * W * sizeof(float), bbytes = (size_t)W * sizeof(float);

    /* The memory arithmetic, from a dry run of the iteration. */
    struct net net;
    memset(&net, 0, sizeof net);
    net.width = W;
    net.batch = B;
    net.layers = L;
    net.lr = o.lr;
    float *no_w[L], *no_b[L];
    memset(no_w, 0, sizeof no_w);
    memset(no_b, 0, sizeof no_b);
    net.w = no_w;
    net.b = no_b;
    struct run dry;
    memset(&dry, 0, sizeof dry);
    dry.dry = 1;
    iteration(&dry, &net);
    unsigned long long peak, mallocs, launches;
    closed_form(&o, &peak, &mallocs, &launches);
    if (dry.live != 0 || dry.peak != peak || dry.mallocs != mallocs || dry.frees != mallocs ||
        dry.launches != launches) {
        fprintf(stderr,
                "mlp_train: internal error: the iteration (peak %llu, %llu mallocs, %llu frees, "
                "%llu launches, %llu left live) disagrees with the closed form (peak %llu, "
                "%llu mallocs, %llu launches)\n",
                dry.peak, dry.mallocs, dry.frees, dry.launches, dry.live, peak, mallocs, launches);
        return 1;
    }
    /* Adam keeps two moments per parameter tensor: three times the parameters in all. */
    const int copies = o.adam ? 3 : 1;
    unsigned long long persistent =
        (unsigned long long)copies * L * (granules(wbytes) + granules(bbytes));
    unsigned long long pinned = 2ull * act + sizeof(float);

    printf("config layers %d width %d batch %d iters %d seed %llu lr %.9g%s\n", L, W, B, o.iters,
           o.seed, (double)o.lr, o.adam ? " optimizer adam" : "");
    printf("persistent_bytes %llu\n", persistent);
    printf("persistent_allocations %d\n", 2 * copies * L);
    printf("activation_bytes %llu\n", granules(act));
    printf("peak_iteration_bytes %llu\n", dry.peak);
    printf("expected_peak_device_bytes %llu\n", persistent + dry.peak);
    printf("pinned_bytes %llu\n", pinned);
    printf("mallocs_per_iteration %llu\n", dry.mallocs);
    printf("frees_per_iteration %llu\n", dry.frees);
    printf("launches_per_iteration %llu\n", dry.launches);
    printf("memcpys_per_iteration %llu\n", dry.memcpys);
    fflush(stdout);

    /* Set-up: device, kernels, stream, pinned staging, persistent weights. */
    CHECK(cudaSetDevice(o.device));
    register_kernels(B, W, o.gflops);
    struct run run;
    memset(&run, 0, sizeof run);
    run.cache = o.cache;
    CHECK(cudaStreamCreate(&run.stream));
    if (o.two_streams) {
        CHECK(cudaStreamCreate(&run.other));
        CHECK(cudaEventCreateWithFlags(&run.done, cudaEventDisableTiming));
    }
    CHECK(cudaMallocHost((void **)&net.x_h, act));
    CHECK(cudaMallocHost((void **)&net.y_h, act));
    CHECK(cudaMallocHost((void **)&net.loss_h, sizeof(float)));
    float *probe_h = NULL;
    if (o.extra_read >= 0)
        CHECK(cudaMallocHost((void **)&probe_h, sizeof(float)));

    unsigned long long state = o.seed;
    float *host = malloc(wbytes > act ? wbytes : act);
    float *teacher = malloc(wbytes);
    if (host == NULL || teacher == NULL) {
        fprintf(stderr, "mlp_train: out of host memory\n");
        return 1;
    }
    /* teacher entries uniform(-a, a) with a = 3/sqrt(W): E[y^2] = 1 for x ~ U(0, 1) */
    float teacher_scale = 3.0f / sqrtf((float)W);
    for (size_t i = 0; i < (size_t)W * W; i++)
        teacher[i] = teacher_scale * rng_uniform(&state);
    float *w[L], *b[L];
    net.w = w;
    net.b = b;
    for (int l = 0; l < L; l++) {
        /* hidden layers: identity + 0.1 He-uniform noise; last layer: uniform with variance 1/W */
        for (size_t i = 0; i < (size_t)W * W; i++) {
            if (l < L - 1)
                host[i] = (i / W == i % W ? 1.0f : 0.0f) +
                          0.1f * sqrtf(6.0f / (float)W) * rng_uniform(&state);
            else
                host[i] = sqrtf(3.0f / (float)W) * rng_uniform(&state);
        }
        CHECK(cudaMalloc((void **)&w[l], wbytes));
        CHECK(cudaMemcpy(w[l], host, wbytes, cudaMemcpyHostToDevice));
        for (int i = 0; i < W; i++)
            host[i] = 0.01f * rng_uniform(&state);
        CHECK(cudaMalloc((void **)&b[l], bbytes));
        CHECK(cudaMemcpy(b[l], host, bbytes, cudaMemcpyHostToDevice));
    }
    float *mw[L], *vw[L], *mb[L], *vb[L];
    if (o.adam) {
        net.mw = mw;
        net.vw = vw;
        net.mb = mb;
        net.vb = vb;
        for (int l = 0; l < L; l++) {
            float **moments[4] = {&mw[l], &vw[l], &mb[l], &vb[l]};
            for (int k = 0; k < 4; k++) {
                size_t bytes = k < 2 ? wbytes : bbytes;
                CHECK(cudaMalloc((void **)moments[k], bytes));
                CHECK(cudaMemset(*moments[k], 0, bytes));
            }
        }
    }

    /* Training. The previous iteration ended with a stream synchronisation, so the pinned
     * staging buffers are free to be refilled. */
    for (int it = 0; it < o.iters; it++) {
        net.batch = it == o.change_iter ? o.change_batch : B;
        net.probe_h = it == o.extra_read ? probe_h : NULL;
        make_batch(&state, teacher, net.x_h, net.y_h, net.batch, W);
        net.step = it + 1;
        float loss = iteration(&run, &net);
        printf("iter %d loss %.9g\n", it, (double)loss);
        if (net.probe_h != NULL)
            printf("extra_read %d %.9g\n", it, (double)*probe_h);
        fflush(stdout);
    }

    /* Final weights: bits hashed (FNV-1a) and values summed in a fixed order. */
    CHECK(cudaStreamSynchronize(run.stream));
    if (run.other != NULL)
        CHECK(cudaStreamSynchronize(run.other));
    unsigned long long hash = 0xcbf29ce484222325ull;
    double sum = 0.0;
    for (int l = 0; l < L; l++) {
        for (int part = 0; part < 2; part++) {
            size_t bytes = part == 0 ? wbytes : bbytes;
            CHECK(cudaMemcpy(host, part == 0 ? w[l] : b[l], bytes, cudaMemcpyDeviceToHost));
            const unsigned char *bits = (const unsigned char *)host;
            for (size_t i = 0; i < bytes; i++) {
                hash ^= bits[i];
                hash *= 0x100000001b3ull;
            }
            for (size_t i = 0; i < bytes / sizeof(float); i++)
                sum += host[i];
        }
    }
    printf("checksum 0x%016llx\n", hash);
    printf("weight_sum %.17g\n", sum);

    for (int l = 0; l < L; l++) {
        CHECK(cudaFree(w[l]));
        CHECK(cudaFree(b[l]));
        if (o.adam) {
            CHECK(cudaFree(mw[l]));
            CHECK(cudaFree(vw[l]));
            CHECK(cudaFree(mb[l]));
            CHECK(cudaFree(vb[l]));
        }
    }
    for (int i = 0; i < run.n_cached; i++)
        CHECK(cudaFree(run.cached[i].p));
    free(run.cached);
    CHECK(cudaFreeHost(net.x_h));
    CHECK(cudaFreeHost(net.y_h));
    CHECK(cudaFreeHost(net.loss_h));
    if (probe_h != NULL)
        CHECK(cudaFreeHost(probe_h));
    CHECK(cudaStreamDestroy(run.stream));
    if (run.other != NULL) {
        CHECK(cudaStreamDestroy(run.other));
        CHECK(cudaEventDestroy(run.done));
    }
    CHECK(cudaGetLastError());
    free(host);
    free(teacher);

    struct cudaShimStats s;
    CHECK(cudaShimGetStats(&s));
    printf("shim_peak_device_bytes %llu\n", s.peak_device_bytes);
    printf("shim_current_device_bytes %llu\n", s.current_device_bytes);
    printf("shim_device_alloc_calls %llu\n", s.device_alloc_calls);
    printf("shim_device_free_calls %llu\n", s.device_free_calls);
    printf("shim_kernel_launches %llu\n", s.kernel_launches);
    printf("shim_peak_pinned_bytes %llu\n", s.peak_pinned_bytes);
    printf("shim_h2d_bytes %llu\n", s.h2d_bytes);
    printf("shim_d2h_bytes %llu\n", s.d2h_bytes);
    return 0;
}
