"""A small Python service for the profilers' tests: three worker threads, each in a
request of its own route, each calling the same chain of Python functions
(work -> serve -> py_mid_hot -> py_leaf_hot) that burns CPU, with a thread context
published for each request.

Usage:
  service.py ffi <path of libotel_ctx_ffi.so>   publishes through the C ABI (ctypes)
  service.py ddtrace                            publishes through ddtrace's spans
  service.py none                               publishes nothing

With SERVICE_WAITERS=1, two more threads wait, each in a request of its own: one naps in
time.sleep (py_nap, route /nap), one waits for a threading.Lock that a thread without a
request holds 9 ms of every 10 (py_wait_lock, route /wait-lock): what an off-CPU profile
shows under their Python functions.

Prints "ready <pid> <tid> <tid> <tid> <trace> <trace> <trace>" (the workers' native
thread ids and their requests' trace ids, 32 hex digits) once every worker is in its
request; answers each line of standard input with the rounds of py_mid_hot the workers
have run, and exits when it closes. ddtrace names no route in its thread
contexts (its one attribute is datadog.local_root_span_id): the trace ids tell its
workers' samples apart.
"""
import ctypes
import os
import sys
import threading
import time

ROUTES = ["/checkout", "/search", "/cart"]
# Three workers; SERVICE_WORKERS=1 keeps one (a CPU-bound target without contention for
# the GIL, whose speed the benchmarks measure).
WORKERS = int(os.environ.get("SERVICE_WORKERS", "3"))
# py_mid_hot burns MID_SHARE of every round itself, py_leaf_hot the rest: the leaf's
# share of the workers' samples is about 1 - MID_SHARE.
ROUND = 3000
MID_SHARE = 0.25
WAITERS = os.environ.get("SERVICE_WAITERS") == "1"
WAIT_ROUTES = ["/nap", "/wait-lock"]
LOCK = threading.Lock()


def py_leaf_hot(n):
    x = 0
    for i in range(n):
        x += i * i
    return x


def py_mid_hot(n):
    x = 0
    for i in range(int(n * MID_SHARE / (1 - MID_SHARE))):
        x ^= i
    return x + py_leaf_hot(n)


def serve(i):
    while True:
        py_mid_hot(ROUND)
        ROUNDS[i] += 1


def py_nap():
    time.sleep(0.002)


def py_wait_lock():
    with LOCK:
        pass


def hold_lock():
    while True:
        with LOCK:
            time.sleep(0.009)
        time.sleep(0.001)


def wait(i):
    PUBLISHER.begin(WORKERS + i, WAIT_ROUTES[i])
    READY.wait()
    step = [py_nap, py_wait_lock][i]
    while True:
        step()


class Ffi:
    """The thread contexts published through libotel_ctx_ffi.so."""

    def __init__(self, path):
        class Result(ctypes.Structure):
            _fields_ = [("success", ctypes.c_bool), ("error_message", ctypes.c_char_p)]

        class KeyResult(ctypes.Structure):
            _fields_ = [("success", ctypes.c_bool), ("error_message", ctypes.c_char_p),
                        ("key", ctypes.c_uint8)]

        class HandleResult(ctypes.Structure):
            _fields_ = [("success", ctypes.c_bool), ("error_message", ctypes.c_char_p),
                        ("context", ctypes.c_void_p)]

        class Attr(ctypes.Structure):
            _fields_ = [("key", ctypes.c_uint8), ("value", ctypes.c_char_p)]

        class ProcessData(ctypes.Structure):
            _fields_ = [(name, ctypes.c_char_p) for name in (
                "deployment_environment_name", "service_instance_id", "service_name",
                "service_version", "telemetry_sdk_language", "telemetry_sdk_version",
                "telemetry_sdk_name")] + [
                ("resource_attributes", ctypes.c_void_p), ("extra_attributes", ctypes.c_void_p),
                ("thread_ctx_config", ctypes.c_void_p)]

        self.Attr = Attr
        lib = ctypes.CDLL(path)
        lib.otel_process_ctx_publish.restype = Result
        lib.otel_process_ctx_publish.argtypes = [ctypes.POINTER(ProcessData)]
        lib.otel_thread_ctx_register_key.restype = KeyResult
        lib.otel_thread_ctx_register_key.argtypes = [ctypes.c_char_p]
        lib.otel_thread_ctx_new.restype = HandleResult
        lib.otel_thread_ctx_new.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint8,
                                            ctypes.POINTER(Attr), ctypes.c_size_t]
        lib.otel_thread_ctx_attach.restype = HandleResult
        lib.otel_thread_ctx_attach.argtypes = [ctypes.c_void_p]
        self.lib = lib
        data = ProcessData(b"test", b"00000000-0000-4000-8000-000000000034", b"python-service",
                           b"1.0.0", b"python", b"0.1.0", b"otel-ctx-ffi-test")
        self.check(lib.otel_process_ctx_publish(ctypes.byref(data)), "publish")
        self.route = self.check(lib.otel_thread_ctx_register_key(b"http.route"), "register").key

    @staticmethod
    def check(result, what):
        if not result.success:
            sys.exit(f"{what}: {result.error_message.decode()}")
        return result

    def begin(self, i, route):
        attrs = (self.Attr * 1)(self.Attr(self.route, route.encode()))
        made = self.check(self.lib.otel_thread_ctx_new(
            bytes([0x31 + i]) * 16, bytes([0xc1 + i]) * 8, 1, attrs, 1), "new")
        self.check(self.lib.otel_thread_ctx_attach(made.context), "attach")
        return (bytes([0x31 + i]) * 16).hex()


class Nothing:
    """No thread contexts: the trace ids printed are zeros."""

    def begin(self, i, route):
        return "0" * 32


class Ddtrace:
    """The thread contexts ddtrace publishes for its active spans."""

    def __init__(self):
        from ddtrace.trace import tracer
        self.tracer = tracer

    def begin(self, i, route):
        span = self.tracer.trace("request", service="python-service", resource=route)
        span.set_tag("http.route", route)
        return f"{span.trace_id:032x}"


PUBLISHER = None
READY = threading.Barrier(WORKERS + 1 + (len(WAIT_ROUTES) if WAITERS else 0))
TIDS = [0] * WORKERS
TRACES = [""] * WORKERS
ROUNDS = [0] * WORKERS


def work(i):
    TIDS[i] = threading.get_native_id()
    TRACES[i] = PUBLISHER.begin(i, ROUTES[i])
    READY.wait()
    serve(i)


def main():
    global PUBLISHER
    PUBLISHER = {"ffi": lambda: Ffi(sys.argv[2]), "ddtrace": Ddtrace, "none": Nothing}[
        sys.argv[1]
    ]()
    for i in range(WORKERS):
        threading.Thread(target=work, args=(i,), name=f"worker-{i}", daemon=True).start()
    if WAITERS:
        threading.Thread(target=hold_lock, name="holder", daemon=True).start()
        for i in range(len(WAIT_ROUTES)):
            threading.Thread(target=wait, args=(i,), name=f"waiter-{i}", daemon=True).start()
    READY.wait()
    print("ready", os.getpid(), *TIDS, *TRACES, flush=True)
    # Each line read is answered with the rounds the workers have run (the benchmarks
    # measure the target's speed with it).
    for _ in sys.stdin:
        print(sum(ROUNDS), flush=True)


main()
