# The `python-frames` case of `stacks-workload hostile`: a CPython (3.13+) process whose
# thread `spinner` spins in C (hashlib, the GIL released) under the Python frame of `spin`,
# while the main thread rewrites that thread's frame chain in place through ctypes, one phase
# after another: the caller link pointing back at the frame itself (a loop), at a kernel
# address, at an unmapped page, flipping between good and bad as fast as it can (changing while
# read), and the caller frame's code object pointing at garbage (bytes 0x41: its name a
# pointer nowhere). Each phase is undone before the next, and all before `spin` returns, so
# the interpreter itself never follows a corrupt link. Prints what it did as JSON.
#
# Layout used (CPython 3.13 and 3.14, non-debug builds): a frame object's `f_frame` at 24; an
# `_PyInterpreterFrame`'s `f_executable` at 0 and `previous` at 8. Checked at start: the
# interpreter frame found must name the code of the frame object it came from.
import ctypes
import hashlib
import json
import sys
import threading
import time

seconds = float(sys.argv[1])
data = b"x" * (4 << 20)
stop = threading.Event()
calls = [0]


def spin():
    while not stop.is_set():
        hashlib.sha256(data).digest()
        calls[0] += 1


t = threading.Thread(target=spin, name="spinner")
t.start()
time.sleep(0.2)

word = ctypes.c_uint64
frame = sys._current_frames()[t.ident]
while frame.f_code is not spin.__code__:
    frame = frame.f_back
iframe = word.from_address(id(frame) + 24).value
executable = word.from_address(iframe)
previous = word.from_address(iframe + 8)
if executable.value & ~7 != id(spin.__code__):
    stop.set()
    t.join()
    sys.exit("this CPython's frame layout is not the one assumed")
good_previous = previous.value
caller_executable = word.from_address(good_previous)
good_caller = caller_executable.value

phases = []
step = seconds / 6


def phase(name, apply):
    end = time.monotonic() + step
    n = 0
    while time.monotonic() < end:
        apply(n)
        n += 1
        if name != "flipping":
            time.sleep(0.001)
    previous.value = good_previous
    caller_executable.value = good_caller
    phases.append({"phase": name, "writes": n})


def set_previous(v):
    previous.value = v


phase("good", lambda n: None)
phase("loop", lambda n: set_previous(iframe))
phase("kernel", lambda n: set_previous(0xFFFF888000000000))
phase("unmapped", lambda n: set_previous(0x1000))
phase("flipping", lambda n: set_previous(good_previous if n % 2 else iframe))
garbage = ctypes.create_string_buffer(b"\x41" * 4096)
phase("code-garbage", lambda n: setattr(caller_executable, "value", ctypes.addressof(garbage)))
stop.set()
t.join()
print(json.dumps({"workload": "hostile", "case": "python-frames", "pid": __import__("os").getpid(),
                  "spinner_tid": t.native_id, "calls": calls[0], "phases": phases}))
