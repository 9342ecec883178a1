// Three threads attach their own thread context through otel_ctx.h, then update it in
// place; prints "ready <pid>" once all are attached, and detaches when stdin closes.
#define _GNU_SOURCE  // pthread barriers
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "otel_ctx.h"
#include "otel_process_ctx.h"

static pthread_barrier_t attached, finish;
static uint8_t route_key, worker_key;

static void fail(const char *what, const char *message) {
  fprintf(stderr, "%s: %s\n", what, message ? message : "(no message)");
  exit(1);
}

static void *worker(void *arg) {
  int i = (int)(long)arg;
  uint8_t trace_id[16], span_id[8];
  memset(trace_id, 0x11 * (i + 1), sizeof trace_id);
  memset(span_id, 0xa0 + i, sizeof span_id);
  char route[32], name[32];
  snprintf(route, sizeof route, "/start/%d", i);
  snprintf(name, sizeof name, "worker-%d", i);
  otel_thread_ctx_attr attrs[] = {{route_key, route}, {worker_key, name}};
  otel_thread_ctx_handle_result made = otel_thread_ctx_new(trace_id, span_id, 1, attrs, 2);
  if (!made.success) fail("new", made.error_message);
  otel_thread_ctx_handle_result previous = otel_thread_ctx_attach(made.context);
  if (!previous.success || previous.context != NULL) fail("attach", previous.error_message);
  snprintf(route, sizeof route, "/thread/%d", i);
  otel_thread_ctx_result updated = otel_thread_ctx_update(trace_id, span_id, 1, attrs, 2);
  if (!updated.success) fail("update", updated.error_message);
  pthread_barrier_wait(&attached);
  pthread_barrier_wait(&finish);
  otel_thread_ctx *mine = otel_thread_ctx_detach();
  if (mine == NULL) fail("detach", "returned NULL");
  otel_thread_ctx_free(mine);
  return NULL;
}

int main(void) {
  otel_process_ctx_data data = {
      .deployment_environment_name = "test",
      .service_instance_id = "00000000-0000-4000-8000-000000000003",
      .service_name = "c-threads",
      .service_version = "1.0.0",
      .telemetry_sdk_language = "c",
      .telemetry_sdk_version = "0.1.0",
      .telemetry_sdk_name = "otel-ctx-ffi-test",
  };
  otel_process_ctx_result published = otel_process_ctx_publish(&data);
  if (!published.success) fail("publish", published.error_message);
  otel_thread_ctx_key_result key = otel_thread_ctx_register_key("http.route");
  if (!key.success) fail("register", key.error_message);
  route_key = key.key;
  key = otel_thread_ctx_register_key("worker");
  if (!key.success) fail("register", key.error_message);
  worker_key = key.key;

  pthread_barrier_init(&attached, NULL, 4);
  pthread_barrier_init(&finish, NULL, 4);
  pthread_t threads[3];
  for (long i = 0; i < 3; i++) pthread_create(&threads[i], NULL, worker, (void *)i);
  pthread_barrier_wait(&attached);
  printf("ready %d\n", (int)getpid());
  fflush(stdout);
  char buf[64];
  while (read(0, buf, sizeof buf) > 0) {
  }
  pthread_barrier_wait(&finish);
  for (int i = 0; i < 3; i++) pthread_join(threads[i], NULL);
  return otel_process_ctx_drop_current() ? 0 : 1;
}
