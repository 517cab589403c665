/*
 * graphs.c — CUDA graphs on cuda-shim: stream capture, instantiation and launch, and what is
 * illegal during a capture, through the runtime's C ABI as a CUDA program uses them.
 *
 * Usage: graphs CASE [ITERS]   (one of the case names in `cases` below)
 * Each case asserts its own expectations and exits 1 with a message on the first mismatch, or
 * prints "ok". `replay` is a training-like iteration (an upload, a memset, kernels on a forked
 * side stream joined back, a host node, a download) captured once and launched ITERS times
 * (default 8), compared with the same work launched directly (`replay_v2`: instantiated with
 * CUDA 11's cuGraphInstantiate, found with cudaGetDriverEntryPointByVersion at 11000);
 * `explicit` builds such an
 * iteration with the explicit graph API instead (nodes, dependencies, a child graph) and
 * changes a kernel node's arguments between launches; `memnodes` checks graph memory nodes
 * (cudaMallocAsync and cudaFreeAsync in a capture, explicit alloc and free nodes) and CUDA's
 * rules on their allocations' lifetime.
 */
#define _DEFAULT_SOURCE
#include <cuda_runtime.h>
#include <cuda_shim.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EXPECT(cond)                                                                     \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "%s:%d: expectation failed: %s\n", __FILE__, __LINE__, #cond); \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

#define EXPECT_CODE(call, code)                                                            \
    do {                                                                                   \
        int got_ = (int)(call);                                                            \
        if (got_ != (int)(code)) {                                                         \
            fprintf(stderr, "%s:%d: %s returned %d (%s), expected %d\n", __FILE__, __LINE__, \
                    #call, got_, cudaGetErrorName((cudaError_t)got_), (int)(code));        \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

#define OK(call) EXPECT_CODE(call, cudaSuccess)

enum { N = 4096 };
static const dim3 one = {1, 1, 1};

/* ---- kernels (host functions run on stream threads) ---- */

/* forward(const int *x, const int *w, int *y): y = x * w, slowly (a missing wait shows) */
static void k_forward(void **args) {
    const int *x = *(const int **)args[0];
    const int *w = *(const int **)args[1];
    int *y = *(int **)args[2];
    usleep(500);
    for (int i = 0; i < N; i++) y[i] = x[i] * w[i];
}

/* gradient(const int *y, int *grad, int scale): grad += scale * y (on the side stream) */
static void k_gradient(void **args) {
    const int *y = *(const int **)args[0];
    int *grad = *(int **)args[1];
    int scale = *(int *)args[2];
    usleep(500);
    for (int i = 0; i < N; i++) grad[i] += scale * y[i];
}

/* update(int *w, const int *grad): w = (w + grad) % 1000 + 1 */
static void k_update(void **args) {
    int *w = *(int **)args[0];
    const int *grad = *(const int **)args[1];
    for (int i = 0; i < N; i++) w[i] = (w[i] + grad[i]) % 1000 + 1;
}

/* bump(int *counter): ++*counter, read and written apart (overlapping runs lose counts) */
static void k_bump(void **args) {
    int *counter = *(int **)args[0];
    int seen = *counter;
    usleep(300);
    *counter = seen + 1;
}

static void host_count(void *data) { ++*(int *)data; }

static void register_kernels(void) {
    size_t p3[] = {sizeof(void *), sizeof(void *), sizeof(void *)};
    size_t p2i[] = {sizeof(void *), sizeof(void *), sizeof(int)};
    size_t p2[] = {sizeof(void *), sizeof(void *)};
    size_t p1[] = {sizeof(void *)};
    OK(cudaShimRegisterKernel(k_forward, "forward", 3, p3, 0));
    OK(cudaShimRegisterKernel(k_gradient, "gradient", 3, p2i, 0));
    OK(cudaShimRegisterKernel(k_update, "update", 2, p2, 0));
    OK(cudaShimRegisterKernel(k_bump, "bump", 1, p1, 0));
}

static void launch3(void (*k)(void **), void *a, void *b, void *c, cudaStream_t s) {
    void *args[] = {&a, &b, &c};
    OK(cudaLaunchKernel((const void *)k, one, one, args, 0, s));
}

static void launch_gradient(int *y, int *grad, int scale, cudaStream_t s) {
    void *args[] = {&y, &grad, &scale};
    OK(cudaLaunchKernel((const void *)k_gradient, one, one, args, 0, s));
}

static void launch_update(int *w, int *grad, cudaStream_t s) {
    void *args[] = {&w, &grad};
    OK(cudaLaunchKernel((const void *)k_update, one, one, args, 0, s));
}

static void launch_bump(int *counter, cudaStream_t s) {
    void *args[] = {&counter};
    OK(cudaLaunchKernel((const void *)k_bump, one, one, args, 0, s));
}

/* ---- replay: one captured iteration, launched ITERS times ---- */

struct model {
    int *x, *w, *y, *grad; /* device */
    int *input, *output;   /* page-locked host */
    int host_calls;
    cudaStream_t main, side;
    cudaEvent_t fork, join;
};

static void model_init(struct model *m) {
    size_t bytes = N * sizeof(int);
    OK(cudaMalloc((void **)&m->x, bytes));
    OK(cudaMalloc((void **)&m->w, bytes));
    OK(cudaMalloc((void **)&m->y, bytes));
    OK(cudaMalloc((void **)&m->grad, bytes));
    OK(cudaMallocHost((void **)&m->input, bytes));
    OK(cudaMallocHost((void **)&m->output, bytes));
    int *w0 = malloc(bytes);
    for (int i = 0; i < N; i++) w0[i] = 1 + i % 13;
    OK(cudaMemcpy(m->w, w0, bytes, cudaMemcpyHostToDevice));
    free(w0);
    m->host_calls = 0;
    OK(cudaStreamCreateWithFlags(&m->main, cudaStreamNonBlocking));
    OK(cudaStreamCreateWithFlags(&m->side, cudaStreamNonBlocking));
    OK(cudaEventCreateWithFlags(&m->fork, cudaEventDisableTiming));
    OK(cudaEventCreateWithFlags(&m->join, cudaEventDisableTiming));
}

/* The iteration: upload the input, clear the gradient, forward on main, gradient on the side
 * stream (forked after forward, joined before the update), update, count on the host,
 * download the weights. */
static void iteration(struct model *m) {
    size_t bytes = N * sizeof(int);
    OK(cudaMemcpyAsync(m->x, m->input, bytes, cudaMemcpyHostToDevice, m->main));
    OK(cudaMemsetAsync(m->grad, 0, bytes, m->main));
    launch3(k_forward, m->x, m->w, m->y, m->main);
    OK(cudaEventRecord(m->fork, m->main));
    OK(cudaStreamWaitEvent(m->side, m->fork, 0));
    launch_gradient(m->y, m->grad, 3, m->side);
    OK(cudaEventRecord(m->join, m->side));
    OK(cudaStreamWaitEvent(m->main, m->join, 0));
    launch_update(m->w, m->grad, m->main);
    OK(cudaLaunchHostFunc(m->main, host_count, &m->host_calls));
    OK(cudaMemcpyAsync(m->output, m->w, bytes, cudaMemcpyDeviceToHost, m->main));
}

static void fill_input(struct model *m, int it) {
    for (int i = 0; i < N; i++) m->input[i] = (i * 7 + it * 31) % 17;
}

/* CUDA 11's cuGraphInstantiate (the driver's cuGraphInstantiate_v2), as a program built for
 * CUDA 11 finds it: the driver's "cuGraphInstantiate" at version 11000. */
typedef int (*instantiate_v2_fn)(cudaGraphExec_t *exec, cudaGraph_t graph,
                                 cudaGraphNode_t *error_node, char *log, size_t log_size);

static instantiate_v2_fn instantiate_v2(void) {
    void *fn = NULL, *current = NULL;
    enum cudaDriverEntryPointQueryResult found;
    OK(cudaGetDriverEntryPointByVersion("cuGraphInstantiate", &fn, 11000, cudaEnableDefault, &found));
    EXPECT(found == cudaDriverEntryPointSuccess && fn != NULL);
    /* From 12000 on the name is cuGraphInstantiateWithFlags, another function. */
    OK(cudaGetDriverEntryPointByVersion("cuGraphInstantiate", &current, 12000, cudaEnableDefault, &found));
    EXPECT(found == cudaDriverEntryPointSuccess && current != NULL && current != fn);
    instantiate_v2_fn instantiate;
    memcpy(&instantiate, &fn, sizeof fn);
    /* An error names no node and leaves an empty message. */
    cudaGraphExec_t exec = NULL;
    cudaGraphNode_t node = (cudaGraphNode_t)1;
    char log[16] = "unchanged";
    EXPECT(instantiate(&exec, NULL, &node, log, sizeof log) == 1 /* CUDA_ERROR_INVALID_VALUE */);
    EXPECT(node == NULL && log[0] == 0);
    return instantiate;
}

/* legacy_instantiate: instantiate with CUDA 11's cuGraphInstantiate (instantiate_v2). */
static int case_replay_with(int iters, int legacy_instantiate) {
    register_kernels();
    struct model direct, graph;
    model_init(&direct);
    model_init(&graph);
    int *expected = malloc((size_t)iters * N * sizeof(int));
    for (int it = 0; it < iters; it++) {
        fill_input(&direct, it);
        iteration(&direct);
        OK(cudaStreamSynchronize(direct.main));
        memcpy(expected + (size_t)it * N, direct.output, N * sizeof(int));
    }
    EXPECT(direct.host_calls == iters);

    /* Capture: nothing runs, the side stream joins the capture through the event. */
    enum cudaStreamCaptureStatus status;
    OK(cudaStreamBeginCapture(graph.main, cudaStreamCaptureModeGlobal));
    OK(cudaStreamIsCapturing(graph.main, &status));
    EXPECT(status == cudaStreamCaptureStatusActive);
    OK(cudaStreamIsCapturing(graph.side, &status));
    EXPECT(status == cudaStreamCaptureStatusNone);
    fill_input(&graph, -1); /* what the copy would read if it ran now */
    iteration(&graph);
    unsigned long long id = 0;
    cudaGraph_t during = NULL;
    const cudaGraphNode_t *deps = NULL;
    size_t ndeps = 0;
    OK(cudaStreamGetCaptureInfo(graph.main, &status, &id, &during, &deps, &ndeps));
    EXPECT(status == cudaStreamCaptureStatusActive && id != 0 && during != NULL);
    EXPECT(ndeps == 1 && deps != NULL);
    const cudaGraphEdgeData *edges = (const cudaGraphEdgeData *)1;
    size_t nedges = 0;
    OK(cudaStreamGetCaptureInfo_v3(graph.main, &status, NULL, NULL, NULL, &edges, &nedges));
    EXPECT(status == cudaStreamCaptureStatusActive && nedges == 1 && edges == NULL);
    /* The stream's dependencies can be replaced and added to (the last node again here). */
    cudaGraphNode_t last = deps[0];
    OK(cudaStreamUpdateCaptureDependencies(graph.main, NULL, 0, cudaStreamSetCaptureDependencies));
    OK(cudaStreamGetCaptureInfo(graph.main, &status, NULL, NULL, &deps, &ndeps));
    EXPECT(ndeps == 0);
    OK(cudaStreamUpdateCaptureDependencies(graph.main, &last, 1, cudaStreamAddCaptureDependencies));
    OK(cudaStreamGetCaptureInfo(graph.main, &status, NULL, NULL, &deps, &ndeps));
    EXPECT(ndeps == 1 && deps[0] == last);
    EXPECT_CODE(cudaStreamUpdateCaptureDependencies(direct.main, &last, 1, 0), cudaErrorIllegalState);
    cudaGraph_t g = NULL;
    OK(cudaStreamEndCapture(graph.main, &g));
    EXPECT(g == during);
    OK(cudaStreamIsCapturing(graph.main, &status));
    EXPECT(status == cudaStreamCaptureStatusNone);
    OK(cudaStreamIsCapturing(graph.side, &status));
    EXPECT(status == cudaStreamCaptureStatusNone);
    OK(cudaDeviceSynchronize());
    EXPECT(graph.host_calls == 0);
    size_t count = 0;
    OK(cudaGraphGetNodes(g, NULL, &count));
    EXPECT(count == 7); /* memcpy, memset, forward, gradient, update, host, memcpy */

    cudaGraphExec_t exec;
    if (legacy_instantiate) {
        char log[64] = "unchanged";
        cudaGraphNode_t node = NULL;
        EXPECT(instantiate_v2()(&exec, g, &node, log, sizeof log) == 0);
        EXPECT(log[0] == 0);
    } else {
        OK(cudaGraphInstantiate(&exec, g, 0));
    }
    for (int it = 0; it < iters; it++) {
        fill_input(&graph, it); /* the copy node reads the input when the graph runs */
        OK(cudaGraphLaunch(exec, graph.main));
        OK(cudaStreamSynchronize(graph.main));
        if (memcmp(graph.output, expected + (size_t)it * N, N * sizeof(int)) != 0) {
            fprintf(stderr, "graphs: launch %d differs from the direct iteration\n", it);
            return 1;
        }
    }
    EXPECT(graph.host_calls == iters);
    OK(cudaGraphExecDestroy(exec));
    OK(cudaGraphDestroy(g));
    EXPECT_CODE(cudaGraphDestroy(g), cudaErrorInvalidValue);
    free(expected);
    return 0;
}

static int case_replay(int iters) { return case_replay_with(iters, 0); }

/* The same, the exec made by CUDA 11's cuGraphInstantiate. */
static int case_replay_v2(int iters) { return case_replay_with(iters, 1); }

/* Later work on the stream waits for the whole graph, and two launches of one exec on two
 * streams never overlap. */
static int case_launch_order(int iters) {
    register_kernels();
    int *counter;
    OK(cudaMallocManaged((void **)&counter, sizeof(int), cudaMemAttachGlobal));
    *counter = 0;
    cudaStream_t s1, s2, cap;
    OK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    OK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    OK(cudaStreamCreateWithFlags(&cap, cudaStreamNonBlocking));
    cudaGraph_t g;
    OK(cudaStreamBeginCapture(cap, cudaStreamCaptureModeThreadLocal));
    launch_bump(counter, cap);
    launch_bump(counter, cap);
    OK(cudaStreamEndCapture(cap, &g));
    cudaGraphExec_t exec;
    OK(cudaGraphInstantiateWithFlags(&exec, g, 0));
    for (int it = 0; it < iters; it++) OK(cudaGraphLaunch(exec, it % 2 ? s2 : s1));
    cudaStream_t last = (iters - 1) % 2 ? s2 : s1;
    launch_bump(counter, last); /* after the last launch: it waits for the whole graph */
    OK(cudaDeviceSynchronize());
    EXPECT(*counter == 2 * iters + 1);
    OK(cudaGraphExecDestroy(exec));
    OK(cudaGraphDestroy(g));
    return 0;
}

/* The explicit API: the same kind of iteration built node by node (a memset and a forward
 * kernel with no order between them, both before the gradient; a child graph with the update;
 * a host node, an empty node and an event record node), launched ITERS times with the
 * gradient's scale changed in the exec graph between launches, against the same work launched
 * directly. The upload is a memcpy node. */
static void direct_step(struct model *d, int scale) {
    OK(cudaMemcpyAsync(d->x, d->input, N * sizeof(int), cudaMemcpyHostToDevice, d->main));
    OK(cudaMemsetAsync(d->grad, 0, N * sizeof(int), d->main));
    launch3(k_forward, d->x, d->w, d->y, d->main);
    launch_gradient(d->y, d->grad, scale, d->main);
    launch_update(d->w, d->grad, d->main);
    OK(cudaLaunchHostFunc(d->main, host_count, &d->host_calls));
    OK(cudaStreamSynchronize(d->main));
}

static int case_explicit(int iters) {
    register_kernels();
    struct model m, d;
    model_init(&m);
    model_init(&d);
    size_t bytes = N * sizeof(int);

    cudaGraph_t g, child;
    OK(cudaGraphCreate(&g, 0));
    OK(cudaGraphCreate(&child, 0));
    cudaGraphNode_t upload, memset, forward, gradient, update, sub, host, empty, record;
    OK(cudaGraphAddMemcpyNode1D(&upload, g, NULL, 0, m.x, m.input, bytes, cudaMemcpyHostToDevice));
    struct cudaMemsetParams mp = {m.grad, 0, 0, sizeof(int), N, 1};
    OK(cudaGraphAddMemsetNode(&memset, g, NULL, 0, &mp));
    void *fa[] = {&m.x, &m.w, &m.y};
    struct cudaKernelNodeParams kf = {(void *)k_forward, one, one, 0, fa, NULL};
    OK(cudaGraphAddKernelNode(&forward, g, &upload, 1, &kf));
    int scale = 3;
    void *ga[] = {&m.y, &m.grad, &scale};
    struct cudaKernelNodeParams kg = {(void *)k_gradient, one, one, 0, ga, NULL};
    OK(cudaGraphAddKernelNode(&gradient, g, NULL, 0, &kg));
    cudaGraphNode_t from[] = {memset, forward}, to[] = {gradient, gradient};
    OK(cudaGraphAddDependencies(g, from, to, 2));
    EXPECT_CODE(cudaGraphAddDependencies(g, from, to, 1), cudaErrorInvalidValue); /* again */
    void *ua[] = {&m.w, &m.grad};
    struct cudaKernelNodeParams ku = {(void *)k_update, one, one, 0, ua, NULL};
    OK(cudaGraphAddKernelNode(&update, child, NULL, 0, &ku));
    OK(cudaGraphAddChildGraphNode(&sub, g, &gradient, 1, child));
    struct cudaHostNodeParams hp = {host_count, &m.host_calls};
    OK(cudaGraphAddHostNode(&host, g, &sub, 1, &hp));
    OK(cudaGraphAddEmptyNode(&empty, g, &host, 1));
    OK(cudaGraphAddEventRecordNode(&record, g, &empty, 1, m.join));
    size_t count = 0;
    cudaGraphNode_t unused;
    OK(cudaGraphGetNodes(g, NULL, &count));
    EXPECT(count == 8);
    EXPECT_CODE(cudaGraphAddMemcpyNode1D(&unused, g, NULL, 0, m.x, m.input, bytes, cudaMemcpyDeviceToHost),
                cudaErrorInvalidValue); /* the wrong direction */
    struct cudaKernelNodeParams bad = kf;
    bad.blockDim.x = 2048;
    EXPECT_CODE(cudaGraphAddKernelNode(&unused, g, NULL, 0, &bad), cudaErrorInvalidConfiguration);
    EXPECT_CODE(cudaGraphAddEmptyNode(&unused, g, &update, 1), cudaErrorInvalidValue);

    cudaGraphExec_t exec;
    OK(cudaGraphInstantiate(&exec, g, 0));
    OK(cudaGraphDestroy(child)); /* the child node holds a copy */
    int *w = malloc(bytes), *expected = malloc(bytes);
    for (int it = 0; it < iters; it++) {
        scale = 1 + it % 4;
        if (it > 0) OK(cudaGraphExecKernelNodeSetParams(exec, gradient, &kg)); /* copies scale */
        scale = 99; /* what the node holds was copied: this changes nothing */
        fill_input(&m, it); /* the memcpy node reads the input when the graph runs */
        fill_input(&d, it);
        OK(cudaGraphLaunch(exec, m.main));
        OK(cudaEventSynchronize(m.join)); /* recorded by the graph's last node */
        OK(cudaMemcpy(w, m.w, bytes, cudaMemcpyDeviceToHost));
        direct_step(&d, it == 0 ? 3 : 1 + it % 4);
        OK(cudaMemcpy(expected, d.w, bytes, cudaMemcpyDeviceToHost));
        if (memcmp(w, expected, bytes) != 0) {
            fprintf(stderr, "graphs: explicit launch %d differs from the direct work\n", it);
            return 1;
        }
    }
    EXPECT(m.host_calls == iters && d.host_calls == iters);
    EXPECT_CODE(cudaGraphExecKernelNodeSetParams(exec, host, &kg), cudaErrorInvalidValue);
    OK(cudaGraphExecDestroy(exec));
    OK(cudaGraphDestroy(g));
    free(w);
    free(expected);
    return 0;
}

/* An exec graph takes another graph's work when the two have the same topology and node kinds,
 * and refuses it otherwise (staying as it was). */
static cudaGraph_t captured_bumps(cudaStream_t s, int *counter, int n) {
    cudaGraph_t g;
    OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < n; i++) launch_bump(counter, s);
    OK(cudaStreamEndCapture(s, &g));
    return g;
}

static int case_update(void) {
    register_kernels();
    int *c1, *c2;
    OK(cudaMallocManaged((void **)&c1, sizeof(int), cudaMemAttachGlobal));
    OK(cudaMallocManaged((void **)&c2, sizeof(int), cudaMemAttachGlobal));
    *c1 = *c2 = 0;
    cudaStream_t s;
    OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaGraph_t a = captured_bumps(s, c1, 1), b = captured_bumps(s, c2, 1);
    cudaGraph_t two = captured_bumps(s, c2, 2), memset;
    OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    OK(cudaMemsetAsync(c1, 0, sizeof(int), s));
    OK(cudaStreamEndCapture(s, &memset));

    cudaGraphExec_t exec;
    cudaGraphInstantiateParams params = {2 /* cudaGraphInstantiateFlagUpload */, s, NULL,
                                         cudaGraphInstantiateError};
    OK(cudaGraphInstantiateWithParams(&exec, a, &params));
    EXPECT(params.result_out == cudaGraphInstantiateSuccess && params.errNode_out == NULL);
    OK(cudaGraphUpload(exec, s));
    OK(cudaGraphLaunch(exec, s));
    OK(cudaStreamSynchronize(s));
    EXPECT(*c1 == 1 && *c2 == 0);

    cudaGraphExecUpdateResultInfo info;
    OK(cudaGraphExecUpdate(exec, b, &info));
    EXPECT(info.result == cudaGraphExecUpdateSuccess);
    OK(cudaGraphLaunch(exec, s));
    OK(cudaStreamSynchronize(s));
    EXPECT(*c1 == 1 && *c2 == 1);

    EXPECT_CODE(cudaGraphExecUpdate(exec, two, &info), cudaErrorGraphExecUpdateFailure);
    EXPECT(info.result == cudaGraphExecUpdateErrorTopologyChanged);
    EXPECT_CODE(cudaGraphExecUpdate(exec, memset, &info), cudaErrorGraphExecUpdateFailure);
    EXPECT(info.result == cudaGraphExecUpdateErrorNodeTypeChanged && info.errorNode != NULL);
    OK(cudaGraphLaunch(exec, s)); /* still b's work */
    OK(cudaStreamSynchronize(s));
    EXPECT(*c1 == 1 && *c2 == 2);
    OK(cudaGraphExecDestroy(exec));
    return 0;
}

/* ---- what is illegal during a capture ---- */

static cudaStream_t capturing(enum cudaStreamCaptureMode mode, unsigned flags) {
    register_kernels();
    cudaStream_t s;
    OK(cudaStreamCreateWithFlags(&s, flags));
    OK(cudaStreamBeginCapture(s, mode));
    return s;
}

/* The capture on `s` was invalidated: its status says so, ending it fails with no graph, and
 * afterwards the stream works again. */
static void expect_invalidated(cudaStream_t s) {
    enum cudaStreamCaptureStatus status;
    OK(cudaStreamIsCapturing(s, &status));
    EXPECT(status == cudaStreamCaptureStatusInvalidated);
    static int unused;
    int *counter = &unused;
    void *args[] = {&counter};
    EXPECT_CODE(cudaLaunchKernel((const void *)k_bump, one, one, args, 0, s),
                cudaErrorStreamCaptureInvalidated);
    cudaGraph_t g = (cudaGraph_t)1;
    EXPECT_CODE(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
    EXPECT(g == NULL);
    OK(cudaStreamIsCapturing(s, &status));
    EXPECT(status == cudaStreamCaptureStatusNone);
    OK(cudaStreamSynchronize(s));
}

static int case_malloc(void) {
    cudaStream_t s = capturing(cudaStreamCaptureModeGlobal, cudaStreamNonBlocking);
    void *p;
    EXPECT_CODE(cudaMalloc(&p, 256), cudaErrorStreamCaptureUnsupported);
    expect_invalidated(s);
    OK(cudaMalloc(&p, 256));
    return 0;
}

static int case_sync(void) {
    cudaStream_t s = capturing(cudaStreamCaptureModeRelaxed, cudaStreamNonBlocking);
    EXPECT_CODE(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);
    expect_invalidated(s);
    s = capturing(cudaStreamCaptureModeRelaxed, cudaStreamNonBlocking);
    EXPECT_CODE(cudaStreamQuery(s), cudaErrorStreamCaptureUnsupported);
    expect_invalidated(s);
    s = capturing(cudaStreamCaptureModeRelaxed, cudaStreamNonBlocking);
    EXPECT_CODE(cudaDeviceSynchronize(), cudaErrorStreamCaptureUnsupported);
    expect_invalidated(s);
    return 0;
}

static int case_memcpy(void) {
    int *d, host[4] = {0};
    OK(cudaMalloc((void **)&d, sizeof host));
    cudaStream_t s = capturing(cudaStreamCaptureModeGlobal, cudaStreamNonBlocking);
    EXPECT_CODE(cudaMemcpy(host, d, sizeof host, cudaMemcpyDeviceToHost),
                cudaErrorStreamCaptureUnsupported);
    expect_invalidated(s);
    return 0;
}

/* A blocking stream captures: any use of the legacy stream would depend on it. */
static int case_legacy(void) {
    int *d;
    OK(cudaMalloc((void **)&d, 256));
    cudaStream_t s = capturing(cudaStreamCaptureModeRelaxed, cudaStreamDefault);
    enum cudaStreamCaptureStatus status;
    EXPECT_CODE(cudaStreamIsCapturing(0, &status), cudaErrorStreamCaptureImplicit);
    EXPECT_CODE(cudaMemsetAsync(d, 0, 256, 0), cudaErrorStreamCaptureImplicit);
    expect_invalidated(s);
    OK(cudaMemsetAsync(d, 0, 256, 0));
    EXPECT_CODE(cudaStreamBeginCapture(0, cudaStreamCaptureModeGlobal),
                cudaErrorStreamCaptureUnsupported);
    return 0;
}

static int case_event(void) {
    cudaEvent_t e, outside;
    OK(cudaEventCreate(&e));
    OK(cudaEventCreate(&outside));
    OK(cudaEventRecord(outside, 0));
    cudaStream_t s = capturing(cudaStreamCaptureModeGlobal, cudaStreamNonBlocking);
    OK(cudaEventRecord(e, s));
    EXPECT_CODE(cudaEventQuery(e), cudaErrorCapturedEvent);
    expect_invalidated(s);
    s = capturing(cudaStreamCaptureModeGlobal, cudaStreamNonBlocking);
    EXPECT_CODE(cudaStreamWaitEvent(s, outside, 0), cudaErrorStreamCaptureIsolation);
    expect_invalidated(s);
    s = capturing(cudaStreamCaptureModeGlobal, cudaStreamNonBlocking);
    OK(cudaStreamWaitEvent(s, outside, cudaEventWaitExternal));
    cudaGraph_t g;
    OK(cudaStreamEndCapture(s, &g));
    size_t count = 0;
    OK(cudaGraphGetNodes(g, NULL, &count));
    EXPECT(count == 1);
    return 0;
}

/* A forked stream must be joined back; only the origin ends the capture. */
static int case_fork(void) {
    cudaStream_t s = capturing(cudaStreamCaptureModeGlobal, cudaStreamNonBlocking);
    cudaStream_t t;
    OK(cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking));
    cudaEvent_t e;
    OK(cudaEventCreate(&e));
    OK(cudaEventRecord(e, s));
    OK(cudaStreamWaitEvent(t, e, 0));
    enum cudaStreamCaptureStatus status;
    OK(cudaStreamIsCapturing(t, &status));
    EXPECT(status == cudaStreamCaptureStatusActive);
    int *counter;
    OK(cudaMallocManaged((void **)&counter, sizeof(int), cudaMemAttachGlobal));
    launch_bump(counter, t);
    cudaGraph_t g = (cudaGraph_t)1;
    EXPECT_CODE(cudaStreamEndCapture(t, &g), cudaErrorStreamCaptureUnmatched);
    EXPECT_CODE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaErrorIllegalState);
    EXPECT_CODE(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureUnjoined);
    EXPECT(g == NULL);
    OK(cudaStreamIsCapturing(t, &status));
    EXPECT(status == cudaStreamCaptureStatusNone);
    EXPECT_CODE(cudaStreamEndCapture(s, &g), cudaErrorIllegalState);
    return 0;
}

/* Modes: which other threads a capture prohibits unsafe calls to. */
struct attempt {
    enum cudaStreamCaptureMode mode;
    cudaError_t code;
    cudaStream_t end;
};

static void *try_malloc(void *arg) {
    struct attempt *a = arg;
    enum cudaStreamCaptureMode mode = a->mode;
    OK(cudaThreadExchangeStreamCaptureMode(&mode));
    EXPECT(mode == cudaStreamCaptureModeGlobal);
    void *p = NULL;
    a->code = cudaMalloc(&p, 256);
    return NULL;
}

static void *try_end(void *arg) {
    struct attempt *a = arg;
    cudaGraph_t g;
    a->code = cudaStreamEndCapture(a->end, &g);
    return NULL;
}

static cudaError_t on_thread(void *(*f)(void *), struct attempt *a) {
    pthread_t thread;
    EXPECT(pthread_create(&thread, NULL, f, a) == 0);
    EXPECT(pthread_join(thread, NULL) == 0);
    return a->code;
}

static int case_modes(void) {
    /* A global capture prohibits other global-mode threads, not relaxed or thread-local ones. */
    cudaStream_t s = capturing(cudaStreamCaptureModeGlobal, cudaStreamNonBlocking);
    struct attempt relaxed = {cudaStreamCaptureModeRelaxed, cudaSuccess, s};
    struct attempt local = {cudaStreamCaptureModeThreadLocal, cudaSuccess, s};
    struct attempt global = {cudaStreamCaptureModeGlobal, cudaSuccess, s};
    EXPECT(on_thread(try_malloc, &relaxed) == cudaSuccess);
    EXPECT(on_thread(try_malloc, &local) == cudaSuccess);
    EXPECT(on_thread(try_end, &global) == cudaErrorStreamCaptureWrongThread);
    EXPECT(on_thread(try_malloc, &global) == cudaErrorStreamCaptureUnsupported);
    expect_invalidated(s);

    /* A thread-local capture prohibits only its own thread; a relaxed one nobody. */
    s = capturing(cudaStreamCaptureModeThreadLocal, cudaStreamNonBlocking);
    EXPECT(on_thread(try_malloc, &global) == cudaSuccess);
    void *p;
    EXPECT_CODE(cudaMalloc(&p, 256), cudaErrorStreamCaptureUnsupported);
    expect_invalidated(s);
    s = capturing(cudaStreamCaptureModeRelaxed, cudaStreamNonBlocking);
    OK(cudaMalloc(&p, 256));
    OK(cudaFree(p));
    global.end = s;
    EXPECT(on_thread(try_end, &global) == cudaSuccess); /* relaxed: any thread ends it */

    /* This thread's own mode: relaxed lifts its own capture's prohibition. */
    s = capturing(cudaStreamCaptureModeGlobal, cudaStreamNonBlocking);
    enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    OK(cudaThreadExchangeStreamCaptureMode(&mode));
    EXPECT(mode == cudaStreamCaptureModeGlobal);
    OK(cudaMalloc(&p, 256));
    OK(cudaThreadExchangeStreamCaptureMode(&mode));
    cudaGraph_t g;
    OK(cudaStreamEndCapture(s, &g));
    return 0;
}

/* Graph memory nodes, as CUDA defines them: cudaMallocAsync/cudaFreeAsync in a capture make an
 * alloc and a free node (the address fixed at the capture); one exec graph at a time for a graph
 * with memory nodes; an allocation the graph leaves unfreed outlives the launch and must be
 * freed (cudaFreeAsync, cudaFree, or a free node of another graph) before the next launch,
 * unless the exec frees it itself (cudaGraphInstantiateFlagAutoFreeOnLaunch). */
static int case_memnodes(int iters) {
    register_kernels();
    cudaStream_t s;
    OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    unsigned char *out;
    OK(cudaMallocHost((void **)&out, 256));

    /* Allocated, set, read back and freed inside the graph, every launch. */
    cudaGraph_t g;
    unsigned char *p = NULL;
    OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    OK(cudaMallocAsync((void **)&p, 256, s));
    EXPECT(p != NULL);
    OK(cudaMemsetAsync(p, 7, 256, s));
    OK(cudaMemcpyAsync(out, p, 256, cudaMemcpyDeviceToHost, s));
    OK(cudaFreeAsync(p, s));
    OK(cudaStreamEndCapture(s, &g));
    cudaGraphExec_t e, second;
    OK(cudaGraphInstantiate(&e, g, 0));
    EXPECT_CODE(cudaGraphInstantiate(&second, g, 0), cudaErrorInvalidValue);
    for (int i = 0; i < iters; i++) {
        memset(out, 0, 256);
        OK(cudaGraphLaunch(e, s));
        OK(cudaStreamSynchronize(s));
        for (int b = 0; b < 256; b++) EXPECT(out[b] == 7);
    }
    EXPECT_CODE(cudaFree(p), cudaErrorInvalidValue); /* the graph frees it */
    unsigned long long used = 1, reserved = 0;
    OK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &used));
    OK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrReservedMemCurrent, &reserved));
    EXPECT(used == 0 && reserved >= 256);
    OK(cudaGraphExecDestroy(e));
    OK(cudaGraphInstantiate(&e, g, 0)); /* the first exec is gone */
    OK(cudaGraphExecDestroy(e));
    OK(cudaGraphDestroy(g));

    /* An explicit alloc node without a free: the memory outlives the launch. */
    OK(cudaGraphCreate(&g, 0));
    struct cudaMemAllocNodeParams ap;
    memset(&ap, 0, sizeof ap);
    ap.poolProps.allocType = cudaMemAllocationTypePinned;
    ap.poolProps.location.type = cudaMemLocationTypeDevice;
    ap.poolProps.location.id = 0;
    ap.bytesize = 256;
    cudaGraphNode_t alloc, set;
    OK(cudaGraphAddMemAllocNode(&alloc, g, NULL, 0, &ap));
    unsigned char *q = ap.dptr;
    EXPECT(q != NULL);
    struct cudaMemAllocNodeParams got;
    OK(cudaGraphMemAllocNodeGetParams(alloc, &got));
    EXPECT(got.dptr == q && got.bytesize == 256 && got.poolProps.location.id == 0);
    void *freed = NULL;
    EXPECT_CODE(cudaGraphMemFreeNodeGetParams(alloc, &freed), cudaErrorInvalidValue);
    struct cudaMemsetParams mp = {q, 0, 5, 1, 256, 1};
    OK(cudaGraphAddMemsetNode(&set, g, &alloc, 1, &mp));
    ap.poolProps.handleTypes = cudaMemHandleTypePosixFileDescriptor;
    EXPECT_CODE(cudaGraphAddMemAllocNode(&alloc, g, NULL, 0, &ap), cudaErrorInvalidValue);
    cudaGraph_t parent;
    cudaGraphNode_t child;
    OK(cudaGraphCreate(&parent, 0));
    EXPECT_CODE(cudaGraphAddChildGraphNode(&child, parent, NULL, 0, g), cudaErrorInvalidValue);
    OK(cudaGraphDestroy(parent));
    OK(cudaGraphInstantiate(&e, g, 0));
    OK(cudaGraphLaunch(e, s));
    EXPECT_CODE(cudaGraphLaunch(e, s), cudaErrorInvalidValue); /* still allocated */
    OK(cudaMemcpyAsync(out, q, 256, cudaMemcpyDeviceToHost, s));
    OK(cudaStreamSynchronize(s));
    for (int b = 0; b < 256; b++) EXPECT(out[b] == 5);
    OK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &used));
    EXPECT(used >= 256);
    OK(cudaFreeAsync(q, s));
    EXPECT_CODE(cudaFreeAsync(q, s), cudaErrorInvalidValue);
    OK(cudaGraphLaunch(e, s));
    OK(cudaFree(q));
    EXPECT_CODE(cudaFree(q), cudaErrorInvalidValue);

    /* Freed by a free node of another graph: once per allocation, only a graph allocation. */
    cudaGraph_t other;
    cudaGraphNode_t free_node, again;
    OK(cudaGraphCreate(&other, 0));
    OK(cudaGraphAddMemFreeNode(&free_node, other, NULL, 0, q));
    OK(cudaGraphMemFreeNodeGetParams(free_node, &freed));
    EXPECT(freed == q);
    EXPECT_CODE(cudaGraphAddMemFreeNode(&again, other, NULL, 0, q), cudaErrorInvalidValue);
    int *d;
    OK(cudaMalloc((void **)&d, 256));
    EXPECT_CODE(cudaGraphAddMemFreeNode(&again, other, NULL, 0, d), cudaErrorInvalidValue);
    cudaGraphExec_t frees;
    OK(cudaGraphInstantiate(&frees, other, 0));
    EXPECT_CODE(cudaGraphLaunch(frees, s), cudaErrorInvalidValue); /* nothing to free */
    for (int i = 0; i < iters; i++) {
        OK(cudaGraphLaunch(e, s));
        OK(cudaGraphLaunch(frees, s));
    }

    /* Auto-free on launch: a relaunch first frees what the previous launch left. */
    OK(cudaGraphExecDestroy(e));
    OK(cudaGraphInstantiate(&e, g, cudaGraphInstantiateFlagAutoFreeOnLaunch));
    for (int i = 0; i < iters; i++) OK(cudaGraphLaunch(e, s));
    OK(cudaStreamSynchronize(s));
    OK(cudaFree(q));
    OK(cudaGraphExecDestroy(e));
    OK(cudaGraphExecDestroy(frees));
    OK(cudaGraphDestroy(other));
    OK(cudaGraphDestroy(g));

    /* A capture that fails takes its allocations with its graph. */
    OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    OK(cudaMallocAsync((void **)&p, 256, s));
    EXPECT_CODE(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);
    EXPECT_CODE(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
    OK(cudaDeviceGraphMemTrim(0));
    OK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrReservedMemCurrent, &reserved));
    EXPECT(reserved == 0);
    OK(cudaFree(d));
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: graphs CASE [ITERS]\n");
        return 2;
    }
    int iters = argc > 2 ? atoi(argv[2]) : 8;
    const char *name = argv[1];
    int rc;
    if (!strcmp(name, "replay")) rc = case_replay(iters);
    else if (!strcmp(name, "replay_v2")) rc = case_replay_v2(iters);
    else if (!strcmp(name, "launch_order")) rc = case_launch_order(iters);
    else if (!strcmp(name, "explicit")) rc = case_explicit(iters);
    else if (!strcmp(name, "update")) rc = case_update();
    else if (!strcmp(name, "malloc")) rc = case_malloc();
    else if (!strcmp(name, "sync")) rc = case_sync();
    else if (!strcmp(name, "memcpy")) rc = case_memcpy();
    else if (!strcmp(name, "legacy")) rc = case_legacy();
    else if (!strcmp(name, "event")) rc = case_event();
    else if (!strcmp(name, "fork")) rc = case_fork();
    else if (!strcmp(name, "modes")) rc = case_modes();
    else if (!strcmp(name, "memnodes")) rc = case_memnodes(iters);
    else {
        fprintf(stderr, "graphs: unknown case %s\n", name);
        return 2;
    }
    if (rc == 0) printf("ok\n");
    return rc;
}
