/* The plain-socket peer for bench/fabric.sh: one process sends COUNT datagrams of SIZE bytes
 * with sendto() to another that receives them with recvfrom(); prints the receiver's figures
 * as JSON. No batching, no GSO: the baseline a UDP application gets without remora. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s SIZE COUNT\n", argv[0]);
        return 2;
    }
    size_t size = strtoul(argv[1], 0, 10);
    long count = strtol(argv[2], 0, 10);
    int rx = socket(AF_INET, SOCK_DGRAM, 0);
    int big = 64 << 20;
    setsockopt(rx, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (bind(rx, (struct sockaddr *)&a, sizeof a)) { perror("bind"); return 1; }
    socklen_t al = sizeof a;
    getsockname(rx, (struct sockaddr *)&a, &al);
    pid_t pid = fork();
    if (pid == 0) {
        int tx = socket(AF_INET, SOCK_DGRAM, 0);
        char *buf = calloc(1, size);
        usleep(100000);
        for (long i = 0; i < count; i++)
            if (sendto(tx, buf, size, 0, (struct sockaddr *)&a, sizeof a) < 0) { perror("sendto"); _exit(1); }
        _exit(0);
    }
    char *buf = malloc(size + 1);
    struct timeval tv = {.tv_sec = 1};
    setsockopt(rx, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    long got = 0;
    double t0 = 0, t1 = 0;
    while (got < count) {
        ssize_t n = recvfrom(rx, buf, size + 1, 0, 0, 0);
        if (n < 0) break; /* idle for a second: the rest was dropped */
        if (got == 0) t0 = now();
        t1 = now();
        got++;
    }
    waitpid(pid, 0, 0);
    double secs = t1 - t0 > 0 ? t1 - t0 : 1e-9;
    printf("{\"size\":%zu,\"sent\":%ld,\"received\":%ld,\"seconds\":%.6f,\"gbps\":%.3f}\n", size,
           count, got, secs, (double)(got - 1) * size * 8 / secs / 1e9);
    return 0;
}
