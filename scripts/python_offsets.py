#!/usr/bin/env python3
# scripts/python_offsets.py — the offsets stacks-record reads in CPython, found in the live
# interpreter running it (docs/python-frames.md, "Offsets verified").
"""Find, in the CPython running this script, the offsets stacks-record reads (docs/python-frames.md).

Run it with each interpreter to verify: `/root/.pyenv/versions/3.12.1/bin/python3 scripts/python_offsets.py`.
It runs itself again with a library preloaded (built with cc) whose constructor takes 37
pthread keys first: CPython's key is then not 0, and its `Py_tss_t` ({1, key}) is found at one
offset of `_PyRuntime` only (`{1, 0}` is a common pair of words).
Every offset is found by searching the live interpreter's own structures with ctypes reads
(no Python call between taking a frame and reading it: a helper would be the current frame) for
a value known from Python: the thread state (`PyThreadState_Get`), its native thread id, the
current frame's code object, a code object's attributes. Prints one `name offset` per line;
a field found at no offset, or at several, is printed with all candidates, for a human to
settle with the CPython headers.
"""

import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
import threading

KEYS_C = """#include <pthread.h>
__attribute__((constructor)) static void take(void)
{
	pthread_key_t k;
	for (int i = 0; i < 37; i++)
		pthread_key_create(&k, 0);
}
"""

if "STACKS_OFFSETS_KEYS" not in os.environ:
    tmp = tempfile.mkdtemp(prefix="python-offsets-")
    src, lib = os.path.join(tmp, "keys.c"), os.path.join(tmp, "keys.so")
    with open(src, "w") as f:
        f.write(KEYS_C)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", lib, src, "-lpthread"], check=True)
    env = dict(os.environ, STACKS_OFFSETS_KEYS="1", LD_PRELOAD=lib)
    code = subprocess.run([sys.executable, *sys.argv], env=env).returncode
    shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(code)

libc = ctypes.CDLL(None)
api = ctypes.pythonapi
api.PyThreadState_Get.restype = ctypes.c_void_p
libc.pthread_getspecific.restype = ctypes.c_void_p
libc.pthread_getspecific.argtypes = [ctypes.c_uint]


MEM = os.open("/proc/self/mem", os.O_RDONLY)


def read(addr, n):
    """`n` bytes at `addr`, b"" when unmapped (a wrong guess must not crash the search)."""
    try:
        return os.pread(MEM, n, addr)
    except OSError:
        return b""


def word(addr):
    b = read(addr, 8)
    return int.from_bytes(b, "little") if len(b) == 8 else 0


def u32(addr):
    b = read(addr, 4)
    return int.from_bytes(b, "little") if len(b) == 4 else 0


def found(name, candidates):
    print(name, " ".join(str(c) for c in candidates) if candidates else "NOT FOUND")


CODE_ADAPTIVE = {0x30B: 184, 0x30C: 192, 0x30D: 200}.get(sys.hexversion >> 16, 0)
runtime = ctypes.addressof(ctypes.c_char.in_dll(api, "_PyRuntime"))
print("version", hex(sys.hexversion), sys.version.split()[0])
tstate = api.PyThreadState_Get()

# The pthread key whose value is this thread's PyThreadState, and the Py_tss_t holding it
# ({int _is_initialized = 1; pthread_key_t _key}) in _PyRuntime.
keys = [k for k in range(1024) if libc.pthread_getspecific(k) == tstate]
found("tss_key_value", keys)
found(
    "runtime.autoTSSkey",
    [o for o in range(0, 4096, 4) if keys and u32(runtime + o) == 1 and u32(runtime + o + 4) == keys[0]],
)
found("tstate.native_thread_id", [o for o in range(0, 512, 8) if word(tstate + o) == threading.get_native_id()])


def frame_fields():
    """Called from `caller`: this frame's code object is found through the thread state."""
    # The thread state and what its pointers point to, as they are in this frame: read by C
    # calls (ctypes from_address) with no Python call in between, once the pointers that can
    # be read were found (with Python helpers, which move the current frame while they run).
    snap = (ctypes.c_char * 512).from_address(tstate).raw
    me, up = id(sys._getframe().f_code), id(sys._getframe(1).f_code)
    ptrs = [(o, int.from_bytes(snap[o : o + 8], "little")) for o in range(0, 512, 8)]
    ptrs = [(o, p) for o, p in ptrs if 4096 <= p < 1 << 47 and len(read(p, 64)) == 64]
    deref = {}
    for o, p in ptrs:
        deref[o] = (ctypes.c_char * 64).from_address(p).raw
    direct, via = [], []
    for o, p in ptrs:
        at = deref[o]
        for fo in range(0, 64, 8):
            if int.from_bytes(at[fo : fo + 8], "little") == me:
                direct.append((o, fo))
        # 3.11/3.12: the pointer is cframe, current_frame in it (at `co`) is this frame.
        for co in (0, 8):
            q = int.from_bytes(at[co : co + 8], "little")
            if q < 4096 or q >= 1 << 47:
                continue
            for fo in range(0, 64, 8):
                if word(q + fo) == me:
                    via.append((o, co, fo, q))
    found("tstate.current_frame (frame.code)", [f"{o} (code {fo})" for o, fo in direct])
    found("tstate.cframe, cframe.current_frame (frame.code)", [f"{o}, {co} (code {fo})" for o, co, fo, _ in via])
    frame = via[0][3] if via else (int.from_bytes(snap[direct[0][0] : direct[0][0] + 8], "little") if direct else 0)
    code_off = via[0][2] if via else (direct[0][1] if direct else 0)
    if frame:
        prev = [o for o in range(0, 64, 8) if word(frame + o) and word(word(frame + o) + code_off) == up]
        found("frame.previous", prev)
        # The chain from here: code (this function's, `caller`'s, `<module>`'s, then the
        # C-level entry's), the bytes at 68 (3.11 is_entry) and 70 (3.12+ owner; 3 = the
        # C stack's shim frame), and the instruction pointer at 56 against f_lasti.
        if prev:
            f, names = frame, {me: "frame_fields", up: "caller", id(sys._getframe(2).f_code): "<module>"}
            lasti = {me: sys._getframe().f_lasti, up: sys._getframe(1).f_lasti}
            for _ in range(4):
                if not f:
                    break
                c = word(f + code_off)
                at = (word(f + 56) - (c + CODE_ADAPTIVE)) // 2
                print("frame", names.get(c, hex(c)), "byte68", read(f + 68, 1)[0], "byte70", read(f + 70, 1)[0], "instr", at, "f_lasti/2", lasti.get(c, -1) // 2)
                f = word(f + prev[0])
    return frame, code_off


def caller():
    return frame_fields()


frame, code_off = caller()
code = caller.__code__
found("code.co_filename", [o for o in range(0, 256, 8) if word(id(code) + o) == id(code.co_filename)])
found("code.co_qualname", [o for o in range(0, 256, 8) if word(id(code) + o) == id(code.co_qualname)])
found("code.co_linetable", [o for o in range(0, 256, 8) if word(id(code) + o) == id(code.co_linetable)])
found(
    "code.co_firstlineno",
    [o for o in range(0, 256, 4) if u32(id(code) + o) == code.co_firstlineno and u32(id(code) + o + 4) != u32(id(code) + o)],
)
first = code.co_code[:2]
found(
    "code.co_code_adaptive (first code unit)",
    [o for o in range(160, 320, 2) if read(id(code) + o, 2) == first or (sys.hexversion >= 0x30D0000 and o % 8 == 0 and read(id(code) + o + 2, 2) == code.co_code[2:4])],
)
ascii_name = "frame_fields"
found("str.ascii_data", [o for o in range(0, 96, 8) if read(id(ascii_name) + o, len(ascii_name)) == ascii_name.encode()])
latin = "caf\u00e9_x"
found("str.compact_data", [o for o in range(0, 128, 8) if read(id(latin) + o, len(latin)) == latin.encode("latin-1")])
found("str.length", [o for o in range(0, 64, 8) if word(id(ascii_name) + o) == len(ascii_name)])
blob = b"stacks-bytes"
found("bytes.size, data", [(o, o + 16) for o in range(0, 64, 8) if word(id(blob) + o) == len(blob) and read(id(blob) + o + 16, len(blob)) == blob])

# 3.13+: _Py_DebugOffsets at the start of _PyRuntime (cookie "xdebugpy"), its first fields.
if read(runtime, 8) == b"xdebugpy":
    names = "version free_threaded rt.size rt.finalizing rt.interpreters_head".split()
    names += "is.size is.id is.next is.threads_head is.gc is.imports_modules is.sysdict is.builtins is.ceval_gil is.gil is.gil_enabled is.gil_locked is.gil_holder".split()
    names += "ts.size ts.prev ts.next ts.interp ts.current_frame ts.thread_id ts.native_thread_id ts.datastack_chunk ts.status".split()
    names += "fr.size fr.previous fr.executable fr.instr_ptr fr.localsplus fr.owner".split()
    names += "co.size co.filename co.name co.qualname co.linetable co.firstlineno co.argcount co.localsplusnames co.localspluskinds co.co_code_adaptive".split()
    print("debug_offsets", " ".join(f"{n}={word(runtime + 8 + 8 * i)}" for i, n in enumerate(names)))
