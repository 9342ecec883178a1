/* Benchmark target: four threads, each with a thread context attached (the TLS matrix's
 * writer), count loop iterations as fast as they can. Each line read on standard input
 * makes the program print the sum of the counters so far; end of input ends it. It
 * prints `ready` once every thread has attached its record. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "../fixtures/tls/writer.h"

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
    uint64_t n = 0;
    for (;;) {
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
