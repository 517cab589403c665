/*
 * shim_checks.c — checks of cuda-shim's CUDA semantics, run through the C ABI exactly as a CUDA
 * program would use them (compiled against cuda-shim/include, linked with -lcudart -lcuda).
 *
 * Usage: shim_checks CASE      (one of the case names in `cases` below)
 * Each case asserts its own expectations and exits 1 with a message on the first mismatch;
 * some print values (key=value lines) that tests/shim.rs compares across runs.
 *
 * A case that checks what the host sees while work is still queued or running holds that work
 * at a gate (a kernel that returns only once the host opens it) instead of assuming that a
 * sleeping kernel is still asleep when the host looks: the outcome must not depend on how
 * loaded the machine is.
 */
#define _DEFAULT_SOURCE
#include <cuda.h>
#include <cuda_runtime.h>
#include <cuda_shim.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
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

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* ---- kernels (host functions run on stream threads) ---- */

/* Gates, numbered 1, 2, … in the order they are made; the host opens them in that order. */
static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;
static int gates_opened; /* guarded by gate_lock */
static int gates_made;   /* host thread only */

/* gate(int n): returns once the host has opened gate n */
static void k_gate(void **args) {
    int n = *(int *)args[0];
    pthread_mutex_lock(&gate_lock);
    while (gates_opened < n) pthread_cond_wait(&gate_cond, &gate_lock);
    pthread_mutex_unlock(&gate_lock);
}

/* append(int *log, int *count, int value): log[(*count)++] = value */
static void k_append(void **args) {
    int *log = *(int **)args[0];
    int *count = *(int **)args[1];
    int value = *(int *)args[2];
    log[(*count)++] = value;
}

/* store(float *dst, float value): *dst = value */
static void k_store(void **args) {
    float *dst = *(float **)args[0];
    float value = *(float *)args[1];
    *dst = value;
}

/* copy(float *dst, const float *src, size_t n) */
static void k_copy(void **args) {
    float *dst = *(float **)args[0];
    const float *src = *(const float **)args[1];
    size_t n = *(size_t *)args[2];
    memcpy(dst, src, n * sizeof(float));
}

/* fault(int code): the device faults with `code` */
static void k_fault(void **args) { cudaShimRaiseDeviceError((cudaError_t) * (int *)args[0]); }

/* nothing(): runs for its simulated duration only */
static void k_nothing(void **args) { (void)args; }

static void register_kernels(void) {
    size_t append[] = {sizeof(int *), sizeof(int *), sizeof(int)};
    size_t store[] = {sizeof(float *), sizeof(float)};
    size_t copy[] = {sizeof(float *), sizeof(float *), sizeof(size_t)};
    size_t fault[] = {sizeof(int)};
    size_t gate[] = {sizeof(int)};
    OK(cudaShimRegisterKernel(k_append, "append", 3, append, 0));
    OK(cudaShimRegisterKernel(k_gate, "gate", 1, gate, 0));
    OK(cudaShimRegisterKernel(k_store, "store", 2, store, 0));
    OK(cudaShimRegisterKernel(k_copy, "copy", 3, copy, 0));
    OK(cudaShimRegisterKernel(k_fault, "fault", 1, fault, 0));
    OK(cudaShimRegisterKernel(k_nothing, "nothing", 0, NULL, 20 * 1000 * 1000ull));
}

static const dim3 one = {1, 1, 1};

static void launch_append(int *log, int *count, int value, cudaStream_t s) {
    void *args[] = {&log, &count, &value};
    OK(cudaLaunchKernel((const void *)k_append, one, one, args, 0, s));
}

static void launch_store(float *dst, float value, cudaStream_t s) {
    void *args[] = {&dst, &value};
    OK(cudaLaunchKernel((const void *)k_store, one, one, args, 0, s));
}

static void launch_copy(float *dst, const float *src, size_t n, cudaStream_t s) {
    void *args[] = {&dst, &src, &n};
    OK(cudaLaunchKernel((const void *)k_copy, one, one, args, 0, s));
}

/* The number of a new gate (closed until open_gate() has been called that many times). */
static int next_gate(void) { return ++gates_made; }

/* Queues a gate on `s`: the stream's later work waits until open_gate() opens it. */
static void launch_gate(cudaStream_t s) {
    int n = next_gate();
    void *args[] = {&n};
    OK(cudaLaunchKernel((const void *)k_gate, one, one, args, 0, s));
}

/* Opens the oldest gate still closed. */
static void open_gate(void) {
    pthread_mutex_lock(&gate_lock);
    gates_opened++;
    pthread_cond_broadcast(&gate_cond);
    pthread_mutex_unlock(&gate_lock);
}

/* Waits until stream `s` has no work left. Used where the stream must finish while a gate
 * elsewhere is still closed: a stream that wrongly waited for the gate would hang the check,
 * so it fails instead, after a minute (far beyond any load). */
static void expect_finishes(cudaStream_t s) {
    double deadline = now_ms() + 60e3;
    cudaError_t status;
    while ((status = cudaStreamQuery(s)) == cudaErrorNotReady) {
        if (now_ms() > deadline) {
            fprintf(stderr, "expect_finishes: the stream waits for work held at a gate\n");
            exit(1);
        }
        usleep(1000);
    }
    OK(status);
}

static float read_float(const float *dev) {
    float value;
    OK(cudaMemcpy(&value, dev, sizeof value, cudaMemcpyDeviceToHost));
    return value;
}

/* ---- cases ---- */

/* Work on one stream runs in submission order, whatever the jitter. */
static void stream_order(void) {
    enum { N = 200 };
    int *log, *count;
    cudaStream_t s;
    OK(cudaMallocManaged((void **)&log, N * sizeof(int), cudaMemAttachGlobal));
    OK(cudaMallocManaged((void **)&count, sizeof(int), cudaMemAttachGlobal));
    *count = 0;
    OK(cudaStreamCreate(&s));
    for (int i = 0; i < N; i++) launch_append(log, count, i, s);
    OK(cudaStreamSynchronize(s));
    EXPECT(*count == N);
    for (int i = 0; i < N; i++) EXPECT(log[i] == i);
    OK(cudaStreamDestroy(s));
    printf("stream_order ok\n");
}

/* A kernel on stream B that waits on an event recorded on stream A sees A's earlier write. */
static void event_wait(void) {
    float *a, *b;
    cudaStream_t sa, sb;
    cudaEvent_t written;
    OK(cudaMalloc((void **)&a, sizeof(float)));
    OK(cudaMalloc((void **)&b, sizeof(float)));
    OK(cudaMemset(a, 0, sizeof(float)));
    OK(cudaStreamCreateWithFlags(&sa, cudaStreamNonBlocking));
    OK(cudaStreamCreateWithFlags(&sb, cudaStreamNonBlocking));
    OK(cudaEventCreateWithFlags(&written, cudaEventDisableTiming));
    OK(cudaDeviceSynchronize());
    launch_gate(sa); /* A's write happens only once the host opens the gate */
    launch_store(a, 42.0f, sa);
    OK(cudaEventRecord(written, sa));
    EXPECT_CODE(cudaEventQuery(written), cudaErrorNotReady);
    OK(cudaStreamWaitEvent(sb, written, 0));
    launch_copy(b, a, 1, sb);
    EXPECT_CODE(cudaStreamQuery(sb), cudaErrorNotReady);
    open_gate();
    OK(cudaStreamSynchronize(sb));
    EXPECT(read_float(b) == 42.0f);
    OK(cudaEventQuery(written));
    printf("event_wait ok\n");
}

/* The same exchange without the wait: a race that random stream delays (CUDA_SHIM_JITTER_US)
 * expose. Prints what stream B read: 42 if A happened to run first, 0 otherwise. */
static void event_wait_missing(void) {
    float *a, *b;
    cudaStream_t sa, sb;
    OK(cudaMalloc((void **)&a, sizeof(float)));
    OK(cudaMalloc((void **)&b, sizeof(float)));
    OK(cudaMemset(a, 0, sizeof(float)));
    OK(cudaStreamCreateWithFlags(&sa, cudaStreamNonBlocking));
    OK(cudaStreamCreateWithFlags(&sb, cudaStreamNonBlocking));
    OK(cudaDeviceSynchronize());
    launch_store(a, 42.0f, sa);
    launch_copy(b, a, 1, sb);
    OK(cudaDeviceSynchronize());
    printf("value=%g\n", read_float(b));
}

/* The legacy default stream waits for blocking streams, not for non-blocking ones, and
 * blocking streams wait for earlier legacy work. */
static void default_stream(void) {
    float *x, *y, *z;
    cudaStream_t blocking, non_blocking;
    OK(cudaMalloc((void **)&x, sizeof(float)));
    OK(cudaMalloc((void **)&y, sizeof(float)));
    OK(cudaMalloc((void **)&z, sizeof(float)));
    OK(cudaMemset(x, 0, sizeof(float)));
    OK(cudaMemset(z, 0, sizeof(float)));
    OK(cudaStreamCreate(&blocking));
    OK(cudaStreamCreateWithFlags(&non_blocking, cudaStreamNonBlocking));
    OK(cudaDeviceSynchronize());

    launch_gate(blocking);
    launch_store(x, 7.0f, blocking);
    launch_copy(y, x, 1, 0); /* legacy stream: waits for `blocking` */
    EXPECT_CODE(cudaStreamQuery(0), cudaErrorNotReady);
    open_gate();
    EXPECT(read_float(y) == 7.0f);

    launch_gate(non_blocking); /* z is written only after the copy below has run */
    launch_store(z, 9.0f, non_blocking);
    launch_copy(y, z, 1, 0); /* does not wait for `non_blocking` */
    expect_finishes(0);
    EXPECT(read_float(y) == 0.0f);
    EXPECT_CODE(cudaStreamQuery(non_blocking), cudaErrorNotReady);
    open_gate();
    OK(cudaDeviceSynchronize());
    EXPECT(read_float(z) == 9.0f);

    launch_gate(0);                    /* legacy first ... */
    launch_store(x, 11.0f, 0);
    launch_copy(y, x, 1, blocking);    /* ... then a blocking stream waits for it */
    EXPECT_CODE(cudaStreamQuery(blocking), cudaErrorNotReady);
    open_gate();
    OK(cudaStreamSynchronize(blocking));
    EXPECT(read_float(y) == 11.0f);
    printf("default_stream ok\n");
}

/* Capacity (run with CUDA_SHIM_DEVICE_MEMORY=1M): over-allocation fails with
 * cudaErrorMemoryAllocation, a non-sticky error that cudaGetLastError clears. */
static void capacity(void) {
    void *p, *q;
    size_t free_bytes, total;
    OK(cudaMemGetInfo(&free_bytes, &total));
    EXPECT(total == 1u << 20 && free_bytes == total);
    OK(cudaMalloc(&p, 768 << 10));
    EXPECT_CODE(cudaMalloc(&q, 512 << 10), cudaErrorMemoryAllocation);
    EXPECT_CODE(cudaPeekAtLastError(), cudaErrorMemoryAllocation);
    EXPECT_CODE(cudaGetLastError(), cudaErrorMemoryAllocation);
    EXPECT_CODE(cudaGetLastError(), cudaSuccess);
    OK(cudaMalloc(&q, 256 << 10));
    OK(cudaMemGetInfo(&free_bytes, &total));
    EXPECT(free_bytes == 0);
    OK(cudaFree(p));
    OK(cudaMalloc(&p, 512 << 10));
    printf("capacity ok\n");
}

/* Frees of unknown, interior or already freed pointers are cudaErrorInvalidValue;
 * cudaFree(NULL) succeeds; zero-byte cudaMalloc gives NULL. */
static void invalid_free(void) {
    void *p, *zero = (void *)1;
    int host;
    OK(cudaMalloc(&p, 4096));
    EXPECT_CODE(cudaFree(&host), cudaErrorInvalidValue);
    EXPECT_CODE(cudaFree((char *)p + 256), cudaErrorInvalidValue);
    OK(cudaFree(p));
    EXPECT_CODE(cudaFree(p), cudaErrorInvalidValue);
    OK(cudaFree(NULL));
    OK(cudaMalloc(&zero, 0));
    EXPECT(zero == NULL);
    EXPECT_CODE(cudaFreeHost(&host), cudaErrorInvalidValue);
    EXPECT_CODE(cudaMalloc(NULL, 16), cudaErrorInvalidValue);
    EXPECT_CODE(cudaStreamDestroy((cudaStream_t)&host), cudaErrorInvalidResourceHandle);
    EXPECT(strcmp(cudaGetErrorName(cudaErrorInvalidValue), "cudaErrorInvalidValue") == 0);
    EXPECT(strcmp(cudaGetErrorString(cudaErrorMemoryAllocation), "out of memory") == 0);
    EXPECT(strcmp(cudaGetErrorName((cudaError_t)12345), "unrecognized error code") == 0);
    printf("invalid_free ok\n");
}

/* A kernel reading a freed block sees the poison (NaN), not the old data. */
static void use_after_free(void) {
    enum { N = 1024 };
    float host[N], *stale, *out;
    for (int i = 0; i < N; i++) host[i] = (float)i;
    OK(cudaMalloc((void **)&stale, sizeof host));
    OK(cudaMalloc((void **)&out, sizeof host));
    OK(cudaMemcpy(stale, host, sizeof host, cudaMemcpyHostToDevice));
    OK(cudaFree(stale));
    launch_copy(out, stale, N, 0);
    OK(cudaMemcpy(host, out, sizeof host, cudaMemcpyDeviceToHost));
    for (int i = 0; i < N; i++) EXPECT(host[i] != host[i]); /* NaN */
    printf("use_after_free ok\n");
}

/* Prints the jitter digest after a fixed workload on three streams. */
static void jitter(void) {
    enum { N = 64 };
    int *log, *count;
    cudaStream_t s[3];
    struct cudaShimStats stats;
    OK(cudaMallocManaged((void **)&log, 3 * N * sizeof(int), cudaMemAttachGlobal));
    OK(cudaMallocManaged((void **)&count, 3 * sizeof(int), cudaMemAttachGlobal));
    memset(count, 0, 3 * sizeof(int));
    for (int k = 0; k < 3; k++) OK(cudaStreamCreateWithFlags(&s[k], cudaStreamNonBlocking));
    for (int i = 0; i < N; i++)
        for (int k = 0; k < 3; k++) launch_append(log + k * N, count + k, i, s[k]);
    OK(cudaDeviceSynchronize());
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < N; i++) EXPECT(log[k * N + i] == i);
    OK(cudaShimGetStats(&stats));
    printf("jitter_digest=%llu\n", stats.jitter_digest);
}

/* Counters match the program's own arithmetic. */
static void stats(void) {
    struct cudaShimStats st;
    void *a, *b, *pinned;
    char host[5000];
    memset(host, 1, sizeof host);
    OK(cudaMalloc(&a, 1000));    /* 1024 in 256-byte granules */
    OK(cudaMalloc(&b, 1 << 20)); /* 1 MiB */
    OK(cudaMallocHost(&pinned, 3000));
    OK(cudaMemcpy(a, host, 1000, cudaMemcpyHostToDevice));
    OK(cudaMemcpy(b, host, 5000, cudaMemcpyHostToDevice));
    OK(cudaMemcpy(host, b, 4000, cudaMemcpyDeviceToHost));
    OK(cudaMemcpy(b, a, 1000, cudaMemcpyDeviceToDevice));
    OK(cudaMemset(b, 0, 777));
    launch_copy((float *)b, (float *)a, 10, 0);
    launch_copy((float *)b, (float *)a, 10, 0);
    OK(cudaFree(a));
    OK(cudaDeviceSynchronize());
    OK(cudaShimGetStats(&st));
    EXPECT(st.current_device_bytes == 1 << 20);
    EXPECT(st.peak_device_bytes == (1 << 20) + 1024);
    EXPECT(st.live_device_allocations == 1);
    EXPECT(st.device_alloc_calls == 2 && st.device_free_calls == 1);
    EXPECT(st.h2d_bytes == 6000 && st.d2h_bytes == 4000 && st.d2d_bytes == 1000);
    EXPECT(st.memset_bytes == 777);
    EXPECT(st.kernel_launches == 2);
    EXPECT(st.current_pinned_bytes == 3000 && st.peak_pinned_bytes == 3000);
    printf("stats ok\n");
}

/* One allocation seen through the runtime and the driver API agrees. */
static void driver_runtime_views(void) {
    void *p;
    CUdeviceptr d, start;
    size_t size, param_offset, param_size, free_rt, total_rt, free_drv, total_drv;
    unsigned int memory_type;
    struct cudaPointerAttributes attr;
    CUcontext ctx;
    cudaFunction_t f;
    char text[32] = "driver wrote this", back[32];
    OK(cudaMalloc(&p, 3000));
    EXPECT(((uintptr_t)p & 255) == 0);
    OK(cuCtxGetCurrent(&ctx));
    EXPECT(ctx != NULL); /* the runtime made the primary context current */
    OK(cuPointerGetAttribute(&memory_type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)p + 100));
    EXPECT(memory_type == CU_MEMORYTYPE_DEVICE);
    OK(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, (CUdeviceptr)p + 100));
    OK(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, (CUdeviceptr)p + 100));
    EXPECT(start == (CUdeviceptr)p && size == 3000);
    OK(cuMemAlloc(&d, 64));
    OK(cudaPointerGetAttributes(&attr, (void *)d));
    EXPECT(attr.type == cudaMemoryTypeDevice && attr.devicePointer == (void *)d);
    OK(cuMemcpyHtoD(d, text, sizeof text));
    OK(cudaMemcpy(back, (void *)d, sizeof back, cudaMemcpyDeviceToHost));
    EXPECT(memcmp(text, back, sizeof text) == 0);
    OK(cudaMemGetInfo(&free_rt, &total_rt));
    OK(cuMemGetInfo(&free_drv, &total_drv));
    EXPECT(free_rt == free_drv && total_rt == total_drv);
    OK(cuMemFree(d));
    EXPECT_CODE(cudaFree((void *)d), cudaErrorInvalidValue);
    OK(cudaPointerGetAttributes(&attr, text));
    EXPECT(attr.type == cudaMemoryTypeUnregistered);
    OK(cudaGetFuncBySymbol(&f, (const void *)k_copy));
    OK(cuFuncGetParamInfo((CUfunction)f, 2, &param_offset, &param_size));
    EXPECT(param_offset == 16 && param_size == sizeof(size_t));
    EXPECT_CODE(cuFuncGetParamInfo((CUfunction)f, 3, &param_offset, &param_size), CUDA_ERROR_INVALID_VALUE);
    printf("driver_runtime_views ok\n");
}

/* A device fault is sticky: every later call returns it, cudaGetLastError does not clear it. */
static void sticky_error(void) {
    void *p;
    int code = cudaErrorIllegalAddress;
    void *args[] = {&code};
    OK(cudaLaunchKernel((const void *)k_fault, one, one, args, 0, 0));
    EXPECT_CODE(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
    EXPECT_CODE(cudaMalloc(&p, 16), cudaErrorIllegalAddress);
    EXPECT_CODE(cudaGetLastError(), cudaErrorIllegalAddress);
    EXPECT_CODE(cudaGetLastError(), cudaErrorIllegalAddress);
    printf("sticky_error ok\n");
}

/* Launch errors are reported by the launch, and are not sticky. */
static void launch_errors(void) {
    dim3 zero = {0, 1, 1}, huge = {2048, 1, 1};
    void *args[] = {NULL};
    EXPECT_CODE(cudaLaunchKernel((const void *)now_ms, one, one, args, 0, 0), cudaErrorInvalidDeviceFunction);
    EXPECT_CODE(cudaLaunchKernel((const void *)k_nothing, zero, one, args, 0, 0), cudaErrorInvalidConfiguration);
    EXPECT_CODE(cudaLaunchKernel((const void *)k_nothing, one, huge, args, 0, 0), cudaErrorInvalidConfiguration);
    EXPECT_CODE(cudaGetLastError(), cudaErrorInvalidConfiguration);
    EXPECT_CODE(cudaGetLastError(), cudaSuccess);
    OK(cudaDeviceSynchronize());
    printf("launch_errors ok\n");
}

/* Event timing follows simulated kernel durations; timing-disabled events cannot be timed.
 * The time between two events is at least the simulated duration of the kernel between them,
 * and at most what the host measured around them (no wall-clock threshold: the machine may be
 * loaded). */
static void event_timing(void) {
    cudaEvent_t start, stop, untimed;
    float ms;
    double opened, synchronized;
    void *args[] = {NULL};
    OK(cudaEventCreate(&start));
    OK(cudaEventCreate(&stop));
    OK(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming));
    EXPECT_CODE(cudaEventElapsedTime(&ms, start, stop), cudaErrorInvalidResourceHandle);
    launch_gate(0); /* both records complete only after the host opens the gate */
    OK(cudaEventRecord(start, 0));
    OK(cudaLaunchKernel((const void *)k_nothing, one, one, args, 0, 0)); /* 20 ms simulated */
    OK(cudaEventRecord(stop, 0));
    EXPECT_CODE(cudaEventElapsedTime(&ms, start, stop), cudaErrorNotReady);
    opened = now_ms();
    open_gate();
    OK(cudaEventSynchronize(stop));
    synchronized = now_ms();
    OK(cudaEventElapsedTime(&ms, start, stop));
    EXPECT(ms >= 19.9f);
    EXPECT(ms <= synchronized - opened + 0.001);
    OK(cudaEventRecord(untimed, 0));
    OK(cudaEventSynchronize(untimed));
    EXPECT_CODE(cudaEventElapsedTime(&ms, start, untimed), cudaErrorInvalidResourceHandle);
    OK(cudaEventDestroy(untimed));
    EXPECT_CODE(cudaEventQuery(untimed), cudaErrorInvalidResourceHandle);
    printf("event_timing ok\n");
}

/* Async copies: a pageable source is staged at the call (the caller may reuse it at once);
 * with CUDA_SHIM_H2D_GBPS=1, 8 MB take at least 8 ms. */
static void async_copies(void) {
    enum { N = 2 << 20 };
    float *host = malloc(N * sizeof(float)), *dev, first;
    cudaStream_t s;
    double t0, elapsed;
    for (int i = 0; i < N; i++) host[i] = 1.0f;
    OK(cudaMalloc((void **)&dev, N * sizeof(float)));
    OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    t0 = now_ms();
    OK(cudaMemcpyAsync(dev, host, N * sizeof(float), cudaMemcpyHostToDevice, s));
    host[0] = 2.0f;
    OK(cudaStreamSynchronize(s));
    elapsed = now_ms() - t0;
    OK(cudaMemcpy(&first, dev, sizeof first, cudaMemcpyDeviceToHost));
    EXPECT(first == 1.0f);
    EXPECT_CODE(cudaMemcpy(dev, host, 16, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
    EXPECT_CODE(cudaMemcpy(dev, host, 16, (enum cudaMemcpyKind)7), cudaErrorInvalidMemcpyDirection);
    EXPECT_CODE(cudaMemcpy(host, dev, (N + 1) * sizeof(float), cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
    printf("h2d_ms=%.1f\n", elapsed);
    free(host);
}

/* Stream-ordered allocation: the memory of cudaFreeAsync returns when the stream reaches it. */
static void async_alloc(void) {
    void *p;
    size_t before, during, after, total;
    cudaStream_t s;
    OK(cudaStreamCreate(&s));
    OK(cudaMemGetInfo(&before, &total));
    OK(cudaMallocAsync(&p, 1 << 20, s));
    launch_gate(s); /* the stream reaches the free only once the host opens the gate */
    OK(cudaFreeAsync(p, s));
    EXPECT_CODE(cudaFreeAsync(p, s), cudaErrorInvalidValue);
    OK(cudaMemGetInfo(&during, &total));
    EXPECT(during == before - (1 << 20));
    open_gate();
    OK(cudaStreamSynchronize(s));
    OK(cudaMemGetInfo(&after, &total));
    EXPECT(after == before);
    printf("async_alloc ok\n");
}

/* Managed and pinned memory as the pointer attributes describe them. */
static void memory_kinds(void) {
    float *managed, *pinned;
    struct cudaPointerAttributes attr;
    OK(cudaMallocManaged((void **)&managed, 4096, cudaMemAttachGlobal));
    managed[10] = 3.5f; /* host access */
    OK(cudaPointerGetAttributes(&attr, managed + 10));
    EXPECT(attr.type == cudaMemoryTypeManaged && attr.hostPointer == managed + 10);
    OK(cudaHostAlloc((void **)&pinned, 4096, cudaHostAllocDefault));
    OK(cudaPointerGetAttributes(&attr, pinned));
    EXPECT(attr.type == cudaMemoryTypeHost);
    OK(cudaMemcpy(pinned, managed, 4096, cudaMemcpyDefault));
    EXPECT(pinned[10] == 3.5f);
    EXPECT_CODE(cudaMallocManaged((void **)&managed, 0, cudaMemAttachGlobal), cudaErrorInvalidValue);
    EXPECT_CODE(cudaHostAlloc((void **)&pinned, 16, 0x40), cudaErrorInvalidValue);
    OK(cudaFreeHost(pinned));
    OK(cudaFree(managed));
    printf("memory_kinds ok\n");
}

/* Mapped page-locked memory (zero-copy): its device pointer is its host address (unified
 * addressing); kernels, memsets and copies use it like device memory, and the device's memory
 * does not count it. */
static void mapped_host(void) {
    float *host, *dev, *device_block;
    void *got;
    struct cudaShimStats before, after;
    const size_t n = 1024;
    OK(cudaShimGetStats(&before));
    OK(cudaHostAlloc((void **)&host, n * sizeof(float), cudaHostAllocMapped));
    OK(cudaHostGetDevicePointer((void **)&dev, host, 0));
    EXPECT(dev == host);
    OK(cudaHostGetDevicePointer(&got, host + 100, 0)); /* interior pointer */
    EXPECT(got == host + 100);
    EXPECT_CODE(cudaHostGetDevicePointer(&got, host, 1), cudaErrorInvalidValue);
    EXPECT_CODE(cudaHostGetDevicePointer(&got, &got, 0), cudaErrorInvalidValue);
    EXPECT_CODE(cudaHostGetDevicePointer(NULL, host, 0), cudaErrorInvalidValue);
    OK(cudaMemset(dev, 0, n * sizeof(float)));
    OK(cudaDeviceSynchronize());
    EXPECT(host[n - 1] == 0.0f);
    EXPECT_CODE(cudaMemset(dev + 1, 0, n * sizeof(float)), cudaErrorInvalidValue);
    launch_store(dev + 7, 2.5f, 0); /* a kernel writes through the device pointer */
    OK(cudaDeviceSynchronize());
    EXPECT(host[7] == 2.5f);
    OK(cudaMalloc((void **)&device_block, n * sizeof(float)));
    OK(cudaMemcpy(device_block, dev, n * sizeof(float), cudaMemcpyDefault));
    EXPECT(read_float(device_block + 7) == 2.5f);
    OK(cudaMemset(device_block, 0, n * sizeof(float)));
    OK(cudaMemcpy(dev, device_block, n * sizeof(float), cudaMemcpyDefault));
    EXPECT(host[7] == 0.0f);
    OK(cudaShimGetStats(&after));
    EXPECT(after.current_device_bytes - before.current_device_bytes == n * sizeof(float));
    EXPECT(after.current_pinned_bytes - before.current_pinned_bytes == n * sizeof(float));
    OK(cudaFree(device_block));
    OK(cudaFreeHost(host));
    EXPECT_CODE(cudaHostGetDevicePointer(&got, host, 0), cudaErrorInvalidValue);
    printf("mapped_host ok\n");
}

/* cudaLaunchKernelExC and the per-thread default stream variants (what code compiled with
 * --default-stream per-thread calls): stream 0 there is the calling thread's own stream. */
static void per_thread_stream(void) {
    float *a, *b, value = 5.0f, back = 0.0f;
    cudaLaunchConfig_t config = {{1, 1, 1}, {1, 1, 1}, 0, 0, NULL, 0};
    float stored = 6.0f;
    int gate;
    void *args[] = {&a, &stored}, *gate_args[] = {&gate};
    OK(cudaMalloc((void **)&a, sizeof(float)));
    OK(cudaMalloc((void **)&b, sizeof(float)));
    OK(cudaMemcpyAsync_ptsz(a, &value, sizeof value, cudaMemcpyHostToDevice, 0));
    OK(cudaStreamSynchronize_ptsz(0));
    OK(cudaMemcpy_ptds(&back, a, sizeof back, cudaMemcpyDeviceToHost));
    EXPECT(back == 5.0f);
    OK(cudaStreamCreateWithFlags(&config.stream, cudaStreamNonBlocking));
    gate = next_gate(); /* launched with cudaLaunchKernelExC: it must hold config.stream */
    OK(cudaLaunchKernelExC(&config, (const void *)k_gate, gate_args));
    OK(cudaLaunchKernelExC(&config, (const void *)k_store, args));
    EXPECT_CODE(cudaStreamQuery(config.stream), cudaErrorNotReady);
    expect_finishes(0); /* not on the legacy stream */
    open_gate();
    OK(cudaStreamSynchronize(config.stream));
    EXPECT(read_float(a) == 6.0f);
    config.stream = 0;
    stored = 7.0f;
    gate = next_gate(); /* the same on the calling thread's own stream */
    OK(cudaLaunchKernelExC_ptsz(&config, (const void *)k_gate, gate_args));
    OK(cudaLaunchKernelExC_ptsz(&config, (const void *)k_store, args));
    OK(cudaMemsetAsync_ptsz(b, 0, sizeof(float), 0));
    EXPECT_CODE(cudaStreamQuery_ptsz(0), cudaErrorNotReady);
    open_gate();
    OK(cudaStreamSynchronize_ptsz(0));
    EXPECT(read_float(a) == 7.0f && read_float(b) == 0.0f);
    EXPECT_CODE(cudaLaunchKernelExC(NULL, (const void *)k_store, args), cudaErrorInvalidValue);
    printf("per_thread_stream ok\n");
}

/* Device queries agree between runtime and driver. */
static void device_queries(void) {
    struct cudaDeviceProp prop;
    int count, value, version;
    size_t total;
    OK(cudaGetDeviceCount(&count));
    EXPECT(count == 1);
    OK(cudaGetDeviceProperties(&prop, 0));
    OK(cuDeviceTotalMem(&total, 0));
    EXPECT(prop.totalGlobalMem == total);
    OK(cudaDeviceGetAttribute(&value, cudaDevAttrMultiProcessorCount, 0));
    EXPECT(value == prop.multiProcessorCount && value > 0);
    OK(cudaDeviceGetAttribute(&value, cudaDevAttrComputeCapabilityMajor, 0));
    EXPECT(value == prop.major);
    EXPECT_CODE(cudaSetDevice(1), cudaErrorInvalidDevice);
    OK(cudaRuntimeGetVersion(&version));
    EXPECT(version == CUDART_VERSION);
    OK(cudaDriverGetVersion(&version));
    EXPECT(version >= CUDART_VERSION);
    printf("device=%s\n", prop.name);
}

static const struct {
    const char *name;
    void (*run)(void);
} cases[] = {
    {"stream_order", stream_order},
    {"event_wait", event_wait},
    {"event_wait_missing", event_wait_missing},
    {"default_stream", default_stream},
    {"capacity", capacity},
    {"invalid_free", invalid_free},
    {"use_after_free", use_after_free},
    {"jitter", jitter},
    {"stats", stats},
    {"driver_runtime_views", driver_runtime_views},
    {"sticky_error", sticky_error},
    {"launch_errors", launch_errors},
    {"event_timing", event_timing},
    {"async_copies", async_copies},
    {"async_alloc", async_alloc},
    {"memory_kinds", memory_kinds},
    {"mapped_host", mapped_host},
    {"device_queries", device_queries},
    {"per_thread_stream", per_thread_stream},
};

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s CASE\n", argv[0]);
        return 2;
    }
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (strcmp(argv[1], cases[i].name) == 0) {
            register_kernels();
            cases[i].run();
            return 0;
        }
    }
    fprintf(stderr, "unknown case %s\n", argv[1]);
    return 2;
}
