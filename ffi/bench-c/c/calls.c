// One iteration of each operation of benches/c_calls.rs, written in C against otel_ctx.h:
// compiled by build.rs with the C compiler (outside Rust's LTO), so every call below goes
// through the library's C ABI as a C program's call does.
#include "otel_ctx.h"

// Attaches `context` to the calling thread's empty slot and detaches it again; returns
// it, or NULL when the attach failed or the slot was not empty.
otel_thread_ctx *otel_ctx_bench_c_attach_detach(otel_thread_ctx *context) {
  otel_thread_ctx_handle_result previous = otel_thread_ctx_attach(context);
  if (!previous.success || previous.context != NULL) return NULL;
  return otel_thread_ctx_detach();
}

// Updates the calling thread's attached context in place: these ids, flags 1, and two
// attributes, whose list is built here on every call as a caller builds it.
bool otel_ctx_bench_c_update_2(const uint8_t *trace_id, const uint8_t *span_id, uint8_t key0,
                               const char *value0, uint8_t key1, const char *value1) {
  otel_thread_ctx_attr attrs[2] = {{key0, value0}, {key1, value1}};
  return otel_thread_ctx_update(trace_id, span_id, 1, attrs, 2).success;
}
