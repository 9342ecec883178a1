// The in-place changes of otel_ctx.h on the calling thread's attached context: append,
// append_truncated, truncate_attrs, attr_count, and their refusals. Leaves the context
//   http.route = "/items", http.method = "GET", user.agent = 127 x "é" (254 bytes)
// attached, prints "ready <pid>", and detaches when stdin closes.
#define _GNU_SOURCE  // read
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "otel_ctx.h"
#include "otel_process_ctx.h"

static void fail(const char *what, const char *message) {
  fprintf(stderr, "%s: %s\n", what, message ? message : "(no message)");
  exit(1);
}

static uint8_t key(const char *name) {
  otel_thread_ctx_key_result r = otel_thread_ctx_register_key(name);
  if (!r.success) fail(name, r.error_message);
  return r.key;
}

// A refusal whose message contains `needle`.
static void refused(const char *what, bool success, const char *message, const char *needle) {
  if (success) fail(what, "succeeded");
  if (message == NULL || strstr(message, needle) == NULL) fail(what, message);
}

static size_t count(const char *what, otel_thread_ctx_count_result r) {
  if (!r.success) fail(what, r.error_message);
  return r.count;
}

static void expect_count(size_t want) {
  size_t got = count("attr_count", otel_thread_ctx_attr_count());
  if (got != want) {
    fprintf(stderr, "attr_count: got %zu, want %zu\n", got, want);
    exit(1);
  }
}

int main(void) {
  otel_process_ctx_data data = {
      .deployment_environment_name = "test",
      .service_instance_id = "00000000-0000-4000-8000-000000000004",
      .service_name = "c-append",
      .service_version = "1.0.0",
      .telemetry_sdk_language = "c",
      .telemetry_sdk_version = "0.1.0",
      .telemetry_sdk_name = "otel-ctx-ffi-test",
  };
  otel_process_ctx_result published = otel_process_ctx_publish(&data);
  if (!published.success) fail("publish", published.error_message);
  uint8_t route = key("http.route"), method = key("http.method"), note = key("note"),
          agent = key("user.agent");

  // Nothing attached yet: every in-place change is refused.
  otel_thread_ctx_result r = otel_thread_ctx_append(method, "GET");
  refused("append before attach", r.success, r.error_message, "otel_thread_ctx_attach");
  otel_thread_ctx_count_result c = otel_thread_ctx_append_truncated(method, "GET");
  refused("append_truncated before attach", c.success, c.error_message, "otel_thread_ctx_attach");
  c = otel_thread_ctx_truncate_attrs(0);
  refused("truncate_attrs before attach", c.success, c.error_message, "otel_thread_ctx_attach");
  c = otel_thread_ctx_attr_count();
  refused("attr_count before attach", c.success, c.error_message, "otel_thread_ctx_attach");

  uint8_t trace_id[16], span_id[8];
  memset(trace_id, 0x31, sizeof trace_id);
  memset(span_id, 0xc1, sizeof span_id);
  otel_thread_ctx_attr first[] = {{route, "/items"}};
  otel_thread_ctx_handle_result made = otel_thread_ctx_new(trace_id, span_id, 1, first, 1);
  if (!made.success) fail("new", made.error_message);
  otel_thread_ctx_handle_result previous = otel_thread_ctx_attach(made.context);
  if (!previous.success || previous.context != NULL) fail("attach", previous.error_message);
  expect_count(1);

  r = otel_thread_ctx_append(method, "GET");
  if (!r.success) fail("append", r.error_message);
  expect_count(2);

  // Bad values are refused and change nothing.
  r = otel_thread_ctx_append(note, NULL);
  refused("append NULL", r.success, r.error_message, "NULL");
  static const char not_utf8[] = {(char)0xc3, 0x28, 0};
  r = otel_thread_ctx_append(note, not_utf8);
  refused("append non-UTF-8", r.success, r.error_message, "UTF-8");
  c = otel_thread_ctx_append_truncated(note, not_utf8);
  refused("append_truncated non-UTF-8", c.success, c.error_message, "UTF-8");
  char over[257];
  memset(over, 'v', 256);
  over[256] = 0;
  r = otel_thread_ctx_append(note, over);
  refused("append 256 bytes", r.success, r.error_message, "255 bytes");
  char *huge = malloc(40001);
  if (huge == NULL) fail("malloc", NULL);
  memset(huge, 'h', 40000);
  huge[40000] = 0;
  c = otel_thread_ctx_append_truncated(note, huge);
  refused("append_truncated 40000 bytes", c.success, c.error_message, "32767");
  free(huge);
  expect_count(2);

  // 150 x "é" is 300 bytes: cut at a character boundary to 254.
  char accents[301];
  for (int i = 0; i < 150; i++) memcpy(accents + 2 * i, "\xc3\xa9", 2);
  accents[300] = 0;
  size_t kept = count("append_truncated", otel_thread_ctx_append_truncated(note, accents));
  if (kept != 254) fail("append_truncated", "did not keep 254 bytes");
  expect_count(3);

  // Fill the 640-byte record: notes of 254 bytes until one is cut shorter to the room
  // left; then not even an empty entry fits, and the record keeps its entries.
  size_t notes = 1, more = kept;
  while (more == 254 && notes < 3) {
    more = count("append_truncated", otel_thread_ctx_append_truncated(note, accents));
    notes++;
  }
  if (more == 0 || more >= 254 || more % 2 != 0) fail("append_truncated", "bad cut");
  r = otel_thread_ctx_append(note, "x");
  refused("append to a full record", r.success, r.error_message, "640-byte record");
  c = otel_thread_ctx_append_truncated(note, "");
  refused("append_truncated to a full record", c.success, c.error_message, "640-byte record");
  expect_count(2 + notes);

  // Drop the notes, then append the user agent.
  if (count("truncate_attrs", otel_thread_ctx_truncate_attrs(2)) != 2)
    fail("truncate_attrs", "did not leave 2");
  expect_count(2);
  kept = count("append_truncated", otel_thread_ctx_append_truncated(agent, accents));
  if (kept != 254) fail("append_truncated", "did not keep 254 bytes");
  if (count("truncate_attrs", otel_thread_ctx_truncate_attrs(10)) != 3)
    fail("truncate_attrs over the count", "did not leave 3");
  expect_count(3);

  printf("ready %d\n", (int)getpid());
  fflush(stdout);
  char buf[64];
  while (read(0, buf, sizeof buf) > 0) {
  }
  otel_thread_ctx *mine = otel_thread_ctx_detach();
  if (mine == NULL) fail("detach", "returned NULL");
  otel_thread_ctx_free(mine);
  c = otel_thread_ctx_attr_count();
  refused("attr_count after detach", c.success, c.error_message, "otel_thread_ctx_attach");
  return otel_process_ctx_drop_current() ? 0 : 1;
}
