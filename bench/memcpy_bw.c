/* memcpy bandwidth, the ceiling for same-host transfers in bench/fabric.sh: copies BLOCK-byte
 * messages through an AREA-byte source and destination (default 256 MiB, beyond the caches;
 * AREA = BLOCK copies the same buffers again and again, as the fabric benchmark does), prints
 * JSON. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    size_t block = argc > 1 ? strtoul(argv[1], 0, 10) : 1 << 20;
    size_t area = argc > 2 ? strtoul(argv[2], 0, 10) : 256u << 20;
    if (block == 0 || block > area) { fprintf(stderr, "block must be 1..%zu\n", area); return 2; }
    char *src = malloc(area), *dst = malloc(area);
    memset(src, 1, area);
    memset(dst, 2, area);
    size_t total = 0;
    double t0 = now(), t;
    do {
        for (size_t off = 0; off + block <= area; off += block) memcpy(dst + off, src + off, block);
        total += area / block * block;
        t = now();
    } while (t - t0 < 2.0);
    printf("{\"block\":%zu,\"area\":%zu,\"bytes\":%zu,\"seconds\":%.4f,\"gbps\":%.3f,\"check\":%d}\n", block, area, total,
           t - t0, total * 8 / (t - t0) / 1e9, dst[block / 2]);
    return 0;
}
