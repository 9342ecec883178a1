// A service that publishes its process context and keeps its thread's context on the
// request it serves, through the C ABI (libotel_ctx_ffi).
#define _POSIX_C_SOURCE 199309L  // clock_gettime
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "otel_ctx.h"
#include "otel_process_ctx.h"

static void work(long ms) {  // a stand-in for the request's work
  struct timespec start, now;
  clock_gettime(CLOCK_MONOTONIC, &start);
  do clock_gettime(CLOCK_MONOTONIC, &now);
  while ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000 < ms);
}

static volatile sig_atomic_t stopping;
static void stop(int number) { stopping = number; }

int main(void) {
  signal(SIGINT, stop);                                                 // Ctrl-C
  signal(SIGTERM, stop);                                                // kill, systemctl stop
  otel_process_ctx_data data = {.deployment_environment_name = "prod", .service_instance_id = "i-1",
      .service_name = "checkout", .service_version = "1.4.2", .telemetry_sdk_language = "c",
      .telemetry_sdk_version = "0.1.0", .telemetry_sdk_name = "my-sdk"};
  otel_process_ctx_result published = otel_process_ctx_publish(&data);  // again to update
  if (!published.success) { fprintf(stderr, "%s\n", published.error_message); return 1; }
  uint8_t route = otel_thread_ctx_register_key("http.route").key;       // updates the key map
  uint8_t method = otel_thread_ctx_register_key("http.method").key;
  uint8_t trace_id[16] = {0x4b, 0xf9, 0x2f, 0x35}, span_id[8] = {0x00, 0xf0, 0x67};
  otel_thread_ctx_attr attrs[] = {{route, "/cart"}};
  otel_thread_ctx *ctx = otel_thread_ctx_new(trace_id, span_id, 0x01, attrs, 1).context;
  otel_thread_ctx_attach(ctx);                                          // no allocation
  for (uint8_t request = 0; !stopping; request++) {                     // until stopped
    span_id[7] = request;
    otel_thread_ctx_update(trace_id, span_id, 0x01, attrs, 1);          // in place
    otel_thread_ctx_append(method, "GET");                              // one more, in place
    work(10);
  }
  otel_thread_ctx_free(otel_thread_ctx_detach());
  otel_process_ctx_drop_current();
  return 0;
}
