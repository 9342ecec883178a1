"""A Python program whose main thread runs module-level code: a `while` loop at the top
of the script calls functions, one of which sums a generator expression, and calls
`sorted` with a key, a C function that calls back into Python. It prints `ready <pid>`
and loops until it is killed."""

import os
import sys


def other_inner(n):
    s = 0
    for i in range(n):
        s += i * i
    return s


def other_outer(n):
    return other_inner(n) + sum(x for x in range(n))


values = [3, 1, 2] * 100
print("ready", os.getpid(), flush=True)
sys.stdout.close()
while True:
    other_outer(2000)
    sorted(values, key=lambda v: -v)
