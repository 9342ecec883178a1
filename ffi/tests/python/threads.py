"""Loads libotel_ctx_ffi.so with ctypes and attaches a thread context on three threads.

Usage: threads.py <path of libotel_ctx_ffi.so>. Prints "ready <pid>" once all three are
attached, and detaches when stdin closes.
"""
import ctypes
import os
import sys
import threading


class Result(ctypes.Structure):
    _fields_ = [("success", ctypes.c_bool), ("error_message", ctypes.c_char_p)]


class KeyResult(ctypes.Structure):
    _fields_ = [("success", ctypes.c_bool), ("error_message", ctypes.c_char_p), ("key", ctypes.c_uint8)]


class HandleResult(ctypes.Structure):
    _fields_ = [("success", ctypes.c_bool), ("error_message", ctypes.c_char_p), ("context", ctypes.c_void_p)]


class Attr(ctypes.Structure):
    _fields_ = [("key", ctypes.c_uint8), ("value", ctypes.c_char_p)]


class ProcessData(ctypes.Structure):
    _fields_ = [(name, ctypes.c_char_p) for name in (
        "deployment_environment_name", "service_instance_id", "service_name", "service_version",
        "telemetry_sdk_language", "telemetry_sdk_version", "telemetry_sdk_name")] + [
        ("resource_attributes", ctypes.c_void_p), ("extra_attributes", ctypes.c_void_p),
        ("thread_ctx_config", ctypes.c_void_p)]


lib = ctypes.CDLL(sys.argv[1])
lib.otel_process_ctx_publish.restype = Result
lib.otel_process_ctx_publish.argtypes = [ctypes.POINTER(ProcessData)]
lib.otel_thread_ctx_register_key.restype = KeyResult
lib.otel_thread_ctx_register_key.argtypes = [ctypes.c_char_p]
lib.otel_thread_ctx_new.restype = HandleResult
lib.otel_thread_ctx_new.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint8, ctypes.POINTER(Attr), ctypes.c_size_t]
lib.otel_thread_ctx_attach.restype = HandleResult
lib.otel_thread_ctx_attach.argtypes = [ctypes.c_void_p]
lib.otel_thread_ctx_detach.restype = ctypes.c_void_p
lib.otel_thread_ctx_free.argtypes = [ctypes.c_void_p]
lib.otel_process_ctx_drop_current.restype = ctypes.c_bool


def check(result, what):
    if not result.success:
        sys.exit(f"{what}: {result.error_message.decode()}")


data = ProcessData(b"test", b"00000000-0000-4000-8000-000000000004", b"python-threads", b"1.0.0",
                   b"python", b"0.1.0", b"otel-ctx-ffi-test")
check(lib.otel_process_ctx_publish(ctypes.byref(data)), "publish")
route = lib.otel_thread_ctx_register_key(b"http.route")
check(route, "register")
worker_key = lib.otel_thread_ctx_register_key(b"worker")
check(worker_key, "register")

attached = threading.Barrier(4)
finish = threading.Barrier(4)


def worker(i):
    attrs = (Attr * 2)(Attr(route.key, f"/python/{i}".encode()), Attr(worker_key.key, f"py-{i}".encode()))
    made = lib.otel_thread_ctx_new(bytes([0x21 * (i + 1)]) * 16, bytes([0xb0 + i]) * 8, 1, attrs, 2)
    check(made, "new")
    previous = lib.otel_thread_ctx_attach(made.context)
    check(previous, "attach")
    attached.wait()
    finish.wait()
    lib.otel_thread_ctx_free(lib.otel_thread_ctx_detach())


threads = [threading.Thread(target=worker, args=(i,)) for i in range(3)]
for t in threads:
    t.start()
attached.wait()
print(f"ready {os.getpid()}", flush=True)
sys.stdin.read()
finish.wait()
for t in threads:
    t.join()
sys.exit(0 if lib.otel_process_ctx_drop_current() else 1)
