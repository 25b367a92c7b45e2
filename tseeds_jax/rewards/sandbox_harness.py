"""The harness that runs inside the sandbox for assert-style tests (stdlib only; never imported by
the trainer: `grading` sends this file's text as the interpreter's `-c` program).

    python -I -B -c <this file> call   # one split test: run main.py, evaluate one call, report it
    python -I -B -c <this file> check  # one unsplittable test: a checker process runs the test
                                       # code, the program runs in a child that only serves calls

fd 3 is the status/result pipe to the reward worker: b"s" when the harness starts, then one frame
b"R" + repr(payload) + b"\\n" (a Python literal of lists, str, None, bool, parsed by the worker with
`ast.literal_eval`). fd 6 holds the spec (`marshal`, written by the worker). json (and with it `re`)
is imported by the checker only: a split test's run costs little more than a plain one.

The program (main.py) is run as the module `solution`, so `if __name__ == "__main__":
sys.exit(main())` does not run: an honest program's entry point cannot end the test, and a test
passes only when its own result arrives.

Values cross every boundary in a tagged form holding builtins only (`encode`): a result that is
not built of exactly None/bool/int/float/complex/str/bytes/list/tuple/dict/set/frozenset (an object
whose __eq__ is always true, a subclass of int, ...) is refused, which fails the test.

"call": the spec is {"setup": source, "call": expression}; nothing in it is an expected value (those
stay with the worker, which compares). "check": the spec, read only by the checker after the fork,
is {"test": source, "secret": hex}; the checker is non-dumpable (the program, same uid, cannot open
its /proc files; ptrace and process_vm_* are refused by seccomp) and holds the only copy of fd 3,
and it reports b"R" + ["pass", secret] only if the test code ran to its end.
"""

import marshal
import os
import resource
import sys
import types

_NPROC = 16  # replaced by the worker (counted per user namespace: set in here); 0: left alone
_type, _len, _repr, _isinstance = type, len, repr, isinstance
_MAX_DEPTH = 100


def encode(v, depth=0):
    t = _type(v)
    if depth > _MAX_DEPTH:
        raise ValueError("result nested too deeply")
    if v is None or t is bool or t is str:
        return v
    if t is int:
        return ["i", str(v)]
    if t is float:
        return ["f", _repr(v)]
    if t is complex:
        return ["c", _repr(v.real), _repr(v.imag)]
    if t is bytes:
        return ["y", v.hex()]
    if t is list or t is tuple or t is set or t is frozenset:
        items = list(v) if t is not list else v
        return [{list: "l", tuple: "t", set: "S", frozenset: "F"}[t], [encode(x, depth + 1) for x in items]]
    if t is dict:
        return ["d", [[encode(k, depth + 1), encode(x, depth + 1)] for k, x in v.items()]]
    raise TypeError(f"result of type {t.__name__[:60]} is not a plain value")


def decode(v, depth=0):
    if depth > _MAX_DEPTH:
        raise ValueError("value nested too deeply")
    if v is None or _type(v) in (bool, str):
        return v
    tag = v[0]
    if tag == "i":
        return int(v[1])
    if tag == "f":
        return float(v[1])
    if tag == "c":
        return complex(float(v[1]), float(v[2]))
    if tag == "y":
        return bytes.fromhex(v[1])
    if tag == "d":
        return {decode(k, depth + 1): decode(x, depth + 1) for k, x in v[1]}
    items = [decode(x, depth + 1) for x in v[1]]
    return {"l": list, "t": tuple, "S": set, "F": frozenset}[tag](items)


def _send(fd, obj):
    import json

    data = memoryview(json.dumps(obj).encode() + b"\n")
    while data:
        data = data[os.write(fd, data):]


def _recv(f):
    import json

    line = f.readline()
    if not line:
        raise EOFError("the other side ended")
    return json.loads(line)


def _read_all(fd):
    chunks = []
    while True:
        b = os.read(fd, 1 << 16)
        if not b:
            break
        chunks.append(b)
    os.close(fd)
    return b"".join(chunks)


def _report(obj):
    data = memoryview(b"R" + _repr(obj).encode("utf-8", "surrogatepass") + b"\n")
    while data:
        data = data[os.write(3, data):]


def _error(e):
    return ["error", _type(e).__name__[:60], str(e)[:200]]


def _load_program():
    """main.py as the module `solution` (not __main__); its names."""
    m = types.ModuleType("solution")
    m.__file__ = "main.py"
    sys.modules["solution"] = m
    sys.argv = ["main.py"]
    exec(compile(open("main.py", "rb").read(), "main.py", "exec"), m.__dict__)
    return m.__dict__


def run_call():
    spec = marshal.loads(_read_all(6))
    os.closerange(4, 1 << 20)
    try:
        ns = _load_program()
        exec(compile(spec["setup"], "<test setup>", "exec"), ns)
        payload = ["ok", encode(eval(compile(spec["call"], "<test>", "eval"), ns))]
    except BaseException as e:  # SystemExit too: ending the program early is not an answer
        payload = _error(e)
    _report(payload)
    os._exit(0)  # no atexit hook, finaliser or flush of the program's runs after its result


def _serve(r, w):
    """In the program's process: import main.py, then answer calls until the checker hangs up."""
    f = os.fdopen(r, "r")
    try:
        ns = _load_program()
    except BaseException as e:
        _send(w, _error(e))
        os._exit(0)
    _send(w, ["names", [k for k, v in list(ns.items()) if callable(v) and not k.startswith("__")]])
    while True:
        try:
            name, args, kwargs = _recv(f)
        except EOFError:
            os._exit(0)
        try:
            out = ["ok", encode(ns[name](*decode(args), **decode(kwargs)))]
        except BaseException as e:
            out = _error(e)
        _send(w, out)


def _proxy(name, f, w):
    def call(*args, **kwargs):
        _send(w, [name, encode(list(args)), encode(kwargs)])
        reply = _recv(f)
        if reply[0] == "ok":
            return decode(reply[1])
        exc = getattr(__builtins__, reply[1], None) if _isinstance(reply[1], str) else None
        if not (_isinstance(exc, _type) and issubclass(exc, Exception)):
            exc = RuntimeError
        raise exc(reply[2])
    call.__name__ = name
    return call


def run_check():
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE 0, before the program's process exists
        _report(["error", "OSError", "prctl(PR_SET_DUMPABLE) failed"])
        os._exit(0)
    to_prog_r, to_prog_w = os.pipe()
    to_chk_r, to_chk_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(3)
        os.close(6)
        os.close(to_prog_w)
        os.close(to_chk_r)
        libc.prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG SIGKILL
        os.closerange(max(to_prog_r, to_chk_w) + 1, 1 << 20)
        _serve(to_prog_r, to_chk_w)
    os.close(to_prog_r)
    os.close(to_chk_w)
    spec = marshal.loads(_read_all(6))  # only now: the program's process never had the test in memory
    f = os.fdopen(to_chk_r, "r")
    try:
        hello = _recv(f)
        if hello[0] != "names":  # the program failed to import (or says anything else): no pass
            raise RuntimeError(f"program: {str(hello[1:])[:200]}")
        ns = {"__name__": "__test__"}
        for name in hello[1]:
            # a program's `range` or `all` must not replace the checker's (an empty loop passes)
            # (the names come from the program's process: dunder names such as __builtins__ too)
            if (_isinstance(name, str) and name.isidentifier() and not name.startswith("__")
                    and not hasattr(__builtins__, name)):
                ns[name] = _proxy(name, f, to_prog_w)
        exec(compile(spec["test"], "<test>", "exec"), ns)
        payload = ["pass", spec["secret"]]
    except AssertionError as e:
        payload = ["fail", "AssertionError", str(e)[:200]]
    except BaseException as e:
        payload = _error(e)
    _report(payload)
    os._exit(0)


if __name__ == "__main__":
    if _NPROC:
        resource.setrlimit(resource.RLIMIT_NPROC, (_NPROC, _NPROC))
    os.write(3, b"s")
    os.closerange(4, 6)  # the source and seccomp fds, if bwrap left them
    os.closerange(7, 1 << 20)
    run_call() if sys.argv[1:] == ["call"] else run_check()
