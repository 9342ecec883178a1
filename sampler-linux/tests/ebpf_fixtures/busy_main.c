/* Test target for the eBPF sampler, which sees only threads that are running: like the
 * TLS matrix's main.c, three threads attach distinct records, one thread never does,
 * and (with -DDLOPEN) one thread starts before the writer library is loaded and never
 * touches it; but every thread spins on the CPU instead of sleeping. Each thread prints
 * `thread <tid> tp=<hex> slot=<hex|-> record=<hex>`, then the program prints `ready`.
 * Reading `x` on standard input makes the first context thread return; the program
 * prints `gone <tid>` once it has been joined. End of input ends the program. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/syscall.h>

#include "../../../reader-linux/tests/fixtures/tls/writer.h"

#ifdef DLOPEN
#include <dlfcn.h>
static void *(*slot_fn)(void);
static void (*attach_fn)(struct otel_record *);
static void (*fill_fn)(struct otel_record *, uint8_t, const char *);
#else
#define slot_fn otel_fixture_slot
#define attach_fn otel_fixture_attach
#define fill_fn otel_fixture_fill
#endif

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t printed;
static const char *routes[] = {"/checkout", "/cart", "/search"};
static int leave_first; /* set by main: thread 1 returns */
static long first_tid;

static uintptr_t thread_pointer(void) {
    uintptr_t tp;
#if defined(__x86_64__)
    __asm__ volatile("mov %%fs:0, %0" : "=r"(tp));
#elif defined(__aarch64__)
    __asm__ volatile("mrs %0, tpidr_el0" : "=r"(tp));
#endif
    return tp;
}

static void report(const char *slot, void *record) {
    pthread_mutex_lock(&lock);
    printf("thread %ld tp=%lx slot=%s record=%lx\n", (long)syscall(SYS_gettid),
           (unsigned long)thread_pointer(), slot, (unsigned long)(uintptr_t)record);
    fflush(stdout);
    pthread_mutex_unlock(&lock);
}

/* Spins until told to leave (only the first context thread ever is). */
static void spin(int may_leave) {
    pthread_barrier_wait(&printed);
    volatile uint64_t iterations = 0;
    for (;;) {
        iterations = iterations + 1;
        if (may_leave && __atomic_load_n(&leave_first, __ATOMIC_RELAXED))
            return;
    }
}

static void *with_context(void *arg) {
    uint8_t n = (uint8_t)(uintptr_t)arg;
    struct otel_record *record = aligned_alloc(64, sizeof *record + 64);
    fill_fn(record, n, routes[n % 3]);
    attach_fn(record);
    char slot[32];
    snprintf(slot, sizeof slot, "%lx", (unsigned long)(uintptr_t)slot_fn());
    if (n == 1)
        first_tid = (long)syscall(SYS_gettid);
    report(slot, record);
    spin(n == 1);
    return NULL;
}

static void *without_context(void *arg) {
    (void)arg;
    char slot[32];
    snprintf(slot, sizeof slot, "%lx", (unsigned long)(uintptr_t)slot_fn());
    report(slot, NULL);
    spin(0);
    return NULL;
}

#ifdef DLOPEN
static pthread_barrier_t loaded;
static void *before_load(void *arg) {
    (void)arg;
    pthread_barrier_wait(&loaded);
    report("-", NULL);
    spin(0);
    return NULL;
}
#endif

int main(int argc, char **argv) {
    pthread_t t, first;
    int threads = 4;
#ifdef DLOPEN
    threads += 1;
    pthread_barrier_init(&printed, NULL, (unsigned)threads + 1);
    pthread_barrier_init(&loaded, NULL, 2);
    pthread_create(&t, NULL, before_load, NULL);
    if (argc < 2) { fprintf(stderr, "usage: %s LIBRARY\n", argv[0]); return 2; }
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
    if (!lib) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 1; }
    slot_fn = (void *(*)(void))dlsym(lib, "otel_fixture_slot");
    attach_fn = (void (*)(struct otel_record *))dlsym(lib, "otel_fixture_attach");
    fill_fn = (void (*)(struct otel_record *, uint8_t, const char *))dlsym(lib, "otel_fixture_fill");
    pthread_barrier_wait(&loaded);
#else
    (void)argc;
    (void)argv;
    pthread_barrier_init(&printed, NULL, (unsigned)threads + 1);
#endif
    pthread_create(&first, NULL, with_context, (void *)(uintptr_t)1);
    for (uintptr_t n = 2; n <= 3; n++) pthread_create(&t, NULL, with_context, (void *)n);
    pthread_create(&t, NULL, without_context, NULL);
    pthread_barrier_wait(&printed);
    pthread_mutex_lock(&lock);
    printf("ready\n");
    fflush(stdout);
    pthread_mutex_unlock(&lock);
    char c;
    while (read(0, &c, 1) > 0) {
        if (c == 'x' && !__atomic_load_n(&leave_first, __ATOMIC_RELAXED)) {
            __atomic_store_n(&leave_first, 1, __ATOMIC_RELAXED);
            pthread_join(first, NULL);
            printf("gone %ld\n", first_tid);
            fflush(stdout);
        }
    }
    return 0;
}
