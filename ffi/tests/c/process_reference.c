// Written only against the reference otel_process_ctx.h (names, fields, semantics):
// publish, publish again (an update), fork (the child publishes its own), read back, drop.
// Prints "child <pid>" and "ready <pid>", then waits for stdin to close.
#define _GNU_SOURCE  // fork, read
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "otel_process_ctx.h"

_Static_assert(OTEL_PROCESS_CTX_DATA_ENTRIES == 10, "otel_process_ctx_data has 10 fields");

static void fail(const char *what, const char *message) {
  fprintf(stderr, "%s: %s\n", what, message ? message : "(no message)");
  exit(1);
}

static void expect(const char *what, const char *got, const char *want) {
  if (got == NULL || strcmp(got, want) != 0) {
    fprintf(stderr, "%s: got %s, want %s\n", what, got ? got : "NULL", want);
    exit(1);
  }
}

static void wait_for_eof(void) {
  char buf[64];
  while (read(0, buf, sizeof buf) > 0) {
  }
}

int main(void) {
  const char *resource_attributes[] = {"host.name", "c-host", "process.runtime.name", "c", NULL};
  const char *extra_attributes[] = {"example.extra", "yes", NULL};
  const char *key_map[] = {"http.route", "http.method", NULL};
  otel_thread_ctx_config_data thread_config = {
      .schema_version = "tlsdesc_v1_dev",
      .attribute_key_map = key_map,
  };
  otel_process_ctx_data data = {
      .deployment_environment_name = "test",
      .service_instance_id = "00000000-0000-4000-8000-000000000001",
      .service_name = "c-reference",
      .service_version = "1.0.0",
      .telemetry_sdk_language = "c",
      .telemetry_sdk_version = OTEL_PROCESS_CTX_VERSION_STRING,
      .telemetry_sdk_name = "otel-ctx-ffi-test",
      .resource_attributes = resource_attributes,
      .extra_attributes = extra_attributes,
      .thread_ctx_config = &thread_config,
  };
  otel_process_ctx_result result = otel_process_ctx_publish(&data);
  if (!result.success) fail("publish", result.error_message);
  data.service_version = "2.0.0";
  result = otel_process_ctx_publish(&data);
  if (!result.success) fail("publish again", result.error_message);

  otel_process_ctx_read_result read = otel_process_ctx_read();
  if (!read.success) fail("read", read.error_message);
  expect("service_name", read.data.service_name, "c-reference");
  expect("service_version", read.data.service_version, "2.0.0");
  expect("resource_attributes[1]", read.data.resource_attributes[1], "c-host");
  expect("extra_attributes[0]", read.data.extra_attributes[0], "example.extra");
  expect("schema_version", read.data.thread_ctx_config->schema_version, "tlsdesc_v1_dev");
  expect("attribute_key_map[1]", read.data.thread_ctx_config->attribute_key_map[1], "http.method");
  if (!otel_process_ctx_read_drop(&read)) fail("read_drop", NULL);

  fflush(stdout);
  pid_t child = fork();
  if (child < 0) fail("fork", "failed");
  if (child == 0) {
    data.service_instance_id = "00000000-0000-4000-8000-000000000002";
    result = otel_process_ctx_publish(&data);
    if (!result.success) fail("publish in the child", result.error_message);
    read = otel_process_ctx_read();
    if (!read.success) fail("read in the child", read.error_message);
    expect("child service_instance_id", read.data.service_instance_id,
           "00000000-0000-4000-8000-000000000002");
    otel_process_ctx_read_drop(&read);
    printf("child %d\n", (int)getpid());
    fflush(stdout);
    wait_for_eof();
    if (!otel_process_ctx_drop_current()) fail("drop in the child", NULL);
    return 0;
  }
  printf("ready %d\n", (int)getpid());
  fflush(stdout);
  wait_for_eof();
  int status = 0;
  if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    fail("child", "did not exit with 0");
  if (!otel_process_ctx_drop_current()) fail("drop", NULL);
  read = otel_process_ctx_read();
  if (read.success) fail("read after drop", "succeeded");
  return 0;
}
