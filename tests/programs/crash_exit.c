/*
 * crash_exit.c — a short program that makes N allocations (cudaMalloc + cudaFree pairs) and then
 * ends the way its first argument says, within milliseconds of its start:
 *   crash_exit exit|_exit|_Exit|abort|segv|own-handler N
 * exit returns through atexit handlers; _exit and _Exit skip them; abort raises SIGABRT; segv
 * writes through a null pointer (SIGSEGV); own-handler installs a SIGABRT handler of its own
 * before its first CUDA call (it prints "own handler" and ends with _exit(7)), then aborts.
 * Every ending must leave a whole trace (issue 14, item 8).
 */
#include <cuda_runtime.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void own_handler(int signal) {
    (void)signal;
    static const char line[] = "own handler\n";
    write(1, line, sizeof line - 1);
    _exit(7);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: crash_exit exit|_exit|_Exit|abort|segv|own-handler N\n");
        return 2;
    }
    const char *how = argv[1];
    long n = atol(argv[2]);
    if (strcmp(how, "own-handler") == 0) {
        signal(SIGABRT, own_handler);
    }
    for (long i = 0; i < n; i++) {
        void *p = NULL;
        cudaError_t e = cudaMalloc(&p, 4096);
        if (e != cudaSuccess) {
            fprintf(stderr, "crash_exit: cudaMalloc failed: %s\n", cudaGetErrorName(e));
            return 1;
        }
        cudaFree(p);
    }
    printf("allocated %ld\n", n);
    fflush(stdout);
    if (strcmp(how, "exit") == 0) {
        exit(3);
    } else if (strcmp(how, "_exit") == 0) {
        _exit(3);
    } else if (strcmp(how, "_Exit") == 0) {
        _Exit(3);
    } else if (strcmp(how, "abort") == 0 || strcmp(how, "own-handler") == 0) {
        abort();
    } else if (strcmp(how, "segv") == 0) {
        volatile int *null = NULL;
        *null = 1;
    }
    fprintf(stderr, "crash_exit: unknown ending %s\n", how);
    return 2;
}
