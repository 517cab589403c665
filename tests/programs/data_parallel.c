/*
 * data_parallel.c — data-parallel training on every device, one host thread per device, the
 * way DistributedDataParallel runs it: each device keeps a copy of the weights; each iteration
 * it allocates an activation, a gradient, a sum and a receive buffer, computes its own
 * gradient, gathers every device's gradient by peer copies (cudaMemcpyPeer; within one device
 * it is an ordinary copy), sums them in device order, takes the same SGD step and frees the
 * temporaries. The weights of all devices must stay bit-equal.
 *
 * Usage: data_parallel [--iters N] (default 40). Prints each device's weight checksum and
 * "weights agree", or what failed.
 */
#include <cuda_runtime.h>
#include <cuda_shim.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                          \
    do {                                                                                     \
        cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess) {                                                             \
            fprintf(stderr, "data_parallel: %s failed: %s\n", #call, cudaGetErrorName(e_)); \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

enum { N = 1 << 16, MAX_DEVICES = 8 };

static int devices, iters = 40;
static pthread_barrier_t barrier;
static float *gradients[MAX_DEVICES]; /* this iteration's gradient of each device */
static unsigned long long checksums[MAX_DEVICES];

/* forward(const float *w, float *act, int seed): act = w * seed-dependent input */
static void k_forward(void **args) {
    const float *w = *(const float **)args[0];
    float *act = *(float **)args[1];
    int seed = *(int *)args[2];
    for (int i = 0; i < N; i++) act[i] = w[i] * (float)((i * 7 + seed) % 13 - 6) / 8.0f;
}

/* backward(const float *act, float *grad): grad = act / 4 */
static void k_backward(void **args) {
    const float *act = *(const float **)args[0];
    float *grad = *(float **)args[1];
    for (int i = 0; i < N; i++) grad[i] = act[i] / 4.0f;
}

/* accumulate(float *grad, const float *other): grad += other */
static void k_accumulate(void **args) {
    float *grad = *(float **)args[0];
    const float *other = *(const float **)args[1];
    for (int i = 0; i < N; i++) grad[i] += other[i];
}

/* sgd(float *w, const float *grad): w -= grad / 64 */
static void k_sgd(void **args) {
    float *w = *(float **)args[0];
    const float *grad = *(const float **)args[1];
    for (int i = 0; i < N; i++) w[i] -= grad[i] / 64.0f;
}

static void launch(const void *kernel, void **args) {
    dim3 one = {1, 1, 1};
    CHECK(cudaLaunchKernel(kernel, one, one, args, 0, 0));
}

static void *train(void *arg) {
    int device = (int)(long)arg;
    CHECK(cudaSetDevice(device));
    for (int peer = 0; peer < devices; peer++)
        if (peer != device) CHECK(cudaDeviceEnablePeerAccess(peer, 0));
    float *w, *host = malloc(N * sizeof(float));
    for (int i = 0; i < N; i++) host[i] = (float)(i % 101) / 100.0f;
    CHECK(cudaMalloc((void **)&w, N * sizeof(float)));
    CHECK(cudaMemcpy(w, host, N * sizeof(float), cudaMemcpyHostToDevice));
    for (int it = 0; it < iters; it++) {
        float *act, *grad, *received;
        CHECK(cudaMalloc((void **)&act, N * sizeof(float)));
        CHECK(cudaMalloc((void **)&grad, N * sizeof(float)));
        int seed = it * MAX_DEVICES + device; /* each device its own batch */
        void *forward[] = {&w, &act, &seed};
        launch((const void *)k_forward, forward);
        void *backward[] = {&act, &grad};
        launch((const void *)k_backward, backward);
        CHECK(cudaFree(act));
        CHECK(cudaDeviceSynchronize());
        gradients[device] = grad;
        pthread_barrier_wait(&barrier); /* every gradient is ready */
        CHECK(cudaMalloc((void **)&received, N * sizeof(float)));
        float *sum;
        CHECK(cudaMalloc((void **)&sum, N * sizeof(float)));
        /* The same sum in the same order on every device, so the weights stay bit-equal. */
        for (int from = 0; from < devices; from++) {
            float *into = from == 0 ? sum : received;
            CHECK(cudaMemcpyPeer(into, device, gradients[from], from, N * sizeof(float)));
            if (from > 0) {
                void *accumulate[] = {&sum, &received};
                launch((const void *)k_accumulate, accumulate);
            }
        }
        void *sgd[] = {&w, &sum};
        launch((const void *)k_sgd, sgd);
        CHECK(cudaDeviceSynchronize());
        pthread_barrier_wait(&barrier); /* no one reads another's gradient any more */
        CHECK(cudaFree(received));
        CHECK(cudaFree(sum));
        CHECK(cudaFree(grad));
    }
    CHECK(cudaMemcpy(host, w, N * sizeof(float), cudaMemcpyDeviceToHost));
    unsigned long long checksum = 0;
    for (int i = 0; i < N; i++) {
        unsigned bits;
        memcpy(&bits, &host[i], sizeof bits);
        checksum = checksum * 1000003 + bits;
    }
    checksums[device] = checksum;
    CHECK(cudaFree(w));
    free(host);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--iters") == 0) iters = atoi(argv[2]);
    CHECK(cudaGetDeviceCount(&devices));
    if (devices < 2 || devices > MAX_DEVICES) {
        fprintf(stderr, "data_parallel: needs 2 to %d devices, found %d\n", MAX_DEVICES, devices);
        return 1;
    }
    size_t two[] = {sizeof(float *), sizeof(float *)};
    size_t three[] = {sizeof(float *), sizeof(float *), sizeof(int)};
    CHECK(cudaShimRegisterKernel(k_forward, "forward", 3, three, 0));
    CHECK(cudaShimRegisterKernel(k_backward, "backward", 2, two, 0));
    CHECK(cudaShimRegisterKernel(k_accumulate, "accumulate", 2, two, 0));
    CHECK(cudaShimRegisterKernel(k_sgd, "sgd", 2, two, 0));
    pthread_barrier_init(&barrier, NULL, (unsigned)devices);
    pthread_t threads[MAX_DEVICES];
    for (long d = 0; d < devices; d++) pthread_create(&threads[d], NULL, train, (void *)d);
    for (int d = 0; d < devices; d++) pthread_join(threads[d], NULL);
    int agree = 1;
    for (int d = 0; d < devices; d++) {
        printf("device %d weights %016llx\n", d, checksums[d]);
        agree &= checksums[d] == checksums[0];
    }
    if (!agree) {
        fprintf(stderr, "data_parallel: the devices' weights differ\n");
        return 1;
    }
    printf("weights agree\n");
    return 0;
}
