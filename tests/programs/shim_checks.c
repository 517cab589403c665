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
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#include <cuda_shim.h>
#include <dlfcn.h>
#include <pthread.h>
#include <sys/wait.h>
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
    struct cudaShimStats before, now;
    float ms;
    double opened, synchronized;
    void *args[] = {NULL};
    OK(cudaShimGetStats(&before));
    OK(cudaEventCreate(&start));
    OK(cudaEventCreate(&stop));
    OK(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming));
    OK(cudaShimGetStats(&now));
    EXPECT(now.live_events == before.live_events + 3);
    EXPECT(now.peak_live_events >= now.live_events);
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
    EXPECT_CODE(cudaEventDestroy(untimed), cudaErrorInvalidResourceHandle);
    OK(cudaShimGetStats(&now));
    EXPECT(now.live_events == before.live_events + 2); /* a second destroy counts nothing */
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
    /* A copy into pageable memory returns once done: the value is there without a sync,
     * although a 20 ms kernel runs before it on the stream. */
    void *none[] = {NULL};
    OK(cudaLaunchKernel((const void *)k_nothing, one, one, none, 0, s));
    launch_store(dev, 3.0f, s);
    OK(cudaMemcpyAsync(&first, dev, sizeof first, cudaMemcpyDeviceToHost, s));
    EXPECT(first == 3.0f);
    launch_store(dev, 4.0f, s);
    OK(cuMemcpyDtoHAsync((void *)&first, (CUdeviceptr)dev, sizeof first, (CUstream)s));
    EXPECT(first == 4.0f);
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
 * does not count it. What kernels and memsets reach of it is counted (and charged at
 * CUDA_SHIM_H2D_GBPS, as a GPU reads it over PCIe): a host kernel reaches its pointer arguments'
 * allocations from the pointer to their end. */
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
    EXPECT(after.zero_copy_bytes - before.zero_copy_bytes == (2 * n - 7) * sizeof(float));
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

/* The driver's per-thread default stream variants (what a driver-API program compiled with
 * --default-stream per-thread calls): stream 0 in a _ptsz function and the implied stream of a
 * _ptds function are the calling thread's own stream (CU_STREAM_PER_THREAD). Two threads' own
 * streams, each holding work at a gate, do not wait for each other; the legacy stream waits for
 * both. */
/* NVIDIA's cuda.h (and ours) declares the variants only under CUDA_API_PER_THREAD_DEFAULT_STREAM,
 * which would also turn every plain call of this file into one; so those used here are declared
 * as that mode declares them (tools/abi-check proves our header's declarations). */
CUresult CUDAAPI cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream);
CUresult CUDAAPI cuMemcpyDtoHAsync_v2_ptsz(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream);
CUresult CUDAAPI cuMemcpyDtoH_v2_ptds(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount);
CUresult CUDAAPI cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount);
CUresult CUDAAPI cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N);
CUresult CUDAAPI cuMemsetD32_v2_ptds(CUdeviceptr dstDevice, unsigned int ui, size_t N);
CUresult CUDAAPI cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream);
CUresult CUDAAPI cuMemsetD32Async_ptsz(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream);
CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream);
CUresult CUDAAPI cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream);
CUresult CUDAAPI cuStreamQuery_ptsz(CUstream hStream);
CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream hStream);
CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra);

struct driver_per_thread_check {
    CUfunction gate, store;
    int gate_number;      /* the gate the second thread holds its stream at */
    CUdeviceptr scratch;  /* the second thread's own memory */
    pthread_mutex_t lock; /* guards held */
    int held;             /* the second thread has finished its work and queued its gate */
};

static void *driver_per_thread_other(void *arg) {
    struct driver_per_thread_check *check = arg;
    CUdeviceptr b = check->scratch, pool_block;
    unsigned int bits = 0x40400000u; /* 3.0f */
    float host = 0.0f, stored = 4.0f;
    void *store_args[] = {&b, &stored}, *gate_args[] = {&check->gate_number};
    OK(cudaSetDevice(0));
    OK(cudaFree(NULL)); /* binds device 0's primary context to this thread */
    /* none of this waits for the gate the main thread's own stream holds */
    OK(cuMemsetD32Async_ptsz(b, bits, 1, 0));
    OK(cuMemcpyDtoH_v2_ptds(&host, b, sizeof host));
    EXPECT(host == 3.0f);
    OK(cuLaunchKernel_ptsz(check->store, 1, 1, 1, 1, 1, 1, 0, 0, store_args, NULL));
    OK(cuMemcpyDtoHAsync_v2_ptsz(&host, b, sizeof host, 0));
    OK(cuStreamSynchronize_ptsz(0));
    EXPECT(host == 4.0f);
    OK(cuMemsetD8_v2_ptds(b, 0, sizeof(float)));
    OK(cuMemAllocAsync_ptsz(&pool_block, 256, 0));
    OK(cuMemsetD8Async_ptsz(pool_block, 1, 256, 0));
    OK(cuMemFreeAsync_ptsz(pool_block, 0));
    OK(cuStreamSynchronize_ptsz(0));
    OK(cuStreamQuery_ptsz(0));
    /* now this thread's own stream holds work at a gate of its own */
    OK(cuLaunchKernel_ptsz(check->gate, 1, 1, 1, 1, 1, 1, 0, 0, gate_args, NULL));
    EXPECT_CODE(cuStreamQuery_ptsz(0), CUDA_ERROR_NOT_READY);
    pthread_mutex_lock(&check->lock);
    check->held = 1;
    pthread_mutex_unlock(&check->lock);
    OK(cuStreamSynchronize_ptsz(0)); /* until the main thread opens the gate */
    return NULL;
}

static void driver_per_thread_stream(void) {
    struct driver_per_thread_check check = {.lock = PTHREAD_MUTEX_INITIALIZER};
    CUdeviceptr a, legacy_block;
    float value = 5.0f, back = 0.0f;
    int gate, held = 0;
    void *fn, *gate_args[] = {&gate};
    CUdriverProcAddressQueryResult status;
    pthread_t thread;
    OK(cudaFree(NULL));
    OK(cudaGetFuncBySymbol((cudaFunction_t *)&check.gate, (const void *)k_gate));
    OK(cudaGetFuncBySymbol((cudaFunction_t *)&check.store, (const void *)k_store));
    OK(cuMemAlloc(&a, sizeof(float)));
    OK(cuMemAlloc(&check.scratch, sizeof(float)));
    OK(cuMemAlloc(&legacy_block, sizeof(float)));

    /* the main thread's own stream holds a copy behind gate 1 */
    gate = next_gate();
    OK(cuLaunchKernel_ptsz(check.gate, 1, 1, 1, 1, 1, 1, 0, 0, gate_args, NULL));
    OK(cuMemcpyHtoDAsync_v2_ptsz(a, &value, sizeof value, 0));
    EXPECT_CODE(cuStreamQuery_ptsz(0), CUDA_ERROR_NOT_READY);
    EXPECT_CODE(cuStreamQuery(CU_STREAM_PER_THREAD), CUDA_ERROR_NOT_READY); /* the same stream */

    /* the second thread's stream-0 work finishes meanwhile (else this fails after a minute) */
    check.gate_number = next_gate();
    OK(pthread_create(&thread, NULL, driver_per_thread_other, &check) == 0 ? cudaSuccess : cudaErrorUnknown);
    double deadline = now_ms() + 60e3;
    while (!held) {
        if (now_ms() > deadline) {
            fprintf(stderr, "driver_per_thread_stream: a thread's own stream waits for another's\n");
            exit(1);
        }
        usleep(1000);
        pthread_mutex_lock(&check.lock);
        held = check.held;
        pthread_mutex_unlock(&check.lock);
    }
    EXPECT_CODE(cuStreamQuery_ptsz(0), CUDA_ERROR_NOT_READY); /* gate 1 is still closed */

    /* gate 1 opens: the main thread's own stream finishes while the other thread's holds */
    open_gate();
    OK(cuStreamSynchronize_ptsz(0));
    OK(cuMemcpyDtoH_v2_ptds(&back, a, sizeof back));
    EXPECT(back == 5.0f);
    OK(cuMemsetD32_v2_ptds(a, 0, 1));
    OK(cuMemcpyDtoH_v2_ptds(&back, a, sizeof back));
    EXPECT(back == 0.0f);

    /* the legacy stream (0 in the legacy functions, CU_STREAM_LEGACY in the variants) waits for
     * every thread's own stream, so for gate 2 */
    OK(cuMemsetD8Async(legacy_block, 0, sizeof(float), 0));
    EXPECT_CODE(cuStreamQuery(0), CUDA_ERROR_NOT_READY);
    EXPECT_CODE(cuStreamQuery_ptsz(CU_STREAM_LEGACY), CUDA_ERROR_NOT_READY);
    OK(cuStreamQuery_ptsz(0)); /* which the main thread's own stream does not */
    open_gate();
    OK(cuStreamSynchronize(0));
    pthread_join(thread, NULL);

    /* cuGetProcAddress gives the variants with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM */
    OK(cuGetProcAddress("cuMemcpyHtoDAsync", &fn, 12090, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &status));
    EXPECT(fn == (void *)cuMemcpyHtoDAsync_v2_ptsz && status == CU_GET_PROC_ADDRESS_SUCCESS);
    OK(cuGetProcAddress("cuLaunchKernel", &fn, 12090, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &status));
    EXPECT(fn == (void *)cuLaunchKernel_ptsz);
    OK(cuGetProcAddress("cuMemcpyHtoD", &fn, 12090, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &status));
    EXPECT(fn == (void *)cuMemcpyHtoD_v2_ptds);
    OK(cuGetProcAddress("cuMemAllocAsync", &fn, 12090, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &status));
    EXPECT(fn == (void *)cuMemAllocAsync_ptsz);
    OK(cuGetProcAddress("cuLaunchKernel", &fn, 12090, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &status));
    EXPECT(fn == (void *)cuLaunchKernel);
    OK(cuGetProcAddress("cuLaunchKernel", &fn, 12090, CU_GET_PROC_ADDRESS_DEFAULT, &status));
    EXPECT(fn == (void *)cuLaunchKernel);
    OK(cuGetProcAddress("cuMemAlloc", &fn, 12090, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &status));
    EXPECT(fn == (void *)cuMemAlloc_v2); /* no variant: the legacy function */
    OK(cuGetProcAddress("cuMemcpyHtoD", &fn, 6050, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &status));
    EXPECT(fn == (void *)cuMemcpyHtoD_v2); /* the variants came with CUDA 7.0 */
    /* and the variant it gives runs on the per-thread stream */
    value = 8.0f;
    OK(cuGetProcAddress("cuMemcpyHtoDAsync", &fn, 12090, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &status));
    OK(((CUresult(*)(CUdeviceptr, const void *, size_t, CUstream))fn)(a, &value, sizeof value, 0));
    OK(cuStreamSynchronize_ptsz(0));
    EXPECT(read_float((const float *)(uintptr_t)a) == 8.0f);
    OK(cuMemFree(a));
    OK(cuMemFree(check.scratch));
    OK(cuMemFree(legacy_block));
    printf("driver_per_thread_stream ok\n");
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
    /* no profiling tool: starting and stopping collection succeed and do nothing */
    OK(cudaProfilerStart());
    OK(cudaProfilerStop());
    OK(cudaProfilerStop());
    printf("device=%s\n", prop.name);
}

/* cuGetProcAddress: the version picks the variant; a symbol that did not exist yet at that
 * version, or never, is CUDA_ERROR_NOT_FOUND with a NULL pointer and a status saying which. */
typedef CUresult (*legacy_get_proc_address_t)(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);
static void proc_address(void) {
    void *fn;
    CUdriverProcAddressQueryResult status;
    enum cudaDriverEntryPointQueryResult rt_status;
    legacy_get_proc_address_t legacy;
    float ms;
    OK(cuGetProcAddress("cuInit", &fn, 12090, CU_GET_PROC_ADDRESS_DEFAULT, &status));
    EXPECT(fn == (void *)cuInit && status == CU_GET_PROC_ADDRESS_SUCCESS);
    OK(cuGetProcAddress("cuMemAlloc", &fn, 12090, CU_GET_PROC_ADDRESS_DEFAULT, &status));
    EXPECT(fn == (void *)cuMemAlloc_v2 && status == CU_GET_PROC_ADDRESS_SUCCESS);
    OK(cuGetProcAddress("cuMemAlloc", &fn, 3020, CU_GET_PROC_ADDRESS_DEFAULT, NULL));
    EXPECT(fn == (void *)cuMemAlloc_v2);
    /* before 3.2 cuMemAlloc was the 32-bit legacy function, which the shim does not have */
    EXPECT_CODE(cuGetProcAddress("cuMemAlloc", &fn, 3010, 0, &status), CUDA_ERROR_NOT_FOUND);
    EXPECT(fn == NULL && status == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    EXPECT_CODE(cuGetProcAddress("cuFuncGetParamInfo", &fn, 12030, 0, &status), CUDA_ERROR_NOT_FOUND);
    EXPECT(fn == NULL && status == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    OK(cuGetProcAddress("cuFuncGetParamInfo", &fn, 12040, 0, &status));
    EXPECT(fn == (void *)cuFuncGetParamInfo);
    /* base names only, as on NVIDIA's driver */
    EXPECT_CODE(cuGetProcAddress("cuMemAlloc_v2", &fn, 12090, 0, &status), CUDA_ERROR_NOT_FOUND);
    EXPECT(fn == NULL && status == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    EXPECT_CODE(cuGetProcAddress("cuNoSuchFunction", &fn, 12090, 0, &status), CUDA_ERROR_NOT_FOUND);
    EXPECT(fn == NULL && status == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    /* the per-thread default stream variant with that flag, the legacy function otherwise */
    OK(cuGetProcAddress("cuMemcpyAsync", &fn, 12090, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &status));
    EXPECT(fn == (void *)cuMemcpyAsync_ptsz);
    OK(cuGetProcAddress("cuMemcpyAsync", &fn, 12090, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &status));
    EXPECT(fn == (void *)cuMemcpyAsync);
    OK(cuGetProcAddress("cuEventElapsedTime", &fn, 12070, 0, &status));
    EXPECT(fn == (void *)cuEventElapsedTime);
    OK(cuGetProcAddress("cuEventElapsedTime", &fn, 12080, 0, &status));
    EXPECT(fn == (void *)cuEventElapsedTime_v2);
    EXPECT_CODE(cuGetProcAddress(NULL, &fn, 12090, 0, &status), CUDA_ERROR_INVALID_VALUE);
    EXPECT_CODE(cuGetProcAddress("cuInit", NULL, 12090, 0, &status), CUDA_ERROR_INVALID_VALUE);
    EXPECT_CODE(cuGetProcAddress("cuInit", &fn, 0, 0, &status), CUDA_ERROR_INVALID_VALUE);
    EXPECT_CODE(cuGetProcAddress("cuInit", &fn, 12090, 4, &status), CUDA_ERROR_INVALID_VALUE);
    /* cuGetProcAddress itself: the CUDA 11.3 four-argument function below 12.0 */
    OK(cuGetProcAddress("cuGetProcAddress", &fn, 12000, 0, &status));
    EXPECT(fn == (void *)cuGetProcAddress_v2);
    OK(cuGetProcAddress("cuGetProcAddress", &fn, 11030, 0, &status));
    EXPECT(fn != NULL && fn != (void *)cuGetProcAddress_v2 && status == CU_GET_PROC_ADDRESS_SUCCESS);
    legacy = (legacy_get_proc_address_t)fn;
    OK(legacy("cuMemAlloc", &fn, 11030, CU_GET_PROC_ADDRESS_DEFAULT));
    EXPECT(fn == (void *)cuMemAlloc_v2);
    EXPECT_CODE(legacy("cuNoSuchFunction", &fn, 11030, 0), CUDA_ERROR_NOT_FOUND);
    EXPECT(fn == NULL);
    EXPECT_CODE(legacy("cuInit", NULL, 11030, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT_CODE(cuGetProcAddress("cuGetProcAddress", &fn, 11020, 0, &status), CUDA_ERROR_NOT_FOUND);
    EXPECT(fn == NULL && status == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    /* the runtime: no error for a symbol the driver does not resolve, the status says why */
    OK(cudaGetDriverEntryPoint("cuMemAlloc", &fn, cudaEnableDefault, &rt_status));
    EXPECT(fn == (void *)cuMemAlloc_v2 && rt_status == cudaDriverEntryPointSuccess);
    OK(cudaGetDriverEntryPoint("cuNoSuchFunction", &fn, cudaEnableDefault, &rt_status));
    EXPECT(fn == NULL && rt_status == cudaDriverEntryPointSymbolNotFound);
    OK(cudaGetDriverEntryPoint("cuGetProcAddress", &fn, cudaEnableLegacyStream, NULL));
    EXPECT(fn == (void *)cuGetProcAddress_v2);
    OK(cudaGetDriverEntryPointByVersion("cuGetProcAddress", &fn, 11030, cudaEnableDefault, &rt_status));
    EXPECT(fn == (void *)legacy && rt_status == cudaDriverEntryPointSuccess);
    /* exported under its name, as binaries built against CUDA 11 headers link it */
    EXPECT(dlsym(RTLD_DEFAULT, "cuGetProcAddress") == (void *)legacy);
    OK(cudaGetDriverEntryPointByVersion("cuMemAllocAsync", &fn, 11010, cudaEnableDefault, &rt_status));
    EXPECT(fn == NULL && rt_status == cudaDriverEntryPointVersionNotSufficent);
    EXPECT_CODE(cudaGetDriverEntryPoint("cuInit", NULL, cudaEnableDefault, NULL), cudaErrorInvalidValue);
    EXPECT_CODE(cudaGetDriverEntryPoint(NULL, &fn, cudaEnableDefault, NULL), cudaErrorInvalidValue);
    EXPECT_CODE(cudaGetDriverEntryPointByVersion("cuInit", &fn, 0x80000000u, cudaEnableDefault, NULL), cudaErrorInvalidValue);
    EXPECT_CODE(cudaGetDriverEntryPointByVersion("cuInit", &fn, 12090, 4, NULL), cudaErrorInvalidValue);
    EXPECT_CODE(cuEventElapsedTime_v2(&ms, NULL, NULL), CUDA_ERROR_INVALID_HANDLE); /* context bound now */
    printf("proc_address ok\n");
}

/* cuGetProcAddress at CUDA 13 versions (NVIDIA's cudaTypedefs.h): cuCtxSynchronize and
 * cuCtxGetDevice take a context from 13000, cuLaunchHostFunc a sync mode from 13010; below,
 * the CUDA 12 functions. Our CUDA 12 headers do not declare the new variants, so their types
 * are written here as cudaTypedefs.h gives them, and the driver's exports are found by name.
 * Run with two devices: a context of device 1 that is not current is queried and synchronised
 * from device 0's. */
typedef CUresult (*ctx_synchronize_v2_t)(CUcontext ctx);
typedef CUresult (*ctx_get_device_v2_t)(CUdevice *device, CUcontext ctx);
typedef CUresult (*launch_host_func_v2_t)(CUstream stream, CUhostFn fn, void *userData, unsigned int syncMode);
enum { HOST_TASK_BLOCKING = 0, HOST_TASK_SPINWAIT = 1 };

static void *proc_at(const char *name, int version, cuuint64_t flags) {
    void *fn;
    CUdriverProcAddressQueryResult status;
    OK(cuGetProcAddress(name, &fn, version, flags, &status));
    EXPECT(fn != NULL && status == CU_GET_PROC_ADDRESS_SUCCESS);
    return fn;
}

static void *driver_export(const char *name) {
    void *fn = dlsym(RTLD_DEFAULT, name);
    if (fn == NULL) {
        fprintf(stderr, "libcuda.so.1 does not export %s\n", name);
        exit(1);
    }
    return fn;
}

/* A host function that finishes late, so that a synchronisation that does not wait for it
 * sees its count unchanged. */
static void count_late(void *arg) {
    usleep(50 * 1000);
    __atomic_add_fetch((int *)arg, 1, __ATOMIC_RELEASE);
}

static void proc_address_13(void) {
    void *synchronize_v2 = driver_export("cuCtxSynchronize_v2");
    void *get_device_v2 = driver_export("cuCtxGetDevice_v2");
    void *host_func_v2 = driver_export("cuLaunchHostFunc_v2");
    const cuuint64_t per_thread = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    int driver;
    OK(cuDriverGetVersion(&driver));
    if (driver < 13000) {
        /* A CUDA 12 driver has no CUDA 13 variant: asked for a later version, it serves its
         * newest. */
        EXPECT(proc_at("cuCtxSynchronize", 13050, 0) == (void *)cuCtxSynchronize);
        EXPECT(proc_at("cuCtxGetDevice", 13050, 0) == (void *)cuCtxGetDevice);
        EXPECT(proc_at("cuLaunchHostFunc", 13050, 0) == (void *)cuLaunchHostFunc);
        EXPECT(proc_at("cuLaunchHostFunc", 13050, per_thread) ==
               driver_export("cuLaunchHostFunc_ptsz"));
        printf("proc_address_13 ok (driver %d)\n", driver);
        return;
    }
    EXPECT(proc_at("cuCtxSynchronize", 12090, 0) == (void *)cuCtxSynchronize);
    EXPECT(proc_at("cuCtxSynchronize", 13000, 0) == synchronize_v2);
    EXPECT(proc_at("cuCtxSynchronize", 13050, 0) == synchronize_v2);
    EXPECT(proc_at("cuCtxGetDevice", 12090, 0) == (void *)cuCtxGetDevice);
    EXPECT(proc_at("cuCtxGetDevice", 13000, 0) == get_device_v2);
    EXPECT(proc_at("cuLaunchHostFunc", 12090, 0) == (void *)cuLaunchHostFunc);
    EXPECT(proc_at("cuLaunchHostFunc", 13000, 0) == (void *)cuLaunchHostFunc);
    EXPECT(proc_at("cuLaunchHostFunc", 13010, 0) == host_func_v2);
    EXPECT(proc_at("cuLaunchHostFunc", 13000, per_thread) == driver_export("cuLaunchHostFunc_ptsz"));
    EXPECT(proc_at("cuLaunchHostFunc", 13010, per_thread) == driver_export("cuLaunchHostFunc_v2_ptsz"));

    ctx_synchronize_v2_t synchronize = (ctx_synchronize_v2_t)synchronize_v2;
    ctx_get_device_v2_t get_device = (ctx_get_device_v2_t)get_device_v2;
    launch_host_func_v2_t host_func = (launch_host_func_v2_t)host_func_v2;
    CUcontext primary, other;
    CUdevice device;
    CUstream stream;
    int calls = 0;
    OK(cuInit(0));
    OK(cuDevicePrimaryCtxRetain(&primary, 0));
    OK(cuCtxSetCurrent(primary));
    OK(cuCtxCreate(&other, 0, 1));
    OK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    EXPECT_CODE(host_func(stream, count_late, &calls, 2), CUDA_ERROR_INVALID_VALUE);
    EXPECT_CODE(host_func(stream, NULL, &calls, HOST_TASK_BLOCKING), CUDA_ERROR_INVALID_VALUE);
    OK(host_func(stream, count_late, &calls, HOST_TASK_BLOCKING));
    OK(host_func(stream, count_late, &calls, HOST_TASK_SPINWAIT));
    OK(cuCtxPopCurrent(NULL)); /* device 0's primary context is current again */
    OK(get_device(&device, NULL));
    EXPECT(device == 0);
    OK(get_device(&device, other));
    EXPECT(device == 1);
    EXPECT_CODE(get_device(NULL, other), CUDA_ERROR_INVALID_VALUE);
    OK(synchronize(other)); /* waits for a context that is not current */
    EXPECT(__atomic_load_n(&calls, __ATOMIC_ACQUIRE) == 2);
    OK(synchronize(NULL));
    OK(cuCtxSetCurrent(NULL)); /* nothing current: NULL names no context */
    EXPECT_CODE(get_device(&device, NULL), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_CODE(synchronize(NULL), CUDA_ERROR_INVALID_CONTEXT);
    OK(cuCtxDestroy(other));
    EXPECT_CODE(get_device(&device, other), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_CODE(synchronize(other), CUDA_ERROR_INVALID_CONTEXT);
    printf("proc_address_13 ok\n");
}

/* cuMemAllocPitch, 2D copies, 16/32-bit and 2D memsets, the asynchronous and peer copies and
 * the default memory pool, through the driver API. */
static void copies_2d(void) {
    enum { W = 64, H = 8 };
    CUdeviceptr d, d2, pooled;
    size_t pitch, size;
    int texture_alignment;
    unsigned char host[W * H], back[W * H];
    float f[20];
    unsigned short halves[4];
    CUDA_MEMCPY2D c;
    CUstream s;
    CUcontext ctx;
    CUmemoryPool pool;
    OK(cudaFree(NULL)); /* binds the primary context to this thread */
    OK(cuCtxGetCurrent(&ctx));
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    OK(cuDeviceGetAttribute(&texture_alignment, CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT, 0));
    OK(cuMemAllocPitch(&d, &pitch, 100, H, 4));
    EXPECT(pitch == (size_t)texture_alignment && pitch == 512 && d % 256 == 0);
    OK(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, d));
    EXPECT(size == pitch * H);
    OK(cuMemAllocPitch(&d2, &pitch, 513, 2, 16));
    EXPECT(pitch == 1024);
    OK(cuMemFree(d2));
    EXPECT_CODE(cuMemAllocPitch(&d2, &pitch, 100, H, 2), CUDA_ERROR_INVALID_VALUE);
    EXPECT_CODE(cuMemAllocPitch(&d2, &pitch, 0, H, 4), CUDA_ERROR_INVALID_VALUE);
    EXPECT_CODE(cuMemAllocPitch(&d2, NULL, 100, H, 4), CUDA_ERROR_INVALID_VALUE);
    pitch = 512;

    /* host (pitch W) -> device (pitch 512), the padding of each row untouched */
    for (int i = 0; i < W * H; i++) host[i] = (unsigned char)i;
    OK(cuMemsetD8(d, 0xAB, pitch * H));
    memset(&c, 0, sizeof c);
    c.srcMemoryType = CU_MEMORYTYPE_HOST, c.srcHost = host, c.srcPitch = W;
    c.dstMemoryType = CU_MEMORYTYPE_DEVICE, c.dstDevice = d, c.dstPitch = pitch;
    c.WidthInBytes = W, c.Height = H;
    OK(cuMemcpy2D(&c));
    OK(cuMemcpyDtoH(back, d + 3 * pitch, W + 1));
    EXPECT(memcmp(back, host + 3 * W, W) == 0 && back[W] == 0xAB);
    /* device (x 8, y 2) -> host, 16 x 3, unaligned variant */
    memset(&c, 0, sizeof c);
    c.srcXInBytes = 8, c.srcY = 2, c.srcMemoryType = CU_MEMORYTYPE_DEVICE, c.srcDevice = d, c.srcPitch = pitch;
    c.dstMemoryType = CU_MEMORYTYPE_UNIFIED, c.dstDevice = (CUdeviceptr)back, c.dstPitch = 16;
    c.WidthInBytes = 16, c.Height = 3;
    memset(back, 0, sizeof back);
    OK(cuMemcpy2DUnaligned(&c));
    for (int r = 0; r < 3; r++) EXPECT(memcmp(back + 16 * r, host + (2 + r) * W + 8, 16) == 0);
    /* asynchronous, from pageable memory: staged at the call */
    memset(&c, 0, sizeof c);
    c.srcMemoryType = CU_MEMORYTYPE_HOST, c.srcHost = host, c.srcPitch = W;
    c.dstMemoryType = CU_MEMORYTYPE_DEVICE, c.dstDevice = d + pitch, c.dstPitch = pitch;
    c.WidthInBytes = W, c.Height = 2;
    OK(cuMemcpy2DAsync(&c, s));
    host[W] = 0xEE;
    OK(cuStreamSynchronize(s));
    OK(cuMemcpyDtoH(back, d + 2 * pitch, 1));
    EXPECT(back[0] == (unsigned char)W);
    /* errors */
    c.Height = H;
    EXPECT_CODE(cuMemcpy2D(&c), CUDA_ERROR_INVALID_VALUE); /* rows past the allocation */
    c.Height = 2, c.srcPitch = W - 1;
    EXPECT_CODE(cuMemcpy2D(&c), CUDA_ERROR_INVALID_VALUE); /* pitch < width */
    c.srcPitch = W, c.srcMemoryType = CU_MEMORYTYPE_ARRAY;
    EXPECT_CODE(cuMemcpy2D(&c), CUDA_ERROR_INVALID_VALUE); /* no arrays on the shim */
    c.srcMemoryType = CU_MEMORYTYPE_DEVICE, c.srcDevice = (CUdeviceptr)host;
    EXPECT_CODE(cuMemcpy2D(&c), CUDA_ERROR_INVALID_VALUE); /* pageable memory is no device memory */
    c.srcMemoryType = CU_MEMORYTYPE_HOST, c.srcHost = (const void *)d;
    EXPECT_CODE(cuMemcpy2D(&c), CUDA_ERROR_INVALID_VALUE); /* device memory is no host memory */
    EXPECT_CODE(cuMemcpy2D(NULL), CUDA_ERROR_INVALID_VALUE);

    /* 16/32-bit and 2D memsets */
    OK(cuMemsetD32(d, 0x3f800000u, 20)); /* 1.0f */
    OK(cuMemcpyDtoH(f, d, sizeof f));
    EXPECT(f[0] == 1.0f && f[19] == 1.0f);
    OK(cuMemsetD8(d, 0, pitch * H));
    OK(cuMemsetD2D32(d, pitch, 0x40000000u, 16, H)); /* 2.0f, 16 per row */
    OK(cuMemcpyDtoH(f, d + 5 * pitch, 17 * sizeof(float)));
    EXPECT(f[0] == 2.0f && f[15] == 2.0f && f[16] == 0.0f);
    OK(cuMemsetD2D16Async(d + 2, pitch, 0x1234, 2, 2, s));
    OK(cuMemsetD16Async(d + pitch + 2, 0x5678, 1, s));
    OK(cuStreamSynchronize(s));
    OK(cuMemcpyDtoH(halves, d + pitch, sizeof halves));
    EXPECT(halves[1] == 0x5678 && halves[2] == 0x1234 && halves[3] == 0x4000);
    OK(cuMemsetD2D8Async(d, pitch, 7, 3, 2, s));
    OK(cuMemsetD32Async(d + 4, 9, 1, s));
    OK(cuStreamSynchronize(s));
    OK(cuMemcpyDtoH(back, d, 8));
    EXPECT(back[0] == 7 && back[2] == 7 && back[4] == 9);
    OK(cuMemsetD16(d, 1, 1));
    OK(cuMemsetD2D8(d, pitch, 1, 1, 1));
    OK(cuMemsetD2D16(d, pitch, 1, 1, 1));
    OK(cuCtxSynchronize());
    EXPECT_CODE(cuMemsetD16(d + 1, 0, 4), CUDA_ERROR_INVALID_VALUE); /* misaligned */
    EXPECT_CODE(cuMemsetD32(d + 2, 0, 4), CUDA_ERROR_INVALID_VALUE);
    EXPECT_CODE(cuMemsetD2D32(d, 6, 0, 2, 2), CUDA_ERROR_INVALID_VALUE); /* pitch < row */
    EXPECT_CODE(cuMemsetD2D8(d, pitch, 0, 16, H + 1), CUDA_ERROR_INVALID_VALUE); /* past the end */
    EXPECT_CODE(cuMemsetD32Async(d, 0, 4, (CUstream)0x1234), CUDA_ERROR_INVALID_HANDLE);

    /* asynchronous and peer copies (one device: the peer context is the primary one) */
    OK(cuMemcpyHtoDAsync(d, host, W, s));
    OK(cuMemcpyDtoDAsync(d + pitch, d, W, s));
    OK(cuMemcpyDtoHAsync(back, d + pitch, W, s));
    OK(cuStreamSynchronize(s));
    EXPECT(memcmp(back, host, W) == 0);
    EXPECT_CODE(cuMemcpyDtoHAsync(back, (CUdeviceptr)host, W, s), CUDA_ERROR_INVALID_VALUE);
    EXPECT_CODE(cuMemcpyHtoDAsync(d, host, pitch * H + 1, s), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemcpyPeer(d + 2 * pitch, ctx, d, ctx, W));
    OK(cuMemcpyPeerAsync(d + 3 * pitch, ctx, d + 2 * pitch, ctx, W, s));
    OK(cuStreamSynchronize(s));
    OK(cuCtxSynchronize());
    OK(cuMemcpyDtoH(back, d + 3 * pitch, W));
    EXPECT(memcmp(back, host, W) == 0);
    EXPECT_CODE(cuMemcpyPeer(d, (CUcontext)0x10, d + pitch, ctx, W), CUDA_ERROR_INVALID_CONTEXT);

    /* the default pool */
    OK(cuDeviceGetDefaultMemPool(&pool, 0));
    EXPECT(pool != NULL);
    EXPECT_CODE(cuDeviceGetDefaultMemPool(&pool, 1), CUDA_ERROR_INVALID_DEVICE);
    OK(cuMemAllocFromPoolAsync(&pooled, 1000, pool, s));
    OK(cuMemsetD8Async(pooled, 1, 1000, s));
    OK(cuMemFreeAsync(pooled, s));
    EXPECT_CODE(cuMemAllocFromPoolAsync(&pooled, 1000, (CUmemoryPool)ctx, s), CUDA_ERROR_INVALID_VALUE);
    EXPECT_CODE(cuMemAllocFromPoolAsync(&pooled, 0, pool, s), CUDA_ERROR_INVALID_VALUE);
    OK(cuStreamSynchronize(s));
    OK(cuMemFree(d));
    OK(cuStreamDestroy(s));
    printf("copies_2d ok\n");
}

/* cuLaunchKernelEx and cuLaunchCooperativeKernel; the runtime's view of the attributes. */
static void launch_variants(void) {
    float *a, value = 3.0f;
    CUfunction f;
    int cooperative, sms, per_sm, pitch_alignment;
    struct cudaDeviceProp prop;
    void *args[] = {&a, &value};
    CUlaunchConfig config = {1, 1, 1, 32, 1, 1, 0, NULL, NULL, 0};
    OK(cudaMalloc((void **)&a, sizeof(float)));
    OK(cudaGetFuncBySymbol((cudaFunction_t *)&f, (const void *)k_store));
    OK(cuLaunchKernelEx(&config, f, args, NULL));
    EXPECT(read_float(a) == 3.0f);
    config.numAttrs = 1; /* attributes without a list */
    EXPECT_CODE(cuLaunchKernelEx(&config, f, args, NULL), CUDA_ERROR_INVALID_VALUE);
    config.numAttrs = 0, config.gridDimY = 0;
    EXPECT_CODE(cuLaunchKernelEx(&config, f, args, NULL), CUDA_ERROR_INVALID_VALUE);
    EXPECT_CODE(cuLaunchKernelEx(NULL, f, args, NULL), CUDA_ERROR_INVALID_VALUE);

    OK(cuDeviceGetAttribute(&cooperative, CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, 0));
    OK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0));
    OK(cuDeviceGetAttribute(&per_sm, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, 0));
    OK(cuDeviceGetAttribute(&pitch_alignment, CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT, 0));
    OK(cudaGetDeviceProperties(&prop, 0));
    EXPECT(cooperative == 1 && prop.cooperativeLaunch == cooperative);
    EXPECT(prop.texturePitchAlignment == (size_t)pitch_alignment && pitch_alignment == 32);
    value = 4.0f; /* 256 threads a block: per_sm / 256 blocks per SM can be resident */
    OK(cuLaunchCooperativeKernel(f, (unsigned)(sms * (per_sm / 256)), 1, 1, 256, 1, 1, 0, NULL, args));
    EXPECT(read_float(a) == 4.0f);
    EXPECT_CODE(cuLaunchCooperativeKernel(f, (unsigned)(sms * (per_sm / 256)) + 1, 1, 1, 256, 1, 1, 0, NULL, args),
                CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
    EXPECT_CODE(cuLaunchCooperativeKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
    EXPECT_CODE(cuLaunchCooperativeKernel(f, 1, 1, 1, 2048, 1, 1, 0, NULL, args), CUDA_ERROR_INVALID_VALUE);
    OK(cudaFree(a));
    printf("launch_variants ok\n");
}

/* Virtual memory management: physical memory counts against the device's capacity from
 * cuMemCreate until it is released and unmapped; a mapped range is usable by copies, memsets
 * and kernels only after cuMemSetAccess; each mapping is an allocation range of its own. */
static void virtual_memory(void) {
    CUmemAllocationProp prop;
    CUmemAccessDesc access;
    CUmemGenericAllocationHandle h1, h2, h3;
    CUdeviceptr va, start;
    size_t gran, size, free_before, free_now, total;
    struct cudaShimStats before, now;
    struct cudaPointerAttributes attr;
    unsigned int memory_type;
    int supported;
    float values[4] = {1.0f, 2.0f, 3.0f, 4.0f}, back[4];
    OK(cudaFree(NULL)); /* binds the primary context to this thread */
    OK(cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0));
    EXPECT(supported == 1);
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    OK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    EXPECT(gran == 2 << 20);
    OK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    EXPECT(gran == 2 << 20);
    EXPECT_CODE(cuMemGetAllocationGranularity(&gran, &prop, (CUmemAllocationGranularity_flags)2), CUDA_ERROR_INVALID_VALUE);
    EXPECT_CODE(cuMemGetAllocationGranularity(&gran, NULL, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_ERROR_INVALID_VALUE);

    OK(cudaShimGetStats(&before));
    OK(cuMemGetInfo(&free_before, &total));
    OK(cuMemCreate(&h1, gran, &prop, 0));
    OK(cuMemCreate(&h2, gran, &prop, 0));
    OK(cudaShimGetStats(&now));
    EXPECT(now.current_device_bytes - before.current_device_bytes == 2 * gran);
    EXPECT(now.peak_device_bytes >= now.current_device_bytes);
    OK(cuMemGetInfo(&free_now, &total));
    EXPECT(free_before - free_now == 2 * gran);
    EXPECT_CODE(cuMemCreate(&h3, (free_now / gran + 1) * gran, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
    EXPECT_CODE(cuMemCreate(&h3, gran + 1, &prop, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT_CODE(cuMemCreate(&h3, gran, &prop, 1), CUDA_ERROR_INVALID_VALUE);
    prop.location.id = 1;
    EXPECT_CODE(cuMemCreate(&h3, gran, &prop, 0), CUDA_ERROR_INVALID_DEVICE);
    prop.location.id = 0, prop.type = CU_MEM_ALLOCATION_TYPE_INVALID;
    EXPECT_CODE(cuMemCreate(&h3, gran, &prop, 0), CUDA_ERROR_INVALID_VALUE);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED, prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    EXPECT_CODE(cuMemCreate(&h3, gran, &prop, 0), CUDA_ERROR_NOT_SUPPORTED);
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;

    OK(cuMemAddressReserve(&va, 4 * gran, 0, 0, 0));
    EXPECT(va != 0 && va % gran == 0);
    EXPECT_CODE(cuMemAddressReserve(&start, gran + 4096, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemMap(va, gran, 0, h1, 0));
    OK(cuMemMap(va + gran, gran, 0, h2, 0));
    EXPECT_CODE(cuMemMap(va, gran, 0, h2, 0), CUDA_ERROR_INVALID_VALUE);               /* mapped */
    EXPECT_CODE(cuMemMap(va + 2 * gran, gran, gran, h1, 0), CUDA_ERROR_INVALID_VALUE); /* offset */
    EXPECT_CODE(cuMemMap(va + 2 * gran + 4096, gran, 0, h1, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT_CODE(cuMemMap(va + 2 * gran, gran, 0, h2 + 1000, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT_CODE(cuMemMap(va + 3 * gran, 2 * gran, 0, h1, 0), CUDA_ERROR_INVALID_VALUE); /* past it */

    /* mapped but not accessible yet */
    EXPECT_CODE(cuMemcpyHtoD(va, values, sizeof values), CUDA_ERROR_INVALID_VALUE);
    EXPECT_CODE(cuMemsetD8(va, 0, 16), CUDA_ERROR_INVALID_VALUE);
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    EXPECT_CODE(cuMemSetAccess(va, 3 * gran, &access, 1), CUDA_ERROR_INVALID_VALUE); /* not all mapped */
    EXPECT_CODE(cuMemSetAccess(va, gran, &access, 0), CUDA_ERROR_INVALID_VALUE);
    access.location.id = 1;
    EXPECT_CODE(cuMemSetAccess(va, gran, &access, 1), CUDA_ERROR_INVALID_DEVICE);
    access.location.id = 0;
    OK(cuMemSetAccess(va, 2 * gran, &access, 1));

    /* copies, memsets and kernels, one copy across both mappings */
    OK(cuMemcpyHtoD(va + gran - 8, values, sizeof values));
    OK(cuMemcpyDtoH(back, va + gran - 8, sizeof back));
    EXPECT(memcmp(back, values, sizeof back) == 0);
    OK(cuMemsetD32(va, 0x3f800000u, 4));
    launch_store((float *)va + 1, 9.0f, 0);
    OK(cudaMemcpy(back, (void *)va, sizeof back, cudaMemcpyDeviceToHost));
    EXPECT(back[0] == 1.0f && back[1] == 9.0f && back[3] == 1.0f);
    EXPECT_CODE(cuMemcpyHtoD(va + 2 * gran - 8, values, sizeof values), CUDA_ERROR_INVALID_VALUE);

    /* each mapping is an allocation range */
    OK(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, va + gran + 100));
    OK(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, va + gran + 100));
    EXPECT(start == va + gran && size == gran);
    OK(cuPointerGetAttribute(&memory_type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, va));
    EXPECT(memory_type == CU_MEMORYTYPE_DEVICE);
    OK(cudaPointerGetAttributes(&attr, (void *)(va + 16)));
    EXPECT(attr.type == cudaMemoryTypeDevice);
    EXPECT_CODE(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, va + 3 * gran),
                CUDA_ERROR_INVALID_VALUE); /* reserved, not mapped */
    EXPECT_CODE(cuMemFree(va), CUDA_ERROR_INVALID_VALUE);

    /* read-only access */
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READ;
    OK(cuMemSetAccess(va + gran, gran, &access, 1));
    EXPECT_CODE(cuMemcpyHtoD(va + gran, values, sizeof values), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemcpyDtoH(back, va + gran, sizeof back));
    EXPECT(back[0] == 3.0f);

    /* released memory returns to the device when its last mapping goes */
    EXPECT_CODE(cuMemAddressFree(va, 4 * gran), CUDA_ERROR_INVALID_VALUE); /* still mapped */
    OK(cuMemRelease(h1));
    OK(cuMemRelease(h2));
    EXPECT_CODE(cuMemRelease(h1), CUDA_ERROR_INVALID_VALUE);
    OK(cudaShimGetStats(&now));
    EXPECT(now.current_device_bytes - before.current_device_bytes == 2 * gran);
    EXPECT_CODE(cuMemUnmap(va, gran + 4096), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemUnmap(va, 2 * gran));
    OK(cudaShimGetStats(&now));
    EXPECT(now.current_device_bytes == before.current_device_bytes);
    OK(cuMemGetInfo(&free_now, &total));
    EXPECT(free_now == free_before);
    EXPECT_CODE(cuMemcpyDtoH(back, va, sizeof back), CUDA_ERROR_INVALID_VALUE);
    EXPECT_CODE(cuMemAddressFree(va, 2 * gran), CUDA_ERROR_INVALID_VALUE); /* not the reserved size */
    OK(cuMemAddressFree(va, 4 * gran));
    EXPECT_CODE(cuMemAddressFree(va, 4 * gran), CUDA_ERROR_INVALID_VALUE);
    printf("virtual_memory ok\n");
}

/* ---- several devices (run with CUDA_SHIM_DEVICES=2 CUDA_SHIM_DEVICE_MEMORY=64M,32M) ---- */

#define MIB (1ull << 20)

/* What a second host thread sees: it starts on device 0, and its cudaSetDevice changes only its
 * own current device. */
struct thread_check {
    int device_at_start, device_after_set;
    void *allocated;
};

static void *other_thread(void *arg) {
    struct thread_check *check = arg;
    OK(cudaGetDevice(&check->device_at_start));
    OK(cudaSetDevice(1));
    OK(cudaGetDevice(&check->device_after_set));
    OK(cudaMalloc(&check->allocated, 1000));
    return NULL;
}

/* Devices, names, capacities, and the current device of each host thread. */
static void multi_device_queries(void) {
    struct cudaDeviceProp p0, p1;
    struct cudaShimStats st;
    struct thread_check check;
    struct cudaPointerAttributes attr;
    pthread_t thread;
    char name0[64], name1[64];
    size_t total, free_bytes;
    int count, device, bus0, bus1;
    CUdevice dev;
    CUcontext ctx0, ctx1, popped;

    OK(cudaGetDeviceCount(&count));
    EXPECT(count == 2);
    OK(cuDeviceGetCount(&count));
    EXPECT(count == 2);
    OK(cuDeviceGet(&dev, 1));
    EXPECT(dev == 1);
    EXPECT_CODE(cuDeviceGet(&dev, 2), CUDA_ERROR_INVALID_DEVICE);
    EXPECT_CODE(cuDeviceGet(&dev, -1), CUDA_ERROR_INVALID_DEVICE);
    OK(cuDeviceGetName(name0, sizeof name0, 0));
    OK(cuDeviceGetName(name1, sizeof name1, 1));
    EXPECT(strcmp(name0, name1) != 0);
    EXPECT_CODE(cuDeviceGetName(name1, sizeof name1, 2), CUDA_ERROR_INVALID_DEVICE);
    OK(cuDeviceTotalMem(&total, 0));
    EXPECT(total == 64 * MIB);
    OK(cuDeviceTotalMem(&total, 1));
    EXPECT(total == 32 * MIB);
    EXPECT_CODE(cuDeviceTotalMem(&total, 2), CUDA_ERROR_INVALID_DEVICE);
    OK(cuDeviceGetAttribute(&bus0, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 0));
    OK(cuDeviceGetAttribute(&bus1, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 1));
    EXPECT(bus0 != bus1);
    EXPECT_CODE(cuDeviceGetAttribute(&bus1, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 2), CUDA_ERROR_INVALID_DEVICE);
    OK(cudaGetDeviceProperties(&p0, 0));
    OK(cudaGetDeviceProperties(&p1, 1));
    EXPECT(p0.totalGlobalMem == 64 * MIB && p1.totalGlobalMem == 32 * MIB);
    EXPECT(strcmp(p0.name, name0) == 0 && strcmp(p1.name, name1) == 0);
    EXPECT(p0.pciBusID == bus0 && p1.pciBusID == bus1);
    EXPECT(p1.unifiedAddressing == 1);
    EXPECT_CODE(cudaGetDeviceProperties(&p1, 2), cudaErrorInvalidDevice);
    EXPECT_CODE(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, 2), cudaErrorInvalidDevice);
    EXPECT_CODE(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, -1), cudaErrorInvalidDevice);
    OK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, 1));
    EXPECT(count == p1.multiProcessorCount);

    /* the current device: 0 first; cudaSetDevice, the driver's context stack */
    OK(cudaGetDevice(&device));
    EXPECT(device == 0);
    OK(cudaMemGetInfo(&free_bytes, &total));
    EXPECT(total == 64 * MIB);
    EXPECT_CODE(cudaSetDevice(2), cudaErrorInvalidDevice);
    EXPECT_CODE(cudaSetDevice(-1), cudaErrorInvalidDevice);
    OK(cudaGetDevice(&device));
    EXPECT(device == 0);
    OK(cudaSetDevice(1));
    OK(cudaGetDevice(&device));
    EXPECT(device == 1);
    OK(cuCtxGetDevice(&dev));
    EXPECT(dev == 1);
    OK(cudaMemGetInfo(&free_bytes, &total));
    EXPECT(total == 32 * MIB && free_bytes == 32 * MIB);
    OK(cuMemGetInfo(&free_bytes, &total));
    EXPECT(total == 32 * MIB);
    OK(cudaShimGetStats(&st));
    EXPECT(st.capacity_bytes == 32 * MIB);
    OK(cuDevicePrimaryCtxRetain(&ctx0, 0));
    OK(cuDevicePrimaryCtxRetain(&ctx1, 1));
    EXPECT(ctx0 != ctx1);
    EXPECT_CODE(cuDevicePrimaryCtxRetain(&ctx1, 2), CUDA_ERROR_INVALID_DEVICE);
    OK(cuCtxGetCurrent(&popped));
    EXPECT(popped == ctx1);
    OK(cuCtxPushCurrent(ctx0));
    OK(cuCtxGetDevice(&dev));
    EXPECT(dev == 0);
    OK(cudaGetDevice(&device)); /* the runtime follows the driver's current context */
    EXPECT(device == 0);
    OK(cuCtxPopCurrent(&popped));
    EXPECT(popped == ctx0);
    OK(cuCtxGetDevice(&dev));
    EXPECT(dev == 1);
    OK(cuCtxPopCurrent(&popped));
    EXPECT(popped == ctx1);
    EXPECT_CODE(cuCtxPopCurrent(&popped), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_CODE(cuCtxGetDevice(&dev), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_CODE(cuCtxPushCurrent((CUcontext)0x10), CUDA_ERROR_INVALID_CONTEXT);
    OK(cudaGetDevice(&device)); /* no context: the runtime binds the thread's device again */
    EXPECT(device == 1);

    /* a second host thread starts on device 0; its cudaSetDevice is its own */
    OK(cudaSetDevice(0));
    OK(pthread_create(&thread, NULL, other_thread, &check) == 0 ? cudaSuccess : cudaErrorUnknown);
    pthread_join(thread, NULL);
    EXPECT(check.device_at_start == 0 && check.device_after_set == 1);
    OK(cudaGetDevice(&device));
    EXPECT(device == 0);
    OK(cudaPointerGetAttributes(&attr, check.allocated));
    EXPECT(attr.type == cudaMemoryTypeDevice && attr.device == 1);
    OK(cudaFree(check.allocated)); /* another device's memory, freed from device 0 */
    OK(cudaSetDevice(1));
    OK(cudaShimGetStats(&st));
    EXPECT(st.current_device_bytes == 0 && st.device_alloc_calls == 1 && st.device_free_calls == 1);
    OK(cudaSetDevice(0));
    OK(cudaShimGetStats(&st));
    EXPECT(st.capacity_bytes == 64 * MIB && st.device_alloc_calls == 0);
    printf("multi_device_queries ok\n");
}

/* Each device has its own capacity and address range; pointers tell their device. */
static void multi_device_memory(void) {
    struct cudaPointerAttributes attr;
    struct cudaShimStats st;
    void *a0, *a1, *big0, *extra, *pinned, *async1;
    CUdeviceptr start;
    CUcontext ctx, ctx1;
    CUmemoryPool pool0, pool1;
    cudaStream_t s1;
    size_t size;
    int ordinal;

    OK(cudaSetDevice(1));
    OK(cudaMalloc(&a1, 32 * MIB)); /* all of device 1 */
    EXPECT_CODE(cudaMalloc(&extra, 256), cudaErrorMemoryAllocation);
    OK(cudaSetDevice(0));
    OK(cudaMalloc(&a0, 1000));
    OK(cudaMalloc(&big0, 40 * MIB)); /* device 0 is not full */
    EXPECT((uintptr_t)a0 + 1000 <= (uintptr_t)a1 || (uintptr_t)a1 + 32 * MIB <= (uintptr_t)a0);
    OK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, (CUdeviceptr)a1 + 5));
    EXPECT(ordinal == 1);
    OK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, (CUdeviceptr)a0));
    EXPECT(ordinal == 0);
    OK(cuPointerGetAttribute(&ctx, CU_POINTER_ATTRIBUTE_CONTEXT, (CUdeviceptr)a1));
    OK(cuDevicePrimaryCtxRetain(&ctx1, 1));
    EXPECT(ctx == ctx1);
    OK(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, (CUdeviceptr)a1 + 100));
    OK(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, (CUdeviceptr)a1 + 100));
    EXPECT(start == (CUdeviceptr)a1 && size == 32 * MIB);
    OK(cudaPointerGetAttributes(&attr, a1));
    /* no peer access from device 0: no device pointer for it there */
    EXPECT(attr.type == cudaMemoryTypeDevice && attr.device == 1 && attr.devicePointer == NULL);
    OK(cudaPointerGetAttributes(&attr, a0));
    EXPECT(attr.device == 0 && attr.devicePointer == a0);
    OK(cudaPointerGetAttributes(&attr, &attr));
    EXPECT(attr.type == cudaMemoryTypeUnregistered && attr.device == cudaInvalidDeviceId);
    OK(cudaShimGetStats(&st));
    EXPECT(st.current_device_bytes == 1024 + 40 * MIB && st.peak_device_bytes == 1024 + 40 * MIB);

    /* stream-ordered allocation: from the stream's device; each device has its own pool */
    OK(cudaSetDevice(1));
    OK(cudaFree(a1)); /* device 1's own memory again */
    OK(cudaStreamCreate(&s1));
    OK(cudaSetDevice(0));
    OK(cudaMallocAsync(&async1, 4096, s1));
    OK(cudaPointerGetAttributes(&attr, async1));
    EXPECT(attr.device == 1);
    OK(cudaFreeAsync(async1, s1));
    OK(cudaStreamSynchronize(s1));
    OK(cuDeviceGetDefaultMemPool(&pool0, 0));
    OK(cuDeviceGetDefaultMemPool(&pool1, 1));
    EXPECT(pool0 != pool1);
    EXPECT_CODE(cuDeviceGetDefaultMemPool(&pool1, 2), CUDA_ERROR_INVALID_DEVICE);
    OK(cuMemAllocFromPoolAsync((CUdeviceptr *)&async1, 4096, pool1, 0));
    OK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, (CUdeviceptr)async1));
    EXPECT(ordinal == 1);
    OK(cuMemFreeAsync((CUdeviceptr)async1, 0));
    OK(cudaDeviceSynchronize());

    /* page-locked memory: the device current at allocation, freed from any device */
    OK(cudaSetDevice(1));
    OK(cudaMallocHost(&pinned, 3000));
    OK(cudaShimGetStats(&st));
    EXPECT(st.current_pinned_bytes == 3000);
    OK(cudaSetDevice(0));
    OK(cudaPointerGetAttributes(&attr, pinned));
    EXPECT(attr.type == cudaMemoryTypeHost && attr.device == 1 && attr.hostPointer == pinned);
    OK(cudaFreeHost(pinned));
    OK(cudaSetDevice(1));
    OK(cudaShimGetStats(&st));
    EXPECT(st.current_pinned_bytes == 0 && st.peak_pinned_bytes == 3000);
    OK(cudaStreamDestroy(s1));
    OK(cudaSetDevice(0));
    OK(cudaFree(a0));
    OK(cudaFree(big0));
    printf("multi_device_memory ok\n");
}

/* Peer access rules and errors; peer copies both ways, with and without peer access. */
static void peer_access(void) {
    enum { N = 1000 };
    struct cudaPointerAttributes attr;
    struct cudaShimStats st;
    float host[N], back[N];
    float *d0, *d1;
    int can, value;
    CUcontext ctx0, ctx1;
    cudaStream_t s1;
    for (int i = 0; i < N; i++) host[i] = (float)i * 0.5f;

    OK(cudaDeviceCanAccessPeer(&can, 0, 1));
    EXPECT(can == 1);
    OK(cudaDeviceCanAccessPeer(&can, 1, 0));
    EXPECT(can == 1);
    OK(cudaDeviceCanAccessPeer(&can, 0, 0));
    EXPECT(can == 0);
    EXPECT_CODE(cudaDeviceCanAccessPeer(&can, 0, 2), cudaErrorInvalidDevice);
    OK(cuDeviceCanAccessPeer(&can, 1, 0));
    EXPECT(can == 1);
    EXPECT_CODE(cuDeviceCanAccessPeer(&can, 2, 0), CUDA_ERROR_INVALID_DEVICE);
    OK(cudaDeviceGetP2PAttribute(&value, cudaDevP2PAttrAccessSupported, 0, 1));
    EXPECT(value == 1);
    EXPECT_CODE(cudaDeviceGetP2PAttribute(&value, cudaDevP2PAttrAccessSupported, 1, 1), cudaErrorInvalidDevice);
    EXPECT_CODE(cudaDeviceGetP2PAttribute(&value, (enum cudaDeviceP2PAttr)9, 0, 1), cudaErrorInvalidValue);
    OK(cuDeviceGetP2PAttribute(&value, CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK, 1, 0));
    EXPECT_CODE(cuDeviceGetP2PAttribute(&value, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, 0, 0), CUDA_ERROR_INVALID_DEVICE);

    /* runtime: enabling is one way, twice is an error, the device itself is not its peer */
    OK(cudaSetDevice(0));
    EXPECT_CODE(cudaDeviceEnablePeerAccess(0, 0), cudaErrorInvalidDevice);
    EXPECT_CODE(cudaDeviceEnablePeerAccess(2, 0), cudaErrorInvalidDevice);
    EXPECT_CODE(cudaDeviceEnablePeerAccess(1, 1), cudaErrorInvalidValue);
    EXPECT_CODE(cudaDeviceDisablePeerAccess(1), cudaErrorPeerAccessNotEnabled);
    OK(cudaMalloc((void **)&d0, N * sizeof(float)));
    OK(cudaSetDevice(1));
    OK(cudaMalloc((void **)&d1, N * sizeof(float)));
    OK(cudaSetDevice(0));
    OK(cudaPointerGetAttributes(&attr, d1));
    EXPECT(attr.devicePointer == NULL);
    OK(cudaDeviceEnablePeerAccess(1, 0));
    EXPECT_CODE(cudaDeviceEnablePeerAccess(1, 0), cudaErrorPeerAccessAlreadyEnabled);
    OK(cudaPointerGetAttributes(&attr, d1));
    EXPECT(attr.devicePointer == d1 && attr.device == 1);
    OK(cudaSetDevice(1));
    OK(cudaPointerGetAttributes(&attr, d0));
    EXPECT(attr.devicePointer == NULL); /* access was enabled from device 0 only */
    EXPECT_CODE(cudaDeviceDisablePeerAccess(0), cudaErrorPeerAccessNotEnabled);
    OK(cudaSetDevice(0));
    OK(cudaDeviceDisablePeerAccess(1));
    EXPECT_CODE(cudaDeviceDisablePeerAccess(1), cudaErrorPeerAccessNotEnabled);

    /* driver: the same rules through contexts */
    OK(cuDevicePrimaryCtxRetain(&ctx0, 0));
    OK(cuDevicePrimaryCtxRetain(&ctx1, 1));
    EXPECT_CODE(cuCtxEnablePeerAccess(ctx0, 0), CUDA_ERROR_INVALID_CONTEXT); /* the current one */
    EXPECT_CODE(cuCtxEnablePeerAccess((CUcontext)0x10, 0), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_CODE(cuCtxEnablePeerAccess(ctx1, 1), CUDA_ERROR_INVALID_VALUE);
    OK(cuCtxEnablePeerAccess(ctx1, 0));
    EXPECT_CODE(cuCtxEnablePeerAccess(ctx1, 0), CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
    OK(cuCtxDisablePeerAccess(ctx1));
    EXPECT_CODE(cuCtxDisablePeerAccess(ctx1), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);

    /* peer copies need no peer access: device 0 -> 1 -> 0, synchronous and asynchronous */
    OK(cudaMemcpy(d0, host, sizeof host, cudaMemcpyHostToDevice));
    OK(cudaMemcpyPeer(d1, 1, d0, 0, sizeof host));
    OK(cudaMemset(d0, 0, sizeof host));
    OK(cudaMemcpy(back, d1, sizeof back, cudaMemcpyDeviceToHost)); /* device 1's memory from device 0 */
    EXPECT(memcmp(back, host, sizeof back) == 0);
    OK(cudaSetDevice(1));
    OK(cudaStreamCreate(&s1));
    OK(cudaMemcpyPeerAsync(d0, 0, d1, 1, sizeof host, s1));
    OK(cudaStreamSynchronize(s1));
    OK(cudaMemcpy(back, d0, sizeof back, cudaMemcpyDeviceToHost));
    EXPECT(memcmp(back, host, sizeof back) == 0);
    EXPECT_CODE(cudaMemcpyPeer(d0, 2, d1, 1, sizeof host), cudaErrorInvalidDevice);
    EXPECT_CODE(cudaMemcpyPeer(d0, 0, d1, 1, sizeof host + 1), cudaErrorInvalidValue);
    /* cudaMemcpyDefault and cudaMemcpyDeviceToDevice between two devices (unified addressing) */
    OK(cudaMemset(d1, 0, sizeof host));
    OK(cudaMemcpy(d1, d0, sizeof host, cudaMemcpyDefault));
    OK(cudaMemcpy(back, d1, sizeof back, cudaMemcpyDefault));
    EXPECT(memcmp(back, host, sizeof back) == 0);
    OK(cudaSetDevice(0));
    OK(cudaMemset(d0, 0, sizeof host));
    OK(cudaMemcpy(d0, d1, sizeof host, cudaMemcpyDeviceToDevice));
    OK(cudaMemcpy(back, d0, sizeof back, cudaMemcpyDeviceToHost));
    EXPECT(memcmp(back, host, sizeof back) == 0);
    /* driver peer copies, both ways */
    OK(cuMemsetD8((CUdeviceptr)d1, 0, sizeof host));
    OK(cuMemcpyPeer((CUdeviceptr)d1, ctx1, (CUdeviceptr)d0, ctx0, sizeof host));
    OK(cuMemcpyPeerAsync((CUdeviceptr)d0, ctx0, (CUdeviceptr)d1, ctx1, sizeof host, (CUstream)s1));
    OK(cuStreamSynchronize((CUstream)s1));
    OK(cuMemcpyDtoH(back, (CUdeviceptr)d1, sizeof back));
    EXPECT(memcmp(back, host, sizeof back) == 0);
    EXPECT_CODE(cuMemcpyPeer((CUdeviceptr)d1, (CUcontext)0x10, (CUdeviceptr)d0, ctx0, 4), CUDA_ERROR_INVALID_CONTEXT);
    /* device-to-device bytes count on the destination's device */
    OK(cudaShimGetStats(&st));
    EXPECT(st.d2d_bytes == 3 * sizeof host); /* into d0: the async peer copy, DeviceToDevice, cuMemcpyPeerAsync */
    OK(cudaStreamDestroy(s1));
    OK(cudaFree(d0));
    OK(cudaFree(d1));
    printf("peer_access ok\n");
}

/* Streams and events belong to their device: a launch or an event record on another device's
 * stream fails, copies there and waits across devices work, and each device has its own legacy
 * default stream. */
static void multi_device_streams(void) {
    float *value0, *value1;
    cudaStream_t s0, s1;
    cudaEvent_t e0, e1;
    float ms;

    OK(cudaSetDevice(1));
    OK(cudaStreamCreate(&s1));
    OK(cudaEventCreate(&e1));
    OK(cudaMalloc((void **)&value1, sizeof(float)));
    OK(cudaSetDevice(0));
    OK(cudaStreamCreate(&s0));
    OK(cudaEventCreate(&e0));
    OK(cudaMalloc((void **)&value0, sizeof(float)));
    OK(cudaMemset(value0, 0, sizeof(float)));
    OK(cudaDeviceSynchronize());

    /* device 0 current: kernels and event records on device 1's stream are refused */
    EXPECT_CODE(cudaLaunchKernel((const void *)k_nothing, one, one, NULL, 0, s1), cudaErrorInvalidResourceHandle);
    EXPECT_CODE(cudaGetLastError(), cudaErrorInvalidResourceHandle);
    EXPECT_CODE(cudaEventRecord(e1, s0), cudaErrorInvalidResourceHandle);
    EXPECT_CODE(cudaEventRecord(e1, 0), cudaErrorInvalidResourceHandle); /* device 0's default stream */
    EXPECT_CODE(cudaEventRecord(e0, s1), cudaErrorInvalidResourceHandle);
    /* ... copies and memsets there are not */
    OK(cudaMemsetAsync(value1, 0, sizeof(float), s1));
    OK(cudaMemcpyAsync(value1, value0, sizeof(float), cudaMemcpyDefault, s1));
    OK(cudaStreamSynchronize(s1));

    /* device 1 holds a gate, records e1; device 0 waits for e1, then stores */
    OK(cudaSetDevice(1));
    launch_gate(s1);
    launch_store(value1, 1.0f, s1);
    OK(cudaEventRecord(e1, s1));
    OK(cudaSetDevice(0));
    /* device 0's legacy stream does not wait for device 1's blocking streams */
    launch_store(value0, 0.0f, 0);
    expect_finishes(0);
    OK(cudaStreamWaitEvent(s0, e1, 0));
    launch_copy(value0, value1, 1, s0);
    EXPECT_CODE(cudaStreamQuery(s0), cudaErrorNotReady);
    EXPECT_CODE(cudaEventQuery(e1), cudaErrorNotReady); /* another device's event */
    open_gate();
    OK(cudaEventSynchronize(e1));
    OK(cudaStreamSynchronize(s0));
    EXPECT(read_float(value0) == 1.0f);
    OK(cudaEventRecord(e0, s0));
    OK(cudaEventSynchronize(e0));
    EXPECT_CODE(cudaEventElapsedTime(&ms, e0, e1), cudaErrorInvalidResourceHandle);
    OK(cudaStreamSynchronize(s1)); /* another device's stream */

    /* destroying another device's stream and event works */
    OK(cudaStreamDestroy(s1));
    OK(cudaEventDestroy(e1));
    OK(cudaStreamDestroy(s0));
    OK(cudaEventDestroy(e0));
    OK(cudaFree(value0));
    OK(cudaFree(value1));
    printf("multi_device_streams ok\n");
}

/* A device fault is sticky on its device only. */
static void multi_device_sticky(void) {
    void *p;
    int code = cudaErrorIllegalAddress;
    void *args[] = {&code};
    OK(cudaSetDevice(1));
    OK(cudaLaunchKernel((const void *)k_fault, one, one, args, 0, 0));
    EXPECT_CODE(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
    EXPECT_CODE(cudaMalloc(&p, 16), cudaErrorIllegalAddress);
    EXPECT_CODE(cudaGetLastError(), cudaErrorIllegalAddress);
    OK(cudaSetDevice(0));
    OK(cudaMalloc(&p, 16));
    OK(cudaDeviceSynchronize());
    OK(cudaFree(p));
    printf("multi_device_sticky ok\n");
}

/* Virtual memory management on device 1: physical memory charged to it, access per device. */
static void multi_device_vmm(void) {
    CUmemAllocationProp prop;
    CUmemAccessDesc access;
    CUmemGenericAllocationHandle handle;
    CUdeviceptr va;
    struct cudaShimStats st0, st1;
    float values[4] = {1.0f, 2.0f, 3.0f, 4.0f}, back[4];
    size_t gran = 2 << 20;
    int ordinal;
    OK(cudaSetDevice(0));
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 2;
    EXPECT_CODE(cuMemCreate(&handle, gran, &prop, 0), CUDA_ERROR_INVALID_DEVICE);
    prop.location.id = 1;
    OK(cuMemCreate(&handle, gran, &prop, 0));
    OK(cudaShimGetStats(&st0));
    EXPECT(st0.current_device_bytes == 0);
    OK(cudaSetDevice(1));
    OK(cudaShimGetStats(&st1));
    EXPECT(st1.current_device_bytes == gran);
    OK(cuMemAddressReserve(&va, gran, 0, 0, 0));
    OK(cuMemMap(va, gran, 0, handle, 0));
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    OK(cuMemSetAccess(va, gran, &access, 1));
    OK(cuMemcpyHtoD(va, values, sizeof values));
    OK(cuMemcpyDtoH(back, va, sizeof back));
    EXPECT(memcmp(back, values, sizeof back) == 0);
    OK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, va + 8));
    EXPECT(ordinal == 1);
    OK(cuMemUnmap(va, gran));
    OK(cuMemRelease(handle));
    OK(cuMemAddressFree(va, gran));
    OK(cudaShimGetStats(&st1));
    EXPECT(st1.current_device_bytes == 0 && st1.peak_device_bytes >= gran);
    printf("multi_device_vmm ok\n");
}

/* ---- what PyTorch binds at import (tests/shim.rs: pytorch_*) ---- */

static pthread_t host_fn_thread;

/* host function: appends 2 to the log of launch_append (userData = int *[2]) */
static void host_append(void *data) {
    int **log_count = (int **)data;
    host_fn_thread = pthread_self();
    log_count[0][(*log_count[1])++] = 2;
}

static cudaStream_t callback_stream;
static cudaError_t callback_status = cudaErrorUnknown;

static void callback_append(cudaStream_t stream, cudaError_t status, void *data) {
    int **log_count = (int **)data;
    callback_stream = stream;
    callback_status = status;
    log_count[0][(*log_count[1])++] = 4;
}

static float symbol_shadow[4] = {1, 2, 3, 4};

/* Stream priorities, capture queries and graphs, host functions in stream order, events with
 * flags, PCI bus ids, function attributes and occupancy. */
static void pytorch_streams(void) {
    int least = 1, greatest = 1, dleast = 1, dgreatest = 1, priority = 1;
    unsigned int flags = 9;
    cudaStream_t s, t, u;
    OK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    EXPECT(least == 0 && greatest == -5);
    OK(cuCtxGetStreamPriorityRange(&dleast, &dgreatest));
    EXPECT(dleast == least && dgreatest == greatest);
    OK(cudaDeviceGetStreamPriorityRange(NULL, &greatest));
    OK(cudaDeviceGetStreamPriorityRange(&least, NULL));
    OK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, -3));
    OK(cudaStreamGetPriority(s, &priority));
    EXPECT(priority == -3);
    OK(cuStreamGetPriority((CUstream)s, &priority));
    EXPECT(priority == -3);
    OK(cudaStreamGetFlags(s, &flags));
    EXPECT(flags == cudaStreamNonBlocking);
    OK(cudaStreamCreateWithPriority(&t, cudaStreamDefault, -100));
    OK(cudaStreamGetPriority(t, &priority));
    EXPECT(priority == -5); /* clamped to the greatest priority */
    OK(cudaStreamGetFlags(t, &flags));
    EXPECT(flags == cudaStreamDefault);
    OK(cudaStreamCreateWithPriority(&u, cudaStreamDefault, 7));
    OK(cudaStreamGetPriority(u, &priority));
    EXPECT(priority == 0);
    OK(cudaStreamGetPriority(0, &priority));
    EXPECT(priority == 0);
    OK(cudaStreamCreate(&u));
    OK(cudaStreamGetPriority(u, &priority));
    EXPECT(priority == 0);
    EXPECT_CODE(cudaStreamCreateWithPriority(&u, 2, 0), cudaErrorInvalidValue);
    EXPECT_CODE(cudaStreamGetPriority(s, NULL), cudaErrorInvalidValue);
    EXPECT_CODE(cudaStreamGetPriority((cudaStream_t)0x1234, &priority), cudaErrorInvalidResourceHandle);

    /* capture: nothing ever captures */
    enum cudaStreamCaptureStatus status = cudaStreamCaptureStatusActive;
    OK(cudaStreamIsCapturing(s, &status));
    EXPECT(status == cudaStreamCaptureStatusNone);
    status = cudaStreamCaptureStatusActive;
    OK(cudaStreamIsCapturing(0, &status));
    EXPECT(status == cudaStreamCaptureStatusNone);
    status = cudaStreamCaptureStatusActive;
    OK(cudaStreamGetCaptureInfo(s, &status, NULL, NULL, NULL, NULL));
    EXPECT(status == cudaStreamCaptureStatusNone);
    EXPECT_CODE(cudaStreamIsCapturing(s, NULL), cudaErrorInvalidValue);
    EXPECT_CODE(cudaStreamIsCapturing((cudaStream_t)0x1234, &status), cudaErrorInvalidResourceHandle);
    /* the driver's answer, which NVIDIA's runtime relays */
    CUstreamCaptureStatus driver_status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
    OK(cuStreamIsCapturing((CUstream)s, &driver_status));
    EXPECT(driver_status == CU_STREAM_CAPTURE_STATUS_NONE);
    driver_status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
    OK(cuStreamIsCapturing(CU_STREAM_PER_THREAD, &driver_status));
    EXPECT(driver_status == CU_STREAM_CAPTURE_STATUS_NONE);
    EXPECT_CODE(cuStreamIsCapturing((CUstream)s, NULL), CUDA_ERROR_INVALID_VALUE);
    EXPECT_CODE(cuStreamIsCapturing((CUstream)0x1234, &driver_status), CUDA_ERROR_INVALID_HANDLE);
    enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    OK(cudaThreadExchangeStreamCaptureMode(&mode));
    EXPECT(mode == cudaStreamCaptureModeGlobal);
    OK(cudaThreadExchangeStreamCaptureMode(&mode));
    EXPECT(mode == cudaStreamCaptureModeRelaxed);
    mode = (enum cudaStreamCaptureMode)7;
    EXPECT_CODE(cudaThreadExchangeStreamCaptureMode(&mode), cudaErrorInvalidValue);
    EXPECT_CODE(cudaThreadExchangeStreamCaptureMode(NULL), cudaErrorInvalidValue);
    EXPECT_CODE(cudaStreamBeginCapture(0, cudaStreamCaptureModeGlobal), cudaErrorStreamCaptureUnsupported);
    EXPECT_CODE(cudaStreamBeginCapture(s, (enum cudaStreamCaptureMode)3), cudaErrorInvalidValue);
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    size_t nodes = 0;
    EXPECT_CODE(cudaStreamEndCapture(s, &graph), cudaErrorIllegalState);
    /* an empty capture is an empty graph (tests/programs/graphs.c checks capture itself) */
    OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    OK(cudaStreamEndCapture(s, &graph));
    OK(cudaGraphGetNodes(graph, NULL, &nodes));
    EXPECT(graph != NULL && nodes == 0);
    OK(cudaGraphDebugDotPrint(graph, "/dev/null", 0));
    OK(cudaGraphInstantiate(&exec, graph, 0));
    OK(cudaGraphLaunch(exec, s));
    OK(cudaGraphExecDestroy(exec));
    OK(cudaGraphDestroy(graph));
    graph = NULL;
    exec = NULL;
    EXPECT_CODE(cudaGraphInstantiate(&exec, graph, 0), cudaErrorInvalidValue);
    EXPECT_CODE(cudaGraphInstantiateWithFlags(&exec, graph, 0), cudaErrorInvalidValue);
    EXPECT_CODE(cudaGraphLaunch(exec, s), cudaErrorInvalidValue);
    EXPECT_CODE(cudaGraphGetNodes(graph, NULL, &nodes), cudaErrorInvalidValue);
    EXPECT_CODE(cudaGraphNodeGetDependencies(NULL, NULL, &nodes), cudaErrorInvalidValue);
    EXPECT_CODE(cudaGraphDebugDotPrint(graph, "/dev/null", 0), cudaErrorInvalidValue);
    EXPECT_CODE(cudaGraphExecDestroy(exec), cudaErrorInvalidValue);
    EXPECT_CODE(cudaGraphDestroy(graph), cudaErrorInvalidValue);
    EXPECT(cudaGetLastError() == cudaErrorInvalidValue);

    /* host functions and callbacks run on the stream's thread, in stream order */
    int *log, *count;
    OK(cudaMallocManaged((void **)&log, 8 * sizeof(int), cudaMemAttachGlobal));
    OK(cudaMallocManaged((void **)&count, sizeof(int), cudaMemAttachGlobal));
    *count = 0;
    int *log_count[2] = {log, count};
    launch_gate(s);
    launch_append(log, count, 1, s);
    OK(cudaLaunchHostFunc(s, host_append, log_count));
    launch_append(log, count, 3, s);
    OK(cudaStreamAddCallback(s, callback_append, log_count, 0));
    EXPECT_CODE(cudaStreamAddCallback(s, callback_append, log_count, 1), cudaErrorInvalidValue);
    EXPECT_CODE(cudaLaunchHostFunc(s, NULL, NULL), cudaErrorInvalidValue);
    EXPECT_CODE(cudaLaunchHostFunc((cudaStream_t)0x1234, host_append, NULL), cudaErrorInvalidResourceHandle);
    EXPECT(cudaStreamQuery(s) == cudaErrorNotReady && *count == 0);
    open_gate();
    OK(cudaStreamSynchronize(s));
    EXPECT(*count == 4);
    for (int i = 0; i < 4; i++) EXPECT(log[i] == i + 1);
    EXPECT(!pthread_equal(host_fn_thread, pthread_self()));
    EXPECT(callback_stream == s && callback_status == cudaSuccess);
    *count = 0;
    OK(cuLaunchHostFunc((CUstream)s, host_append, log_count));
    OK(cudaStreamSynchronize(s));
    EXPECT(*count == 1 && log[0] == 2);

    /* event records with flags */
    cudaEvent_t e;
    OK(cudaEventCreate(&e));
    OK(cudaEventRecordWithFlags(e, s, cudaEventRecordDefault));
    OK(cudaEventRecordWithFlags(e, s, cudaEventRecordExternal));
    OK(cuEventRecordWithFlags((CUevent)e, (CUstream)s, CU_EVENT_RECORD_DEFAULT));
    EXPECT_CODE(cudaEventRecordWithFlags(e, s, 2), cudaErrorInvalidValue);
    OK(cudaEventSynchronize(e));
    OK(cudaEventDestroy(e));

    /* PCI bus id: domain:bus:device.function from the attributes */
    char bus[32];
    OK(cudaDeviceGetPCIBusId(bus, sizeof bus, 0));
    EXPECT(strcmp(bus, "0000:01:00.0") == 0);
    OK(cuDeviceGetPCIBusId(bus, sizeof bus, 0));
    EXPECT(strcmp(bus, "0000:01:00.0") == 0);
    OK(cudaDeviceGetPCIBusId(bus, 5, 0));
    EXPECT(strcmp(bus, "0000") == 0);
    EXPECT_CODE(cudaDeviceGetPCIBusId(bus, 0, 0), cudaErrorInvalidValue);
    EXPECT_CODE(cudaDeviceGetPCIBusId(bus, sizeof bus, 3), cudaErrorInvalidDevice);

    /* function attributes and occupancy, driver and runtime alike */
    struct cudaFuncAttributes attrs;
    cudaFunction_t fn;
    int value = 0, blocks = -1;
    OK(cudaGetFuncBySymbol(&fn, (const void *)k_store));
    OK(cudaFuncGetAttributes(&attrs, (const void *)k_store));
    EXPECT(attrs.maxDynamicSharedSizeBytes == 48 * 1024 && attrs.preferredShmemCarveout == -1);
    OK(cudaFuncSetAttribute((const void *)k_store, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 * 1024));
    OK(cudaFuncSetAttribute((const void *)k_store, cudaFuncAttributePreferredSharedMemoryCarveout, 50));
    OK(cudaFuncGetAttributes(&attrs, (const void *)k_store));
    EXPECT(attrs.maxDynamicSharedSizeBytes == 100 * 1024 && attrs.preferredShmemCarveout == 50);
    OK(cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (CUfunction)fn));
    EXPECT(value == 100 * 1024);
    EXPECT_CODE(cudaFuncSetAttribute((const void *)k_store, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024), cudaErrorInvalidValue);
    EXPECT_CODE(cudaFuncSetAttribute((const void *)k_store, cudaFuncAttributePreferredSharedMemoryCarveout, 101), cudaErrorInvalidValue);
    EXPECT_CODE(cudaFuncSetAttribute((const void *)k_store, cudaFuncAttributeRequiredClusterWidth, 2), cudaErrorNotSupported);
    EXPECT_CODE(cudaFuncSetAttribute((const void *)k_store, (enum cudaFuncAttribute)3, 0), cudaErrorInvalidValue);
    EXPECT_CODE(cudaFuncSetAttribute((const void *)host_append, cudaFuncAttributeMaxDynamicSharedMemorySize, 0), cudaErrorInvalidDeviceFunction);
    OK(cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, (const void *)k_store, 256, 0, cudaOccupancyDefault));
    EXPECT(blocks == 8);
    OK(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&value, (CUfunction)fn, 256, 0, 0));
    EXPECT(value == blocks);
    OK(cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, (const void *)k_store, 1000, 0, cudaOccupancyDisableCachingOverride));
    EXPECT(blocks == 2);
    OK(cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, (const void *)k_store, 64, 80 * 1024, 0));
    EXPECT(blocks == 2); /* 164 KiB per SM / (80 KiB + 1 KiB reserved) */
    OK(cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, (const void *)k_store, 2048, 0, 0));
    EXPECT(blocks == 0);
    EXPECT_CODE(cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, (const void *)k_store, 256, 0, 2), cudaErrorInvalidValue);
    EXPECT_CODE(cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, (const void *)host_append, 256, 0, 0), cudaErrorInvalidDeviceFunction);
    OK(cudaStreamDestroy(s));
    OK(cudaStreamDestroy(t));
    printf("pytorch_streams ok\n");
}

/* The default pool's attributes and access, module variables, page-locked registration,
 * interprocess handles and 2D copies. */
static void pytorch_memory(void) {
    cudaStream_t s;
    OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    /* default pool */
    cudaMemPool_t pool;
    CUmemoryPool dpool;
    unsigned long long used = 1, high = 1, reserved = 1, threshold = 0;
    int reuse = 0;
    void *p;
    OK(cudaDeviceGetDefaultMemPool(&pool, 0));
    OK(cuDeviceGetDefaultMemPool(&dpool, 0));
    EXPECT((void *)pool == (void *)dpool);
    EXPECT_CODE(cudaDeviceGetDefaultMemPool(&pool, 5), cudaErrorInvalidDevice);
    OK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
    EXPECT(used == 0);
    OK(cudaMallocFromPoolAsync(&p, 1000, pool, s));
    OK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
    OK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &high));
    OK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved));
    EXPECT(used == 1024 && high == 1024 && reserved == 1024);
    OK(cudaFreeAsync(p, s));
    OK(cudaStreamSynchronize(s));
    OK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
    OK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &high));
    EXPECT(used == 0 && high == 1024);
    high = 0;
    OK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &high));
    OK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &high));
    EXPECT(high == 0);
    high = 5;
    EXPECT_CODE(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &high), cudaErrorInvalidValue);
    EXPECT_CODE(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &high), cudaErrorInvalidValue);
    threshold = ~0ull;
    OK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
    threshold = 0;
    OK(cuMemPoolGetAttribute(dpool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
    EXPECT(threshold == ~0ull);
    OK(cudaMemPoolGetAttribute(pool, cudaMemPoolReuseAllowOpportunistic, &reuse));
    EXPECT(reuse == 1);
    EXPECT_CODE(cudaMemPoolGetAttribute(pool, (enum cudaMemPoolAttr)9, &reuse), cudaErrorInvalidValue);
    EXPECT_CODE(cudaMemPoolGetAttribute((cudaMemPool_t)&reuse, cudaMemPoolAttrUsedMemCurrent, &used), cudaErrorInvalidValue);
    OK(cudaMemPoolTrimTo(pool, 0));
    struct cudaMemAccessDesc desc = {{cudaMemLocationTypeDevice, 0}, cudaMemAccessFlagsProtReadWrite};
    OK(cudaMemPoolSetAccess(pool, &desc, 1));
    desc.flags = cudaMemAccessFlagsProtNone;
    EXPECT_CODE(cudaMemPoolSetAccess(pool, &desc, 1), cudaErrorInvalidValue);
    desc.location.id = 4;
    EXPECT_CODE(cudaMemPoolSetAccess(pool, &desc, 1), cudaErrorInvalidDevice);

    /* a module's __device__ variable */
    static int fatbin;
    void **module = __cudaRegisterFatBinary(&fatbin);
    EXPECT(__cudaInitModule(module) == 1);
    EXPECT(__cudaInitModule((void **)&fatbin) == 0);
    __cudaRegisterVar(module, (char *)symbol_shadow, (char *)"symbol", "symbol", 0, sizeof symbol_shadow, 0, 0);
    float *sym, back[4], two[2] = {20, 30};
    OK(cudaGetSymbolAddress((void **)&sym, symbol_shadow));
    struct cudaPointerAttributes attr;
    OK(cudaPointerGetAttributes(&attr, sym));
    EXPECT(attr.type == cudaMemoryTypeDevice);
    OK(cudaMemcpy(back, sym, sizeof back, cudaMemcpyDeviceToHost));
    EXPECT(back[0] == 1 && back[3] == 4);
    OK(cudaMemcpyToSymbol(symbol_shadow, two, sizeof two, sizeof(float), cudaMemcpyHostToDevice));
    OK(cudaMemcpy(back, sym, sizeof back, cudaMemcpyDeviceToHost));
    EXPECT(back[0] == 1 && back[1] == 20 && back[2] == 30 && back[3] == 4);
    EXPECT(symbol_shadow[1] == 2); /* the host shadow is not the device copy */
    float from[2] = {0, 0};
    OK(cudaMemcpyFromSymbol(from, symbol_shadow, sizeof from, sizeof(float), cudaMemcpyDeviceToHost));
    EXPECT(from[0] == 20 && from[1] == 30);
    EXPECT_CODE(cudaMemcpyFromSymbol(from, symbol_shadow, sizeof from, 3 * sizeof(float), cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
    EXPECT_CODE(cudaMemcpyFromSymbol(from, symbol_shadow, sizeof from, 0, cudaMemcpyHostToDevice), cudaErrorInvalidMemcpyDirection);
    EXPECT_CODE(cudaMemcpyFromSymbol(from, two, 4, 0, cudaMemcpyDeviceToHost), cudaErrorInvalidSymbol);
    void *again;
    OK(cudaGetSymbolAddress(&again, symbol_shadow));
    EXPECT(again == (void *)sym);
    EXPECT_CODE(cudaMemcpyToSymbol(symbol_shadow, two, sizeof two, 3 * sizeof(float), cudaMemcpyHostToDevice), cudaErrorInvalidValue);
    EXPECT_CODE(cudaMemcpyToSymbol(symbol_shadow, two, sizeof two, 0, cudaMemcpyDeviceToHost), cudaErrorInvalidMemcpyDirection);
    EXPECT_CODE(cudaGetSymbolAddress(&again, two), cudaErrorInvalidSymbol);
    EXPECT_CODE(cudaMemcpyToSymbol(two, two, 4, 0, cudaMemcpyHostToDevice), cudaErrorInvalidSymbol);

    /* page-locking ordinary host memory */
    enum { N = 3 * 4096 };
    struct cudaShimStats before, during;
    unsigned char *host = malloc(N), *dev;
    void *mapped;
    OK(cudaShimGetStats(&before));
    OK(cudaHostRegister(host, N, cudaHostRegisterMapped));
    OK(cudaShimGetStats(&during));
    EXPECT(during.current_pinned_bytes == before.current_pinned_bytes + N);
    OK(cudaPointerGetAttributes(&attr, host + 100));
    EXPECT(attr.type == cudaMemoryTypeHost && attr.hostPointer == host + 100 && attr.devicePointer == host + 100);
    OK(cudaHostGetDevicePointer(&mapped, host, 0));
    EXPECT(mapped == (void *)host);
    EXPECT_CODE(cudaHostRegister(host + 4096, 10, 0), cudaErrorHostMemoryAlreadyRegistered);
    EXPECT_CODE(cudaFreeHost(host), cudaErrorInvalidValue);
    memset(host, 5, N);
    OK(cudaMalloc((void **)&dev, N));
    OK(cudaMemcpyAsync(dev, host, N, cudaMemcpyHostToDevice, s));
    OK(cudaMemsetAsync(host, 9, 16, s)); /* mapped: a memset reaches it through its address */
    OK(cudaStreamSynchronize(s));
    EXPECT(host[0] == 9 && host[16] == 5);
    OK(cudaMemcpy(host, dev + 16, 16, cudaMemcpyDeviceToHost));
    EXPECT(host[0] == 5);
    EXPECT_CODE(cudaHostUnregister(host + 8), cudaErrorHostMemoryNotRegistered);
    OK(cudaHostUnregister(host));
    EXPECT_CODE(cudaHostUnregister(host), cudaErrorHostMemoryNotRegistered);
    OK(cudaPointerGetAttributes(&attr, host));
    EXPECT(attr.type == cudaMemoryTypeUnregistered);
    OK(cudaShimGetStats(&during));
    EXPECT(during.current_pinned_bytes == before.current_pinned_bytes);
    EXPECT_CODE(cudaHostRegister(host, N, cudaHostRegisterReadOnly), cudaErrorNotSupported);
    EXPECT_CODE(cudaHostRegister(host, N, cudaHostRegisterIoMemory), cudaErrorNotSupported);
    EXPECT_CODE(cudaHostRegister(NULL, N, 0), cudaErrorInvalidValue);
    EXPECT_CODE(cudaHostRegister(host, 0, 0), cudaErrorInvalidValue);
    OK(cuMemHostRegister(host, N, CU_MEMHOSTREGISTER_PORTABLE));
    OK(cuMemHostUnregister(host));

    /* interprocess handles */
    cudaIpcMemHandle_t handle, zero;
    memset(&zero, 0, sizeof zero);
    OK(cudaIpcGetMemHandle(&handle, dev + 64));
    EXPECT_CODE(cudaIpcOpenMemHandle(&p, handle, cudaIpcMemLazyEnablePeerAccess), cudaErrorDeviceUninitialized);
    EXPECT_CODE(cudaIpcOpenMemHandle(&p, handle, 0), cudaErrorInvalidValue);
    EXPECT_CODE(cudaIpcOpenMemHandle(&p, zero, cudaIpcMemLazyEnablePeerAccess), cudaErrorInvalidValue);
    EXPECT_CODE(cudaIpcCloseMemHandle(dev), cudaErrorInvalidValue);
    EXPECT_CODE(cudaIpcGetMemHandle(&handle, host), cudaErrorInvalidValue);
    void *managed;
    OK(cudaMallocManaged(&managed, 64, cudaMemAttachGlobal));
    EXPECT_CODE(cudaIpcGetMemHandle(&handle, managed), cudaErrorInvalidValue);
    OK(cudaIpcGetMemHandle(&handle, dev));
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        /* another process: its device memory is not this one's */
        _exit(cudaIpcOpenMemHandle(&p, handle, cudaIpcMemLazyEnablePeerAccess) == cudaErrorNotSupported ? 0 : 1);
    }
    int child_status = -1;
    EXPECT(waitpid(child, &child_status, 0) == child);
    EXPECT(WIFEXITED(child_status) && WEXITSTATUS(child_status) == 0);

    cudaEvent_t ev, opened, plain;
    cudaIpcEventHandle_t ehandle;
    OK(cudaEventCreateWithFlags(&ev, cudaEventInterprocess | cudaEventDisableTiming));
    OK(cudaEventCreate(&plain));
    EXPECT_CODE(cudaIpcGetEventHandle(&ehandle, plain), cudaErrorInvalidResourceHandle);
    OK(cudaIpcGetEventHandle(&ehandle, ev));
    OK(cudaIpcOpenEventHandle(&opened, ehandle));
    EXPECT(opened != ev);
    launch_gate(s);
    OK(cudaEventRecord(ev, s));
    EXPECT(cudaEventQuery(opened) == cudaErrorNotReady);
    open_gate();
    OK(cudaEventSynchronize(opened));
    OK(cudaEventDestroy(opened));
    OK(cudaEventQuery(ev));
    OK(cudaEventDestroy(ev));
    EXPECT_CODE(cudaIpcOpenEventHandle(&opened, ehandle), cudaErrorInvalidValue);

    /* pitched memory, 2D memsets and copies */
    unsigned char *pitched, rows[4 * 100];
    size_t pitch = 0;
    OK(cudaMallocPitch((void **)&pitched, &pitch, 100, 4));
    EXPECT(pitch == 512);
    OK(cudaMemset2D(pitched, pitch, 7, 100, 4));
    OK(cudaMemcpy2D(rows, 100, pitched, pitch, 100, 4, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 400; i++) EXPECT(rows[i] == 7);
    for (int i = 0; i < 400; i++) rows[i] = (unsigned char)i;
    OK(cudaMemcpy2DAsync(pitched, pitch, rows, 100, 100, 4, cudaMemcpyHostToDevice, s));
    OK(cudaStreamSynchronize(s));
    memset(rows, 0, sizeof rows);
    OK(cudaMemcpy2D(rows, 100, pitched, pitch, 100, 4, cudaMemcpyDefault));
    for (int i = 0; i < 400; i++) EXPECT(rows[i] == (unsigned char)i);
    EXPECT_CODE(cudaMemcpy2D(rows, 50, pitched, pitch, 100, 4, cudaMemcpyDeviceToHost), cudaErrorInvalidPitchValue);
    EXPECT_CODE(cudaMemcpy2D(rows, 100, pitched, pitch, 100, 4, (enum cudaMemcpyKind)9), cudaErrorInvalidMemcpyDirection);
    EXPECT_CODE(cudaMemcpy2D(rows, 100, pitched, pitch, 100, 4, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
    EXPECT_CODE(cudaMemcpy2DAsync(pitched, pitch, rows, 100, 100, 5, cudaMemcpyHostToDevice, s), cudaErrorInvalidValue);
    EXPECT_CODE(cudaMallocPitch(NULL, &pitch, 100, 4), cudaErrorInvalidValue);
    OK(cudaFree(pitched));
    OK(cudaFree(dev));
    OK(cudaFree(managed));
    OK(cudaStreamDestroy(s));
    free(host);
    printf("pytorch_memory ok\n");
}

/* A primary context is active once the runtime makes it current (two devices). */
static void pytorch_primary_state(void) {
    unsigned int flags = 9;
    int active = 9;
    OK(cuInit(0));
    OK(cuDevicePrimaryCtxGetState(0, &flags, &active));
    EXPECT(flags == CU_CTX_MAP_HOST && active == 0); /* implicit in every context */
    OK(cudaFree(NULL)); /* the runtime initialises device 0 */
    OK(cuDevicePrimaryCtxGetState(0, &flags, &active));
    EXPECT(active == 1);
    OK(cuDevicePrimaryCtxGetState(1, &flags, &active));
    EXPECT(active == 0);
    char bus[16];
    OK(cudaDeviceGetPCIBusId(bus, sizeof bus, 1));
    EXPECT(strcmp(bus, "0000:02:00.0") == 0);
    OK(cuDevicePrimaryCtxGetState(1, &flags, &active));
    EXPECT(active == 0); /* a query does not make a context */
    OK(cudaSetDevice(1));
    OK(cuDevicePrimaryCtxGetState(1, &flags, &active));
    EXPECT(active == 1);
    CUcontext ctx;
    OK(cuDevicePrimaryCtxRetain(&ctx, 1));
    OK(cuDevicePrimaryCtxRelease(1));
    OK(cuDevicePrimaryCtxGetState(1, &flags, &active));
    EXPECT(active == 1); /* the runtime still holds it */
    EXPECT_CODE(cuDevicePrimaryCtxGetState(2, &flags, &active), CUDA_ERROR_INVALID_DEVICE);
    EXPECT_CODE(cuDevicePrimaryCtxGetState(0, NULL, &active), CUDA_ERROR_INVALID_VALUE);
    printf("pytorch_primary_state ok\n");
}

/* A CUDA call from an exit handler, as a C++ static destructor makes one (torch's IPC cleanup):
 * glibc has run the thread-local destructors by then. The call gets an error code (NVIDIA's
 * runtime answers cudaErrorCudartUnloading while it unloads), never a crash. */
static void cuda_call_at_exit(void) {
    int device = -1;
    printf("at exit: %s\n", cudaGetErrorName(cudaGetDevice(&device)));
    fflush(stdout);
}

static void calls_at_exit(void) {
    void *block;
    OK(cudaMalloc(&block, 256));
    EXPECT(atexit(cuda_call_at_exit) == 0);
    printf("calls_at_exit ok\n");
}

/* All the multi-device cases in one process (for the statistics file). */
static void multi_device(void) {
    multi_device_queries();
    multi_device_memory();
    peer_access();
    multi_device_streams();
    multi_device_vmm();
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
    {"driver_per_thread_stream", driver_per_thread_stream},
    {"proc_address", proc_address},
    {"proc_address_13", proc_address_13},
    {"copies_2d", copies_2d},
    {"launch_variants", launch_variants},
    {"virtual_memory", virtual_memory},
    {"multi_device", multi_device},
    {"multi_device_sticky", multi_device_sticky},
    {"pytorch_streams", pytorch_streams},
    {"pytorch_memory", pytorch_memory},
    {"pytorch_primary_state", pytorch_primary_state},
    {"calls_at_exit", calls_at_exit},
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
