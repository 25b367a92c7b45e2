"""The harness that runs inside the sandbox for assert-style tests (stdlib only; never imported by
the trainer for running: `_common.harness_args` sends this file's text, plus `sandbox_checker`'s
in check mode, as the interpreter's `-c` program). The worker imports it only for `decode`.

    python -I -B -c <this file> steps  # a split test source: the program, then its steps in order
    python -I -B -c <this file + sandbox_checker> check  # an unsplittable source (sandbox_checker)

fd 3 carries b"s" when the harness starts, then result frames b"R" + repr(list) + b"\\n" (Python
literals of lists, str, int, float, None, bool; parsed outside with `ast.literal_eval`). fd 6 carries
messages from the worker: 4-byte little-endian length + `marshal` payload (length 0: the end).
stdout is /dev/null (assert tests do not grade it; a program's debug prints cost nothing).

"steps": the program (main.py) is run as the module `solution`, so `if __name__ == "__main__":
sys.exit(main())` does not run. Message 0 is {"entries": [names the program must define itself],
"cpu_s": per-step CPU seconds}; frame [0, "done"] (or an error) answers it. Then each message k is
{"exec": source} (a setup statement: frame [k, "done"]) or {"eval": expression} (frame [k, "ok",
value]), run in the program's own namespace, in the test's order: state, mutation and rebinding are
Python's. The worker sends message k+1 only after frame k came back, so the program never holds a
later statement while it computes an earlier answer; no expected value is ever sent (the worker
compares). Errors come back as [k, "error", type name, message], values that are not plain as
[k, "refused", why] (or, for {"eval": ..., "keep": True}, [k, "opaque", type name]: the value is
kept, and a following {"method": (name, args, kwargs)} calls that method of it inside), a step past
its CPU seconds as [k, "limit", "cpu_limit"] (SIGXCPU).

Values cross every boundary in a tagged form holding builtins only (`encode`): None, bool, str and
finite floats as themselves; small ints as themselves, larger ones as hex (no 4,300-digit limit);
containers tagged. Subclasses of int/float/complex/str/bytes/list/tuple/set/frozenset/dict
(IntEnum, defaultdict, OrderedDict, namedtuples) are read through the base type's own C methods, so
no program code runs and an overridden `__eq__` never decides; Counter, dict views, Fraction and
Decimal get tags of their own and are rebuilt outside as real Counters/views/Fractions/Decimals
(numpy scalars as their Python value). Anything else (an object whose __eq__ is always true) is
refused, which fails the test.

Every builtin the harness uses is bound to a name of its own before the program runs: a program
that replaces `builtins.eval` or `os.write` does not change how its steps are evaluated or reported.
"""

import _signal
import marshal
import os
import resource
import sys
import types

_IN_SANDBOX = True  # sandbox_checker, concatenated after this file, finds the names here
_NPROC = 16  # replaced by the worker (counted per user namespace: set in here); 0: left alone
_MAX_DEPTH = 100
_SMALL = 1 << 62
_type, _len, _repr, _isinstance, _issubclass = type, len, repr, isinstance, issubclass
_list, _tuple, _dict, _set, _frozenset, _str, _int = list, tuple, dict, set, frozenset, str, int
_float, _complex, _bytes, _bytearray, _getattr = float, complex, bytes, bytearray, getattr
_eval, _exec, _compile, _iter, _zip, _range = eval, exec, compile, iter, zip, range
_BaseException, _object_getattribute = BaseException, object.__getattribute__
_write, _read, _exit, _close, _getrusage = os.write, os.read, os._exit, os.close, resource.getrusage
_setrlimit, _getrlimit = resource.setrlimit, resource.getrlimit
_int_int, _int_fmt, _float_float, _float_repr = int.__int__, int.__format__, float.__float__, float.__repr__
_complex_complex, _str_str, _bytes_bytes = complex.__complex__, str.__str__, bytes.__bytes__
_list_copy, _tuple_iter, _set_copy, _fset_copy, _dict_copy = (list.copy, tuple.__iter__, set.copy,
                                                                frozenset.copy, dict.copy)
_bytes_hex, _bytearray_hex, _bytearray_copy = bytes.hex, bytearray.hex, bytearray.copy
_dict_getitem = dict.__getitem__
_KEYS, _VALUES, _ITEMS = type({}.keys()), type({}.values()), type({}.items())
_CONTAINER_TAG = {list: "l", tuple: "t", set: "S", frozenset: "F"}
_INF = float("inf")


def _finite(x):
    return x - x == 0.0  # False for inf and nan, without importing math


def _named_base(t, module, name):
    """The class `module.name` in t's MRO (stdlib types recognised without importing them here)."""
    for c in _type.__getattribute__(t, "__mro__"):
        if c.__module__ == module and c.__qualname__ == name:
            return c
    return None


def encode(v, depth=0, other=None):
    """A builtins-only, literal-safe form of `v`. `other(v)`: how to send anything that is not a
    plain value (the checker's handles); None: refuse it (TypeError)."""
    if depth > _MAX_DEPTH:
        raise ValueError("result nested too deeply")
    t = _type(v)
    if v is None or t is bool or t is str:
        return v
    if t is int:
        return v if -_SMALL < v < _SMALL else ["i", _int_fmt(v, "x")]
    if t is float:
        return v if _finite(v) else ["f", _float_repr(v)]
    if t is complex:
        return ["c", _float_repr(v.real), _float_repr(v.imag)]
    if t is bytes:
        return ["y", _bytes_hex(v)]
    if t is bytearray:
        return ["b", _bytearray_hex(v)]
    if t is list or t is tuple or t is set or t is frozenset:
        return [_CONTAINER_TAG[t], [encode(x, depth + 1, other) for x in v]]
    if t is dict:
        return ["d", [[encode(k, depth + 1, other), encode(x, depth + 1, other)] for k, x in v.items()]]
    if t is _KEYS or t is _VALUES or t is _ITEMS or _issubclass(t, (_KEYS, _VALUES, _ITEMS)):
        kind = "K" if _issubclass(t, _KEYS) else "V" if _issubclass(t, _VALUES) else "I"
        return [kind, [encode(x, depth + 1, other) for x in _list(v)]]
    odict = _named_base(t, "collections", "OrderedDict") if _issubclass(t, dict) else None
    if odict is not None:
        # its order is part of its equality (OrderedDict == OrderedDict): it stays one, read in
        # its own order by the base class's C methods
        return ["O", [[encode(k, depth + 1, other), encode(_dict_getitem(v, k), depth + 1, other)]
                      for k in _list(odict.__iter__(v))]]
    if _issubclass(t, dict) and _named_base(t, "collections", "Counter") is not None:
        # a Counter stays one (a missing key counts 0): its items, read as a dict's
        return ["C", encode(_dict_copy(v), depth + 1, other)[1]]
    exact = _exact(v, t)
    if exact is not None:
        return encode(exact, depth + 1, other)
    special = _special(v, t, depth, other)
    if special is not None:
        return special
    if other is not None:
        return other(v)
    raise TypeError(f"result of type {t.__name__[:60]} is not a plain value")


def _exact(v, t):
    """The value of a subclass of a plain type, read through the base type's C methods."""
    for base, read in ((int, _int_int), (float, _float_float), (complex, _complex_complex), (str, _str_str),
                       (bytes, _bytes_bytes), (bytearray, _bytearray_copy), (list, _list_copy),
                       (frozenset, _fset_copy), (set, _set_copy), (dict, _dict_copy)):
        if _issubclass(t, base):
            return read(v)
    if _issubclass(t, tuple):
        return _tuple(_tuple_iter(v))
    return None


def _special(v, t, depth, other):
    """Fraction, Decimal and numpy scalars (the program imported them; we do not)."""
    frac = _named_base(t, "fractions", "Fraction")
    if frac is not None:
        n, d = _object_getattribute(v, "_numerator"), _object_getattribute(v, "_denominator")
        return ["q", encode(n, depth + 1), encode(d, depth + 1)]
    dec = _named_base(t, "decimal", "Decimal")
    if dec is not None:
        return ["D", _str_str(dec.__str__(v))]
    if t.__module__ == "numpy" and _getattr(t, "__name__", "") not in ("ndarray", "matrix"):
        item = _getattr(v, "item", None)
        if item is not None:  # a numpy scalar: its Python value (np.int64(3) == 3, as in Python)
            return encode(item(), depth + 1, other)
    return None


def decode(v, depth=0, handle=None):
    """The value `encode` sent. `handle(v)`: what a checker handle becomes (None: refused)."""
    if depth > _MAX_DEPTH:
        raise ValueError("value nested too deeply")
    t = _type(v)
    if v is None or t is bool or t is str or t is int or t is float:
        return v
    tag = v[0]
    if tag == "i":
        return _int(v[1], 16)
    if tag == "f":
        return _float(v[1])
    if tag == "c":
        return _complex(_float(v[1]), _float(v[2]))
    if tag == "y":
        return _bytes.fromhex(v[1])
    if tag == "b":
        return _bytearray.fromhex(v[1])
    if tag == "d":
        return {decode(k, depth + 1, handle): decode(x, depth + 1, handle) for k, x in v[1]}
    if tag in ("l", "t", "S", "F"):
        items = [decode(x, depth + 1, handle) for x in v[1]]
        return {"l": _list, "t": _tuple, "S": _set, "F": _frozenset}[tag](items)
    if tag == "K":
        return _dict.fromkeys(decode(x, depth + 1, handle) for x in v[1]).keys()
    if tag == "V":
        return _dict(_zip(_range(_len(v[1])), (decode(x, depth + 1, handle) for x in v[1]))).values()
    if tag == "I":
        return _dict(decode(x, depth + 1, handle) for x in v[1]).items()
    if tag == "O":
        import collections

        return collections.OrderedDict((decode(k, depth + 1, handle), decode(x, depth + 1, handle))
                                       for k, x in v[1])
    if tag == "C":
        import collections

        return collections.Counter({decode(k, depth + 1, handle): decode(x, depth + 1, handle)
                                    for k, x in v[1]})
    if tag == "q":
        import fractions

        return fractions.Fraction(decode(v[1], depth + 1), decode(v[2], depth + 1))
    if tag == "D":
        import decimal

        return decimal.Decimal(v[1])
    if handle is not None and tag in ("h", "p"):
        return handle(v)
    raise ValueError(f"unknown tag {str(tag)[:20]!r}")


def _report(obj):
    data = memoryview(b"R" + _repr(obj).encode("utf-8", "surrogatepass") + b"\n")
    while data:
        data = data[_write(3, data):]


def _error(e):
    """[error, type name, message, the nearest builtin base class's name]."""
    base = next((c.__name__ for c in _type.__getattribute__(_type(e), "__mro__")
                 if c.__module__ == "builtins"), "BaseException")
    try:
        msg = _str(e)[:200]
    except _BaseException:  # a __str__ of the program's that raises: no message
        msg = ""
    return ["error", _type(e).__name__[:60], msg, base]


def _read_exact(fd, n):
    buf = b""
    while _len(buf) < n:
        b = _read(fd, n - _len(buf))
        if not b:
            raise EOFError("the worker hung up")
        buf += b
    return buf


def _next_message(fd=6):
    """The next message from the worker; None at the end."""
    n = _int.from_bytes(_read_exact(fd, 4), "little")
    return marshal.loads(_read_exact(fd, n)) if n else None


def _load_program():
    """main.py as the module `solution` (not __main__); its names. Read as UTF-8 text: a coding
    declaration (latin-1) would garble the program's non-ASCII strings, which arrive as UTF-8."""
    m = types.ModuleType("solution")
    m.__file__ = "main.py"
    sys.modules["solution"] = m
    sys.argv = ["main.py"]
    with open("main.py", encoding="utf-8-sig", errors="surrogateescape") as f:
        src = f.read()
    _exec(_compile(src, "main.py", "exec"), m.__dict__)
    return m.__dict__


_STEP = [0]


def _on_xcpu(signum, frame):
    _report([_STEP[0], "limit", "cpu_limit"])
    _exit(0)


def _arm_cpu(cpu_s):
    """Each step its own CPU seconds: the soft RLIMIT_CPU moves to (used so far + cpu_s); SIGXCPU
    reports the step (a program that ignores it is still stopped by its wall limit, and the run by
    the hard limit)."""
    ru = _getrusage(resource.RUSAGE_SELF)
    hard = _getrlimit(resource.RLIMIT_CPU)[1]
    soft = _int(ru.ru_utime + ru.ru_stime + cpu_s) + 1
    _setrlimit(resource.RLIMIT_CPU, (soft if hard < 0 else min(soft, hard), hard))


def run_steps():
    hello = _next_message()
    cpu_s = hello.get("cpu_s", 0)
    if cpu_s:
        _signal.signal(_signal.SIGXCPU, _on_xcpu)
        _arm_cpu(cpu_s)
    try:
        ns = _load_program()
        missing = [n for n in hello.get("entries", ()) if n not in ns]
        frame = [0, "done"] if not missing else [
            0, "error", "NameError", f"the program does not define {', '.join(missing)[:150]}"]
    except _BaseException as e:  # SystemExit too: ending the program early is not an answer
        frame = [0] + _error(e)
    _report(frame)
    if frame[1] != "done":
        _exit(0)
    while True:
        msg = _next_message()
        if msg is None:
            _exit(0)  # no atexit hook, finaliser or flush of the program's runs after its results
        if "method" not in msg:  # a method call continues the step whose value was kept
            _STEP[0] += 1
        k = _STEP[0]
        if cpu_s:
            _arm_cpu(cpu_s)
        try:
            out = _step(k, msg, ns)
        except _BaseException as e:
            out = [k] + _error(e)
        _report(out)


_KEPT = [None]  # the value of a step whose method the worker may ask for


def _step(k, msg, ns):
    if "exec" in msg:
        _exec(_compile(msg["exec"], "<test>", "exec"), ns)
        return [k, "done"]
    if "method" in msg:  # only after this step's value came back "opaque": no literal arrived before
        name, args, kwargs = msg["method"]
        value = _getattr(_KEPT[0], name)(*args, **kwargs)
    else:
        value = _eval(_compile(msg["eval"], "<test>", "eval"), ns)
    try:
        return [k, "ok", encode(value)]
    except _BaseException as e:
        if msg.get("keep"):
            _KEPT[0] = value
            return [k, "opaque", _type(value).__name__[:60]]
        return [k, "refused", f"{_type(e).__name__}: {_str(e)[:160]}"]


def _main(mode):
    if _NPROC:
        _setrlimit(resource.RLIMIT_NPROC, (_NPROC, _NPROC))
    _setrlimit(resource.RLIMIT_STACK, (_getrlimit(resource.RLIMIT_STACK)[1],) * 2)  # threads started
    _write(3, b"s")
    os.closerange(4, 6)  # the source and seccomp fds, if bwrap left them
    os.closerange(7, 1 << 20)
    null = os.open("/dev/null", os.O_WRONLY)
    os.dup2(null, 1)
    _close(null)
    run_steps() if mode == "steps" else run_check()  # noqa: F821 - defined by sandbox_checker
