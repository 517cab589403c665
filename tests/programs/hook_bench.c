/*
 * hook_bench.c — the workload of `itermem bench hooks`: times CUDA calls whose cost itermem's
 * hooks add to. Run it with and without LD_PRELOAD=libitermem.so; the difference is the hooks'.
 *
 * Usage: hook_bench [--live N] [--pairs N] [--launches N] [--threads N]
 *   --live N      allocations kept live during the measurement (default 10000)
 *   --pairs N     cudaMalloc+cudaFree pairs timed, and as many cuMemAlloc+cuMemFree pairs
 *                 (default 200000), on each thread
 *   --launches N  launches of an 8-parameter kernel (all pointers to live blocks) timed, through
 *                 cudaLaunchKernel and as many through cuLaunchKernel (default 200000), on each
 *                 thread
 *   --threads N   host threads doing all of it at once, each launching on a stream of its own
 *                 (default 1)
 * Prints: malloc_free_pair_ns X, launch_ns X, driver_malloc_free_pair_ns X and driver_launch_ns X
 * (mean wall-clock ns per operation as each thread saw it, averaged over the threads), then
 * malloc_free_pairs_per_s X, launches_per_s X, driver_malloc_free_pairs_per_s X and
 * driver_launches_per_s X (operations of all threads together per second of the phase's wall
 * time, launches' stream synchronisations included), and gate_timeouts X (below).
 *
 * The launches go to a busy stream, as on a GPU with work queued: each batch of BATCH launches
 * waits behind a host function (a gate) that holds the stream until the batch is launched. A
 * launch then only enqueues, as a launch onto a GPU's queue does, and is not timed with the
 * simulated platform waking its stream's thread (a system call made whenever that thread has
 * run dry and gone to sleep, which happens more often the slower the caller: it made the launch
 * figures spread over more than the cost being measured). A host function accesses no device
 * memory, so itermem's events are the same as without the gates. A gate opens by itself after
 * GATE_MS: a call that waits for the device while a batch is launched (a free that
 * synchronises) then waits that long, as it would wait for the queued work on a GPU;
 * gate_timeouts counts such gates (and, with more threads than cores, batches that took longer).
 *
 * Each phase is a function of its own (phase_pairs, phase_driver_pairs, phase_launches,
 * phase_driver_launches) so that callgrind can report the instructions spent inside it: its
 * inclusive cost divided by its operations is what one operation costs on the calling thread.
 */
#define _POSIX_C_SOURCE 200809L
#include <cuda.h>
#include <cuda_runtime.h>
#include <cuda_shim.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(call)                                                                       \
    do {                                                                                  \
        cudaError_t e_ = (call);                                                          \
        if (e_ != cudaSuccess) {                                                          \
            fprintf(stderr, "hook_bench: %s failed: %s\n", #call, cudaGetErrorName(e_)); \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

/* eight(p0..p5, n, x): does nothing; only its launch is measured */
static void k_eight(void **args) { (void)args; }

/* Launches between two stream synchronisations, and how long a gate holds at most. */
#define BATCH 1024
#define GATE_MS 50

/* A thread's gate: closed while the thread launches a batch. */
struct gate {
    pthread_mutex_t lock;
    pthread_cond_t opened; /* on CLOCK_MONOTONIC */
    int open;
    long timeouts;
};

/* Holds its stream until gate `arg` is opened, or GATE_MS have passed. */
static void CUDART_CB wait_for_gate(void *arg) {
    struct gate *g = arg;
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_nsec += GATE_MS * 1000000L;
    deadline.tv_sec += deadline.tv_nsec / 1000000000L;
    deadline.tv_nsec %= 1000000000L;
    pthread_mutex_lock(&g->lock);
    while (!g->open) {
        if (pthread_cond_timedwait(&g->opened, &g->lock, &deadline) == ETIMEDOUT) {
            g->timeouts++;
            break;
        }
    }
    pthread_mutex_unlock(&g->lock);
}

/* Closes `g` and queues it on `s`: what the thread launches next waits behind it. */
static void hold(struct gate *g, cudaStream_t s) {
    pthread_mutex_lock(&g->lock);
    g->open = 0;
    pthread_mutex_unlock(&g->lock);
    CHECK(cudaLaunchHostFunc(s, wait_for_gate, g));
}

/* Opens `g` and waits for everything queued on `s`. */
static void release(struct gate *g, cudaStream_t s) {
    pthread_mutex_lock(&g->lock);
    g->open = 1;
    pthread_cond_signal(&g->opened);
    pthread_mutex_unlock(&g->lock);
    CHECK(cudaStreamSynchronize(s));
}

static long option(int argc, char **argv, const char *name, long fallback) {
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0) return strtol(argv[i + 1], NULL, 10);
    return fallback;
}

/* What every thread shares: read-only once the threads start. */
static long live, pairs, launches;
static void **blocks;
static CUfunction eight;
/* Each phase starts when every worker reaches `start`, and the next one when they all reach
 * `done`. */
static pthread_barrier_t start, done;

#define PHASES 4

__attribute__((noinline)) static double phase_pairs(void) {
    double t0 = now_ns();
    for (long i = 0; i < pairs; i++) {
        void *p;
        CHECK(cudaMalloc(&p, 4096));
        CHECK(cudaFree(p));
    }
    return (now_ns() - t0) / (double)pairs;
}

__attribute__((noinline)) static double phase_driver_pairs(void) {
    double t0 = now_ns();
    for (long i = 0; i < pairs; i++) {
        CUdeviceptr p;
        CHECK((cudaError_t)cuMemAlloc(&p, 4096));
        CHECK((cudaError_t)cuMemFree(p));
    }
    return (now_ns() - t0) / (double)pairs;
}

/* Only the launch calls are timed; choosing the pointers, the gates and synchronising are not.
 * Thread `id` starts at its own place in the live blocks. */
__attribute__((noinline)) static double phase_launches(long id, cudaStream_t s, struct gate *g) {
    dim3 one = {1, 1, 1};
    void *p[6];
    long n = 42;
    double x = 1.5;
    void *args[8] = {&p[0], &p[1], &p[2], &p[3], &p[4], &p[5], &n, &x};
    double total = 0;
    for (long i = 0; i < launches; i++) {
        if (i % BATCH == 0) hold(g, s);
        for (int k = 0; k < 6; k++) p[k] = blocks[(id * 131 + i * 6 + k * 997) % live];
        double t = now_ns();
        CHECK(cudaLaunchKernel((const void *)k_eight, one, one, args, 0, s));
        total += now_ns() - t;
        if (i % BATCH == BATCH - 1 || i == launches - 1) release(g, s);
    }
    return total / (double)launches;
}

__attribute__((noinline)) static double phase_driver_launches(long id, cudaStream_t s,
                                                             struct gate *g) {
    void *p[6];
    long n = 42;
    double x = 1.5;
    void *args[8] = {&p[0], &p[1], &p[2], &p[3], &p[4], &p[5], &n, &x};
    double total = 0;
    for (long i = 0; i < launches; i++) {
        if (i % BATCH == 0) hold(g, s);
        for (int k = 0; k < 6; k++) p[k] = blocks[(id * 131 + i * 6 + k * 997) % live];
        double t = now_ns();
        CHECK((cudaError_t)cuLaunchKernel(eight, 1, 1, 1, 1, 1, 1, 0, (CUstream)s, args, NULL));
        total += now_ns() - t;
        if (i % BATCH == BATCH - 1 || i == launches - 1) release(g, s);
    }
    return total / (double)launches;
}

/* A worker's figures: its ns per operation, and when it began and ended each phase (the phase's
 * wall time is from the first begin to the last end: a thread that times the others could be
 * descheduled while they run, on a machine with fewer cores than threads). */
struct worker {
    pthread_t thread;
    long id;
    struct gate gate;
    double ns[PHASES], begin[PHASES], end[PHASES];
};

static void *work(void *arg) {
    struct worker *w = arg;
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (int phase = 0; phase < PHASES; phase++) {
        pthread_barrier_wait(&start);
        w->begin[phase] = now_ns();
        switch (phase) {
        case 0: w->ns[phase] = phase_pairs(); break;
        case 1: w->ns[phase] = phase_driver_pairs(); break;
        case 2: w->ns[phase] = phase_launches(w->id, s, &w->gate); break;
        default: w->ns[phase] = phase_driver_launches(w->id, s, &w->gate); break;
        }
        w->end[phase] = now_ns();
        pthread_barrier_wait(&done);
    }
    CHECK(cudaStreamDestroy(s));
    return NULL;
}

int main(int argc, char **argv) {
    live = option(argc, argv, "--live", 10000);
    pairs = option(argc, argv, "--pairs", 200000);
    launches = option(argc, argv, "--launches", 200000);
    long threads = option(argc, argv, "--threads", 1);
    if (live < 8 || pairs < 1 || launches < 1 || threads < 1 || threads > 1024) {
        fprintf(stderr, "hook_bench: --live must be >= 8, --pairs and --launches >= 1, "
                        "--threads 1 to 1024\n");
        return 2;
    }
    size_t sizes[8] = {8, 8, 8, 8, 8, 8, 8, 8};
    CHECK(cudaShimRegisterKernel(k_eight, "eight", 8, sizes, 0));
    CHECK(cudaGetFuncBySymbol((cudaFunction_t *)&eight, (const void *)k_eight));
    blocks = malloc((size_t)live * sizeof *blocks);
    for (long i = 0; i < live; i++) CHECK(cudaMalloc(&blocks[i], 4096));

    if (pthread_barrier_init(&start, NULL, (unsigned)threads) != 0 ||
        pthread_barrier_init(&done, NULL, (unsigned)threads) != 0) {
        fprintf(stderr, "hook_bench: cannot make the barriers\n");
        return 1;
    }
    struct worker *workers = calloc((size_t)threads, sizeof *workers);
    pthread_condattr_t monotonic;
    pthread_condattr_init(&monotonic);
    pthread_condattr_setclock(&monotonic, CLOCK_MONOTONIC);
    for (long t = 0; t < threads; t++) {
        workers[t].id = t;
        pthread_mutex_init(&workers[t].gate.lock, NULL);
        pthread_cond_init(&workers[t].gate.opened, &monotonic);
        if (pthread_create(&workers[t].thread, NULL, work, &workers[t]) != 0) {
            fprintf(stderr, "hook_bench: cannot start thread %ld\n", t);
            return 1;
        }
    }
    for (long t = 0; t < threads; t++) pthread_join(workers[t].thread, NULL);

    double ns[PHASES] = {0}, wall[PHASES];
    long timeouts = 0;
    for (long t = 0; t < threads; t++) timeouts += workers[t].gate.timeouts;
    for (int phase = 0; phase < PHASES; phase++) {
        double first = workers[0].begin[phase], last = workers[0].end[phase];
        for (long t = 0; t < threads; t++) {
            ns[phase] += workers[t].ns[phase];
            if (workers[t].begin[phase] < first) first = workers[t].begin[phase];
            if (workers[t].end[phase] > last) last = workers[t].end[phase];
        }
        ns[phase] /= (double)threads;
        wall[phase] = last - first;
    }
    double pair_ops = (double)threads * (double)pairs * 1e9;
    double launch_ops = (double)threads * (double)launches * 1e9;
    printf("malloc_free_pair_ns %.1f\n", ns[0]);
    printf("launch_ns %.1f\n", ns[2]);
    printf("driver_malloc_free_pair_ns %.1f\n", ns[1]);
    printf("driver_launch_ns %.1f\n", ns[3]);
    printf("malloc_free_pairs_per_s %.0f\n", pair_ops / wall[0]);
    printf("launches_per_s %.0f\n", launch_ops / wall[2]);
    printf("driver_malloc_free_pairs_per_s %.0f\n", pair_ops / wall[1]);
    printf("driver_launches_per_s %.0f\n", launch_ops / wall[3]);
    printf("gate_timeouts %ld\n", timeouts);
    for (long i = 0; i < live; i++) CHECK(cudaFree(blocks[i]));
    free(blocks);
    free(workers);
    return 0;
}
