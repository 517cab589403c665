/*
 * fork_exit.c — a program that forks without exec and whose child ends with exit(), as a
 * data-loading worker may: the child inherits itermem's recorder but not its writer thread,
 * and must still exit. The parent allocates before and frees after the child ends.
 * Prints "parent ok" once the child has exited with status 0.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECK(call)                                                                    \
    do {                                                                               \
        cudaError_t e_ = (call);                                                       \
        if (e_ != cudaSuccess) {                                                       \
            fprintf(stderr, "fork_exit: %s failed: %s\n", #call, cudaGetErrorName(e_)); \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

int main(void) {
    void *block = NULL;
    CHECK(cudaMalloc(&block, 1 << 20));
    fflush(stdout);
    pid_t child = fork();
    if (child < 0) {
        perror("fork_exit: fork");
        return 1;
    }
    if (child == 0)
        exit(0); /* runs atexit handlers, itermem's included */
    int status = 0;
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "fork_exit: the child did not exit cleanly\n");
        return 1;
    }
    CHECK(cudaFree(block));
    printf("parent ok\n");
    return 0;
}
