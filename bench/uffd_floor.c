/* The userfaultfd floor on this kernel: TRIALS x 1000 random first touches of 4 KB pages, each
 * resolved by one bare mechanism with no remora code around it, so `remora lazy bench
 * --transport local` can be read against what the kernel itself costs.
 *
 *   anon          no userfaultfd: the kernel's own fault, a first write (page allocated and
 *                 zeroed; a first read would only map the shared zero page)
 *   sigbus-copy   UFFD_FEATURE_SIGBUS; the faulting thread's handler does one UFFDIO_COPY
 *   sigbus-zero   the same with UFFDIO_ZEROPAGE (no page data: allocation and copy left out)
 *   sigbus-move   the same with UFFDIO_MOVE (Linux 6.8+): memcpy into a staging page (staging
 *                 refilled 64 pages at a time with MADV_POPULATE_WRITE), then move it in
 *   thread-block  a handler thread blocks in read(2) on the uffd and does UFFDIO_COPY
 *   thread-spin   the same handler thread spins on a non-blocking uffd
 *
 * Usage: uffd_floor MODE [TRIALS]; prints one JSON object. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef UFFD_FEATURE_MOVE
#define UFFD_FEATURE_MOVE (1 << 16)
struct uffdio_move { __u64 dst, src, len, mode; __s64 move; };
#define UFFDIO_MOVE _IOWR(UFFDIO, 0x05, struct uffdio_move)
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define PG 4096
#define NPAGES 1000
#define STAGE 64

enum { ANON, SB_COPY, SB_ZERO, SB_MOVE, TH_BLOCK, TH_SPIN };
static const char *names[] = {"anon", "sigbus-copy", "sigbus-zero", "sigbus-move",
                              "thread-block", "thread-spin"};
static int mode, uffd;
static char *src, *stage;
static char *volatile dst;
static size_t staged = STAGE;

static void die(const char *what) { perror(what); _exit(1); }

static void resolve(uintptr_t addr) {
    uintptr_t a = addr & ~(uintptr_t)(PG - 1);
    size_t off = a - (uintptr_t)dst;
    if (mode == SB_ZERO) {
        struct uffdio_zeropage z = {.range = {a, PG}};
        if (ioctl(uffd, UFFDIO_ZEROPAGE, &z)) die("UFFDIO_ZEROPAGE");
    } else if (mode == SB_MOVE) {
        if (staged == STAGE) {
            if (madvise(stage, STAGE * PG, MADV_POPULATE_WRITE)) die("MADV_POPULATE_WRITE");
            staged = 0;
        }
        char *s = stage + staged++ * PG;
        memcpy(s, src + off, PG);
        struct uffdio_move m = {.dst = a, .src = (uintptr_t)s, .len = PG};
        if (ioctl(uffd, UFFDIO_MOVE, &m)) die("UFFDIO_MOVE");
    } else {
        struct uffdio_copy c = {.dst = a, .src = (uintptr_t)src + off, .len = PG};
        if (ioctl(uffd, UFFDIO_COPY, &c)) die("UFFDIO_COPY");
    }
}

static void on_sigbus(int sig, siginfo_t *si, void *uc) {
    (void)sig, (void)uc;
    resolve((uintptr_t)si->si_addr);
}

static void *handler(void *arg) {
    (void)arg;
    struct uffd_msg m;
    for (;;) {
        if (read(uffd, &m, sizeof m) == sizeof m && m.event == UFFD_EVENT_PAGEFAULT)
            resolve(m.arg.pagefault.address);
    }
    return 0;
}

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

int main(int argc, char **argv) {
    mode = -1;
    for (int i = 0; argc > 1 && i <= TH_SPIN; i++)
        if (!strcmp(argv[1], names[i])) mode = i;
    if (mode < 0) {
        fprintf(stderr, "usage: uffd_floor anon|sigbus-copy|sigbus-zero|sigbus-move|"
                        "thread-block|thread-spin [TRIALS]\n");
        return 2;
    }
    int trials = argc > 2 ? atoi(argv[2]) : 50;
    if (trials < 1) trials = 1;
    int sigbus = mode == SB_COPY || mode == SB_ZERO || mode == SB_MOVE;
    if (mode != ANON) {
        uffd = syscall(SYS_userfaultfd, O_CLOEXEC | (mode == TH_SPIN ? O_NONBLOCK : 0));
        if (uffd < 0) die("userfaultfd");
        struct uffdio_api api = {.api = UFFD_API};
        if (sigbus) api.features = UFFD_FEATURE_SIGBUS;
        if (mode == SB_MOVE) api.features |= UFFD_FEATURE_MOVE;
        if (ioctl(uffd, UFFDIO_API, &api)) die("UFFDIO_API");
    }
    if (sigbus) {
        struct sigaction sa = {0};
        sa.sa_sigaction = on_sigbus;
        sa.sa_flags = SA_SIGINFO;
        sigaction(SIGBUS, &sa, 0);
    }
    src = mmap(0, NPAGES * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
               -1, 0);
    stage = mmap(0, STAGE * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (src == MAP_FAILED || stage == MAP_FAILED) die("mmap");
    memset(src, 0x5a, NPAGES * PG);
    size_t order[NPAGES];
    for (size_t i = 0; i < NPAGES; i++) order[i] = i;
    srand(1);
    pthread_t th;
    double sum = 0, sum2 = 0;
    for (int t = 0; t < trials; t++) {
        char *d = mmap(0, NPAGES * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (d == MAP_FAILED) die("mmap");
        madvise(d, NPAGES * PG, MADV_NOHUGEPAGE); /* 4 KB faults, as remora's bench */
        dst = d;
        if (mode != ANON) {
            struct uffdio_register r = {.range = {(uintptr_t)d, NPAGES * PG},
                                        .mode = UFFDIO_REGISTER_MODE_MISSING};
            if (ioctl(uffd, UFFDIO_REGISTER, &r)) die("UFFDIO_REGISTER");
        }
        if (t == 0 && (mode == TH_BLOCK || mode == TH_SPIN)) pthread_create(&th, 0, handler, 0);
        for (size_t i = NPAGES - 1; i > 0; i--) {
            size_t j = rand() % (i + 1), k = order[i];
            order[i] = order[j];
            order[j] = k;
        }
        double t0 = now_us();
        if (mode == ANON)
            for (size_t i = 0; i < NPAGES; i++) ((volatile char *)d)[order[i] * PG] = 1;
        else
            for (size_t i = 0; i < NPAGES; i++) (void)((volatile char *)d)[order[i] * PG];
        double us = (now_us() - t0) / NPAGES;
        /* every installed page holds the source's bytes (zeros for UFFDIO_ZEROPAGE) */
        unsigned good = 0, want = mode == SB_ZERO ? 0 : 0x5a;
        for (size_t i = 0; i < NPAGES; i++) good += (unsigned char)d[i * PG + PG - 1] == want;
        if (mode != ANON && good != NPAGES) {
            fprintf(stderr, "%s: %u of %d pages hold the wrong bytes\n", names[mode],
                    NPAGES - good, NPAGES);
            return 1;
        }
        sum += us;
        sum2 += us * us;
        munmap(d, NPAGES * PG);
    }
    double mean = sum / trials, var = sum2 / trials - mean * mean;
    printf("{\"mode\":\"%s\",\"trials\":%d,\"faults\":%d,\"mean_us\":%.2f,\"std_us\":%.2f}\n",
           names[mode], trials, NPAGES, mean, sqrt(var > 0 ? var : 0));
    return 0;
}
