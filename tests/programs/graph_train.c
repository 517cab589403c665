/*
 * graph_train.c — a training loop whose steps are CUDA graphs, captured or built once and
 * launched every iteration, as frameworks run them (torch.cuda.CUDAGraph, XLA command buffers);
 * and the same loop launching the same work one call at a time.
 *
 * Usage: graph_train MODE [ITERS]   (ITERS: default 12)
 *   direct    every copy, memset and kernel launched one by one
 *   global    each layer's step captured once in cudaStreamCaptureModeGlobal
 *   relaxed   each step captured in cudaStreamCaptureModeRelaxed, with a cudaMalloc and a
 *             cudaFree of a scratch buffer during the capture (legal in that mode only)
 *   explicit  each step built node by node with the explicit graph API
 *   malloc    each step captured in global mode with its gradient buffer allocated by
 *             cudaMallocAsync at the start of the capture and freed by cudaFreeAsync at its end:
 *             graph memory nodes, allocated and freed by every launch at the address the
 *             capture fixed
 *
 * A step of layer l: upload the input (layer 0: a memcpy node), clear the gradient (a memset
 * node), forward on the main stream, the gradient on a side stream forked from it and joined
 * back (an event record and wait), the weight update; the last layer adds a host node and
 * downloads the activations (a memcpy node). The gradient's scale changes every iteration: the
 * graph modes change it in the exec graph (cudaGraphExecKernelNodeSetParams), on the node a
 * capture made (named by cudaStreamGetCaptureInfo) or the explicit API added. Every mode computes
 * the same numbers: each iteration prints the sum of the downloaded activations, the end a
 * checksum of the weights. Tensors are 2 MiB each (4 weights, 5 activations, 1 gradient), so
 * swap mode has candidates under a limit; each iteration also allocates (outside the graphs) a
 * copy of the last activations, whose tail it reads back, and frees it.
 */
#define _DEFAULT_SOURCE
#include <cuda_runtime.h>
#include <cuda_shim.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define OK(call)                                                                             \
    do {                                                                                     \
        cudaError_t err_ = (call);                                                           \
        if (err_ != cudaSuccess) {                                                           \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                    \
                    cudaGetErrorName(err_));                                                 \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

enum { L = 4, M = 512 * 1024 };
static const size_t BYTES = M * sizeof(int);
static const dim3 one = {1, 1, 1};

/* forward(const int *a, const int *w, int *b): b = (a * w + 1) % 1009 */
static void k_forward(void **args) {
    const int *a = *(const int **)args[0];
    const int *w = *(const int **)args[1];
    int *b = *(int **)args[2];
    usleep(200);
    for (int i = 0; i < M; i++) b[i] = (a[i] * w[i] + 1) % 1009;
}

/* gradient(const int *b, int *g, int scale): g += scale * (b % 7) (on the side stream) */
static void k_gradient(void **args) {
    const int *b = *(const int **)args[0];
    int *g = *(int **)args[1];
    int scale = *(int *)args[2];
    usleep(200);
    for (int i = 0; i < M; i++) g[i] += scale * (b[i] % 7);
}

/* update(int *w, const int *g): w = (w + g) % 1000 + 1 */
static void k_update(void **args) {
    int *w = *(int **)args[0];
    const int *g = *(const int **)args[1];
    for (int i = 0; i < M; i++) w[i] = (w[i] + g[i]) % 1000 + 1;
}

static void host_count(void *data) { ++*(int *)data; }

static void register_kernels(void) {
    size_t p3[] = {sizeof(void *), sizeof(void *), sizeof(void *)};
    size_t p2i[] = {sizeof(void *), sizeof(void *), sizeof(int)};
    size_t p2[] = {sizeof(void *), sizeof(void *)};
    OK(cudaShimRegisterKernel(k_forward, "forward", 3, p3, 0));
    OK(cudaShimRegisterKernel(k_gradient, "gradient", 3, p2i, 0));
    OK(cudaShimRegisterKernel(k_update, "update", 2, p2, 0));
}

struct net {
    int *w[L], *a[L + 1], *g; /* device */
    int *input, *output, *tail; /* page-locked host */
    int host_calls;
    int scale;                /* the gradient's, this iteration */
    int graph_memory;         /* the gradient buffer is allocated in each step (mode malloc) */
    int *gl[L];               /* then each step's gradient buffer (its graph's allocation) */
    cudaStream_t main, side;
    cudaEvent_t fork[L], join[L];
};

static void net_init(struct net *n) {
    for (int l = 0; l < L; l++) OK(cudaMalloc((void **)&n->w[l], BYTES));
    for (int l = 0; l <= L; l++) OK(cudaMalloc((void **)&n->a[l], BYTES));
    OK(cudaMalloc((void **)&n->g, BYTES));
    OK(cudaMallocHost((void **)&n->input, BYTES));
    OK(cudaMallocHost((void **)&n->output, BYTES));
    OK(cudaMallocHost((void **)&n->tail, 16 * sizeof(int)));
    int *w0 = malloc(BYTES);
    for (int l = 0; l < L; l++) {
        for (int i = 0; i < M; i++) w0[i] = 1 + (i * (l + 3)) % 13;
        OK(cudaMemcpy(n->w[l], w0, BYTES, cudaMemcpyHostToDevice));
    }
    free(w0);
    n->host_calls = 0;
    n->scale = 1;
    n->graph_memory = 0;
    OK(cudaStreamCreateWithFlags(&n->main, cudaStreamNonBlocking));
    OK(cudaStreamCreateWithFlags(&n->side, cudaStreamNonBlocking));
    for (int l = 0; l < L; l++) {
        OK(cudaEventCreateWithFlags(&n->fork[l], cudaEventDisableTiming));
        OK(cudaEventCreateWithFlags(&n->join[l], cudaEventDisableTiming));
    }
}

static int scale_of(int it) { return 1 + it % 3; }

/* The gradient's kernel parameters, with the scale the net holds now. */
static void *gradient_args[L][3];

static struct cudaKernelNodeParams gradient_params(struct net *n, int l) {
    gradient_args[l][0] = &n->a[l + 1];
    gradient_args[l][1] = &n->g;
    gradient_args[l][2] = &n->scale;
    struct cudaKernelNodeParams p = {(void *)k_gradient, one, one, 0, gradient_args[l], NULL};
    return p;
}

/* Layer l's step, submitted call by call (run now, or captured). `gradient` receives the
 * gradient's node when the step is captured. */
static void step(struct net *n, int l, cudaGraphNode_t *gradient) {
    if (n->graph_memory) {
        OK(cudaMallocAsync((void **)&n->g, BYTES, n->main));
        n->gl[l] = n->g;
    }
    if (l == 0) OK(cudaMemcpyAsync(n->a[0], n->input, BYTES, cudaMemcpyHostToDevice, n->main));
    OK(cudaMemsetAsync(n->g, 0, BYTES, n->main));
    void *fa[] = {&n->a[l], &n->w[l], &n->a[l + 1]};
    OK(cudaLaunchKernel((const void *)k_forward, one, one, fa, 0, n->main));
    OK(cudaEventRecord(n->fork[l], n->main));
    OK(cudaStreamWaitEvent(n->side, n->fork[l], 0));
    void *ga[] = {&n->a[l + 1], &n->g, &n->scale};
    OK(cudaLaunchKernel((const void *)k_gradient, one, one, ga, 0, n->side));
    if (gradient) {
        enum cudaStreamCaptureStatus status;
        const cudaGraphNode_t *deps = NULL;
        size_t count = 0;
        OK(cudaStreamGetCaptureInfo(n->side, &status, NULL, NULL, &deps, &count));
        if (status != cudaStreamCaptureStatusActive || count != 1) {
            fprintf(stderr, "graph_train: the side stream does not capture\n");
            exit(1);
        }
        *gradient = deps[0];
    }
    OK(cudaEventRecord(n->join[l], n->side));
    OK(cudaStreamWaitEvent(n->main, n->join[l], 0));
    void *ua[] = {&n->w[l], &n->g};
    OK(cudaLaunchKernel((const void *)k_update, one, one, ua, 0, n->main));
    if (n->graph_memory) OK(cudaFreeAsync(n->g, n->main));
    if (l == L - 1) {
        OK(cudaLaunchHostFunc(n->main, host_count, &n->host_calls));
        OK(cudaMemcpyAsync(n->output, n->a[L], BYTES, cudaMemcpyDeviceToHost, n->main));
    }
}

/* Layer l's step captured once in `mode`. */
static cudaGraph_t captured(struct net *n, int l, enum cudaStreamCaptureMode mode,
                            cudaGraphNode_t *gradient) {
    cudaGraph_t g;
    OK(cudaStreamBeginCapture(n->main, mode));
    if (mode == cudaStreamCaptureModeRelaxed) {
        /* Legal in a relaxed capture: the allocation is no node of the graph. */
        void *scratch;
        OK(cudaMalloc(&scratch, BYTES));
        OK(cudaFree(scratch));
    }
    step(n, l, gradient);
    OK(cudaStreamEndCapture(n->main, &g));
    return g;
}

/* Layer l's step built node by node: the same nodes, in a chain. */
static cudaGraph_t built(struct net *n, int l, cudaGraphNode_t *gradient) {
    cudaGraph_t g;
    OK(cudaGraphCreate(&g, 0));
    cudaGraphNode_t last = NULL, node;
    size_t deps = 0;
    if (l == 0) {
        OK(cudaGraphAddMemcpyNode1D(&node, g, NULL, 0, n->a[0], n->input, BYTES,
                                    cudaMemcpyHostToDevice));
        last = node;
        deps = 1;
    }
    struct cudaMemsetParams mp = {n->g, 0, 0, sizeof(int), M, 1};
    OK(cudaGraphAddMemsetNode(&node, g, deps ? &last : NULL, deps, &mp));
    last = node;
    void *fa[] = {&n->a[l], &n->w[l], &n->a[l + 1]};
    struct cudaKernelNodeParams kf = {(void *)k_forward, one, one, 0, fa, NULL};
    OK(cudaGraphAddKernelNode(&node, g, &last, 1, &kf));
    last = node;
    struct cudaKernelNodeParams kg = gradient_params(n, l);
    OK(cudaGraphAddKernelNode(gradient, g, &last, 1, &kg));
    last = *gradient;
    void *ua[] = {&n->w[l], &n->g};
    struct cudaKernelNodeParams ku = {(void *)k_update, one, one, 0, ua, NULL};
    OK(cudaGraphAddKernelNode(&node, g, &last, 1, &ku));
    last = node;
    if (l == L - 1) {
        struct cudaHostNodeParams hp = {host_count, &n->host_calls};
        OK(cudaGraphAddHostNode(&node, g, &last, 1, &hp));
        last = node;
        OK(cudaGraphAddMemcpyNode1D(&node, g, &last, 1, n->output, n->a[L], BYTES,
                                    cudaMemcpyDeviceToHost));
    }
    return g;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: graph_train direct|global|relaxed|explicit|malloc [ITERS]\n");
        return 2;
    }
    const char *mode = argv[1];
    int iters = argc > 2 ? atoi(argv[2]) : 12;
    int graphs = strcmp(mode, "direct") != 0;
    if (graphs && strcmp(mode, "global") && strcmp(mode, "relaxed") && strcmp(mode, "explicit") &&
        strcmp(mode, "malloc")) {
        fprintf(stderr, "graph_train: unknown mode %s\n", mode);
        return 2;
    }
    register_kernels();
    struct net n;
    net_init(&n);
    n.graph_memory = !strcmp(mode, "malloc");
    if (n.graph_memory) OK(cudaFree(n.g)); /* each step's graph allocates its own */

    cudaGraph_t g[L];
    cudaGraphExec_t exec[L];
    cudaGraphNode_t gradient[L];
    for (int l = 0; graphs && l < L; l++) {
        if (!strcmp(mode, "explicit")) g[l] = built(&n, l, &gradient[l]);
        else
            g[l] = captured(&n, l,
                            strcmp(mode, "relaxed") ? cudaStreamCaptureModeGlobal
                                                    : cudaStreamCaptureModeRelaxed,
                            &gradient[l]);
        OK(cudaGraphInstantiate(&exec[l], g[l], 0));
    }

    long long total = 0;
    for (int it = 0; it < iters; it++) {
        for (int i = 0; i < M; i++) n.input[i] = (i * 7 + it * 31) % 17;
        n.scale = scale_of(it);
        for (int l = 0; l < L; l++) {
            if (!graphs) {
                step(&n, l, NULL);
                continue;
            }
            /* The exec graph holds a copy of the arguments: the new scale goes in by update
             * (with the gradient buffer the step's graph allocated, in mode malloc). */
            if (n.graph_memory) n.g = n.gl[l];
            struct cudaKernelNodeParams kg = gradient_params(&n, l);
            OK(cudaGraphExecKernelNodeSetParams(exec[l], gradient[l], &kg));
            OK(cudaGraphLaunch(exec[l], n.main));
        }
        /* Outside the graphs, the iteration's own allocation: a copy of the last activations,
         * whose tail is read back (what a loss readout does). */
        int *copy;
        OK(cudaMalloc((void **)&copy, BYTES));
        OK(cudaMemcpyAsync(copy, n.a[L], BYTES, cudaMemcpyDeviceToDevice, n.main));
        OK(cudaMemcpyAsync(n.tail, copy + M - 16, 16 * sizeof(int), cudaMemcpyDeviceToHost, n.main));
        OK(cudaStreamSynchronize(n.main));
        OK(cudaFree(copy));
        long long sum = 0;
        for (int i = 0; i < M; i++) sum += n.output[i];
        for (int i = 0; i < 16; i++) sum += n.tail[i];
        total += sum;
        printf("iter %d sum %lld\n", it, sum);
    }
    if (n.host_calls != iters) {
        fprintf(stderr, "graph_train: %d host calls for %d iterations\n", n.host_calls, iters);
        return 1;
    }
    unsigned long long checksum = 1469598103934665603ull;
    int *w = malloc(BYTES);
    for (int l = 0; l < L; l++) {
        OK(cudaMemcpy(w, n.w[l], BYTES, cudaMemcpyDeviceToHost));
        for (int i = 0; i < M; i++) checksum = (checksum ^ (unsigned)w[i]) * 1099511628211ull;
    }
    free(w);
    for (int l = 0; graphs && l < L; l++) {
        OK(cudaGraphExecDestroy(exec[l]));
        OK(cudaGraphDestroy(g[l]));
    }
    printf("total %lld\n", total);
    printf("checksum %016llx\n", checksum);
    return 0;
}
