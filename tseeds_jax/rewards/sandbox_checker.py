"""Check mode of the sandbox harness: an unsplittable test source runs in a checker process that
the program cannot reach (stdlib only; `_common.harness_args` appends this file to
`sandbox_harness` and sends both as the interpreter's `-c` program).

The checker (pid 1 of the sandbox) makes itself non-dumpable, forks the program's process and only
then reads its spec from fd 6: {"test": source (prepared by `checker_source` in the worker: the
prompt's helpers, asserts counted, uncalled `check`/`test_*` called), "secret": hex, "entries":
names the program must define itself, "wall_s"/"cpu_s": limits of each call}. The program's process
never holds the test code or the secret; ptrace and process_vm_* are refused by seccomp; fd 3 is
the checker's alone. The frame is ["pass", secret, asserts] only if the test ran to its end and
executed at least one assert; ["noassert"] if it executed none.

The test runs as `__main__` in a namespace whose missing names are looked up in the program's
process when they are not builtins (a program's `range` or `all` never replaces the checker's); an
entry point named like a builtin is the program's (and must be defined by it). `import solution`
/ `from solution import f` give the same lookups. Plain values cross as `encode` makes them;
anything else stays in the program's process and the test holds a handle: calling it, its
attributes and methods, iterating it, `len`, `in`, indexing and `bool` are answered there, as plain
values or further handles. Two handles compare by the program's own `__eq__` (both sides are its
objects); a handle never equals a plain value. A list/dict/set/bytearray argument that a call
mutated is updated in place in the checker. `StopIteration` raised by a program call becomes a
RuntimeError (PEP 479's rule: it must not end the test's `all(map(candidate, xs))`). unittest
TestCases run (also through `unittest.main()`), each of their `assert*` calls counted.
"""

import builtins as _builtins

if "_IN_SANDBOX" not in globals():  # imported in the worker (tests, lint): the harness's names
    import os

    from tseeds_jax.rewards.sandbox_harness import (
        _error,
        _exit,
        _int,
        _isinstance,
        _len,
        _next_message,
        _report,
        _str,
        _type,
        decode,
        encode,
    )
    from tseeds_jax.rewards.sandbox_server import (
        _SERVE_W,
        _Limit,
        _Lines,
        _on_xcpu_serve,
        _send,
        _serve,
        _Timeout,
    )


# --- the checker's process ---

_CHAN = {}  # "lines": _Lines from the program, "w": fd to it, "pid", "wall_s"
_COUNT = [0]
_STATE = {"unittest_ran": False, "ns": None}


class _Forged(BaseException):
    """The program's process broke the reply protocol (it rebound the server's code): tampering."""


def _ask(*req):
    """One request to the program's process; its plain answer (handles for the rest)."""
    if "dead" in _CHAN:
        raise RuntimeError(f"the program's process ended ({_CHAN['dead']})")
    try:
        _send(_CHAN["w"], list(req))
        reply = _CHAN["lines"].get(_CHAN["wall_s"])
    except _Timeout:
        _kill_program("timeout")
        raise
    except (EOFError, OSError, ValueError) as e:
        _kill_program("ended")
        raise RuntimeError(f"the program's process ended: {e}"[:200]) from None
    if reply[0] == "ok":
        return reply
    if reply[0] == "stop":
        if req[0] != "next":  # only `next` may end an iteration; for any other request "stop"
            raise _Forged(f"the program's process answered {req[0]!r} with 'stop'")  # is forged
        raise StopIteration
    if reply[0] == "limit":
        _kill_program("cpu")
        raise _Limit("cpu_limit")
    if reply[0] == "missing":
        raise KeyError(req[1])
    name, msg = (reply[1], reply[2]) if _len(reply) >= 3 else ("RuntimeError", _str(reply)[:200])
    if name in ("StopIteration", "StopAsyncIteration"):
        raise RuntimeError(f"the program raised {name} (PEP 479: it must not end the test's loop)")
    # a class of the program's (`class BadInput(ValueError)`) arrives as its nearest builtin base,
    # so that the test's `except ValueError` / `pytest.raises(ValueError)` catches it
    for n in (name, *(reply[3:4] if _len(reply) >= 4 else ())):
        exc = getattr(_builtins, n, None) if _isinstance(n, str) else None
        if _isinstance(exc, type) and issubclass(exc, Exception) and exc is not StopIteration:
            raise exc(msg)
    raise RuntimeError(f"{name}: {msg}"[:300])


def _kill_program(why):
    import signal

    _CHAN["dead"] = why
    try:
        os.kill(_CHAN["pid"], signal.SIGKILL)
    except OSError:
        pass


def _value(reply_value):
    return decode(reply_value, 0, lambda h: _Handle(h[1], h[2]))


def _arg(v):
    return encode(v, 0, _handle_ref)


def _handle_ref(v):
    if _type(v) is _Handle:
        return ["h", object.__getattribute__(v, "_hid"), ""]
    raise TypeError(f"the test passes a {_type(v).__name__} to the program: only plain values and the "
                    "program's own objects cross")


class _Handle:
    """One object of the program's process (see module docstring)."""

    __slots__ = ("_hid", "_kind")

    def __init__(self, hid, kind):
        object.__setattr__(self, "_hid", hid)
        object.__setattr__(self, "_kind", kind)

    def _op(self, op, *rest):
        return _value(_ask(op, object.__getattribute__(self, "_hid"), *rest)[1])

    def __call__(self, *args, **kwargs):
        sent, named = [_arg(a) for a in args], {k: _arg(v) for k, v in kwargs.items()}
        reply = _ask("call", object.__getattribute__(self, "_hid"), sent, named)
        for i, new in reply[2].items():
            _copy_back(args[_int(i)], _value(new))
        return _value(reply[1])

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return self._op("attr", name)

    def __setattr__(self, name, value):
        self._op("setattr", name, _arg(value))

    def __iter__(self):
        return self._op("iter")

    def __next__(self):
        return self._op("next")

    def __len__(self):
        return self._op("len")

    def __bool__(self):
        return self._op("bool")

    def __contains__(self, item):
        return self._op("contains", _arg(item))

    def __getitem__(self, key):
        return self._op("getitem", _arg(key))

    def __setitem__(self, key, value):
        self._op("setitem", _arg(key), _arg(value))

    def __delitem__(self, key):
        self._op("delitem", _arg(key))

    def __eq__(self, other):
        if _type(other) is not _Handle:
            return NotImplemented  # never equal to a plain value: no program code decides that
        return self._op("eq", _arg(other))

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = object.__hash__

    def __repr__(self):
        return self._op("repr")

    def __str__(self):
        return self._op("str")


def _copy_back(orig, new):
    t = _type(orig)
    if t is list or t is bytearray:
        orig[:] = new
    elif t is dict or t is set:
        orig.clear()
        orig.update(new)


def _lookup(name, entry):
    try:
        return _value(_ask("get", name)[1])
    except KeyError:
        if entry:
            raise NameError(f"the program does not define {name!r}") from None
        raise


def _implicit_module(name):
    """The module a test means by a name it uses without importing it (`math`, `np`): the
    checker's own import, whatever the program bound that name to (an instance or a ModuleType
    subclass of its own would answer `math.isclose` itself)."""
    import sys

    if name == "np":
        return "numpy"
    return name if name in sys.stdlib_module_names and not name.startswith("_") else None


class _TestNS(dict):
    """The test's globals: names it does not bind come from the program (builtins excepted; a
    module name means the checker's own import of that module, never the program's object)."""

    def __missing__(self, name):
        entry = name in _STATE["entries"]
        if not entry and (name.startswith("__") or hasattr(_builtins, name)):
            raise KeyError(name)
        module = None if entry else _implicit_module(name)
        value = None
        if module is None:
            value = _lookup(name, entry)
        if module is not None:  # the real module, whatever the program bound the name to
            import importlib

            value = self[name] = importlib.import_module(module)
        return value


class _SolutionModule(type(_builtins)):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return _lookup(name, False)
        except KeyError:
            raise AttributeError(f"module 'solution' has no attribute {name!r}") from None


def _asserted():
    _COUNT[0] += 1


def _counting(method):
    def counted(*args, **kwargs):
        _COUNT[0] += 1
        return method(*args, **kwargs)
    return counted


def _prepare_unittest():
    import unittest

    for name in dir(unittest.TestCase):
        attr = getattr(unittest.TestCase, name)
        if name.startswith(("assert", "fail")) and callable(attr) and not _isinstance(attr, type):
            setattr(unittest.TestCase, name, _counting(attr))
    unittest.main = _unittest_main


def _unittest_main(*args, **kwargs):
    """`unittest.main()` as the test calls it: run its TestCases here (the real one would look for
    them in the harness's own __main__ and exit)."""
    _run_unittest()


def _run_unittest():
    import unittest

    if _STATE["unittest_ran"]:
        return
    _STATE["unittest_ran"] = True
    ns = _STATE["ns"]
    cases = [v for k, v in list(dict.items(ns)) if _isinstance(v, type) and issubclass(v, unittest.TestCase)
             and v.__module__ == "__main__"]
    suite = unittest.TestSuite([unittest.defaultTestLoader.loadTestsFromTestCase(c) for c in cases])
    result = unittest.TestResult()
    suite.run(result)
    bad = result.failures + result.errors
    if bad:
        raise AssertionError(f"{bad[0][0]}: {bad[0][1].strip().splitlines()[-1]}"[:300])


def run_check():
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE 0, before the program's process exists
        _report(["error", "OSError", "prctl(PR_SET_DUMPABLE) failed"])
        _exit(0)
    hello = _next_message()  # limits and entry points: nothing secret
    to_prog_r, to_prog_w = os.pipe()
    to_chk_r, to_chk_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        for fd in (3, 6, to_prog_w, to_chk_r):
            os.close(fd)
        libc.prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG SIGKILL
        os.closerange(max(to_prog_r, to_chk_w) + 1, 1 << 20)
        if hello.get("cpu_s"):
            import _signal

            _SERVE_W[0] = to_chk_w
            _signal.signal(_signal.SIGXCPU, _on_xcpu_serve)
        _serve(to_prog_r, to_chk_w, hello.get("entries", ()), hello.get("cpu_s", 0))
    os.close(to_prog_r)
    os.close(to_chk_w)
    spec = _next_message()  # only now: the program's process never had the test in memory
    _CHAN.update(lines=_Lines(to_chk_r), w=to_prog_w, pid=pid, wall_s=hello.get("wall_s"))
    _STATE["entries"] = set(hello.get("entries", ()))
    _report(_verdict(spec))
    _exit(0)


def _verdict(spec):
    import sys

    try:
        ready = _CHAN["lines"].get(_CHAN["wall_s"])
        if ready[0] != "ready":  # the program failed to import (or says anything else): no pass
            return ["error", *[_str(x)[:200] for x in ready[1:3]]] if _len(ready) >= 3 else \
                ["error", "RuntimeError", f"program: {_str(ready)[:200]}"]
        ns = _TestNS(__name__="__main__", __tseeds_asserted__=_asserted, __tseeds_unittest__=_run_unittest)
        _STATE["ns"] = ns
        sys.modules["solution"] = _SolutionModule("solution")
        if "unittest" in spec["test"]:
            _prepare_unittest()
        try:
            exec(compile(spec["test"], "<test>", "exec"), ns)
        except SystemExit as e:  # the test's own sys.exit(0) / unittest's ending: done
            if e.code not in (None, 0, False):
                return ["fail", "SystemExit", f"the test exited with {e.code!r}"[:200]]
    except AssertionError as e:
        return ["fail", "AssertionError", _str(e)[:200]]
    except _Timeout as e:
        return ["error", "Timeout", _str(e)[:200]]
    except _Limit:
        return ["error", "CpuLimit", "a call ran past its CPU limit"]
    except _Forged as e:
        return ["tamper", "forged_reply", _str(e)[:200]]
    except BaseException as e:  # noqa: BLE001 - whatever else ends the test: no pass
        return _error(e)
    if _COUNT[0] == 0:
        return ["noassert"]
    return ["pass", spec["secret"], _COUNT[0]]
