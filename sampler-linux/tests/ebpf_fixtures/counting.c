/* Benchmark target: four threads, each with a thread context attached (the TLS matrix's
 * writer), count loop iterations as fast as they can. Each line read on standard input
 * makes the program print the sum of the counters so far; end of input ends it. It
 * prints `ready` once every thread has attached its record.
 *
 * Each iteration does some arithmetic (16 steps of a xorshift generator, multiplied and
 * summed: a few dozen cycles), as CPU-bound code does. A loop of nothing but an increment
 * and a store is an outlier whose speed collapses around interrupts: on the 2-vCPU VM this
 * benchmark was written on, 2,000 timer ticks a second slowed such a loop by 14 to 21%
 * even when the BPF program returned at its first test, while they slow this loop by
 * about 0.5%. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "../../../reader-linux/tests/fixtures/tls/writer.h"

#define THREADS 4

/* One counter per cache line: the threads never share a line. */
static struct {
    uint64_t n;
    char pad[56];
} counters[THREADS] __attribute__((aligned(64)));
static pthread_barrier_t started;
static const char *routes[] = {"/checkout", "/cart", "/search", "/health"};

static void *count(void *arg) {
    uintptr_t i = (uintptr_t)arg;
    struct otel_record *record = aligned_alloc(64, sizeof *record + 64);
    otel_fixture_fill(record, (uint8_t)(i + 1), routes[i]);
    otel_fixture_attach(record);
    pthread_barrier_wait(&started);
    uint64_t n = 0, x = 0x9e3779b97f4a7c15ull + i, sum = 0;
    for (;;) {
        for (int k = 0; k < 16; k++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            sum += x * 0x2545f4914f6cdd1dull;
        }
        /* Keeps the arithmetic: the compiler must produce `sum`. */
        __asm__ volatile("" : : "r"(sum));
        n++;
        /* A relaxed store per iteration: main reads a recent value without a lock. */
        __atomic_store_n(&counters[i].n, n, __ATOMIC_RELAXED);
    }
    return NULL;
}

int main(void) {
    pthread_t t;
    pthread_barrier_init(&started, NULL, THREADS + 1);
    for (uintptr_t i = 0; i < THREADS; i++) pthread_create(&t, NULL, count, (void *)i);
    pthread_barrier_wait(&started);
    printf("ready\n");
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        uint64_t sum = 0;
        for (int i = 0; i < THREADS; i++) sum += __atomic_load_n(&counters[i].n, __ATOMIC_RELAXED);
        printf("%llu\n", (unsigned long long)sum);
        fflush(stdout);
    }
    return 0;
}
