"""The program's side of the checker (stdlib only; `_common.harness_args` sends `sandbox_harness`,
this file and `sandbox_checker` together as the interpreter's `-c` program in check mode).

In the program's process, forked by the checker: import main.py as `solution`, then answer the
checker's requests (newline-delimited JSON on a pipe each way) until it hangs up. Values go back as
`encode` makes them; anything not plain stays here in a table of objects and goes back as a handle
["h", id, type name] that later requests name. A list/dict/set/bytearray argument a call mutated
comes back too, so that the checker's copy follows. StopIteration from `next` is the end of the
iteration (["stop"]); from any other request it is an error the checker turns into RuntimeError.
Each request has its own CPU seconds (SIGXCPU answers ["limit", "cpu_limit"] and ends the process).
"""

import select as _select

if "_IN_SANDBOX" not in globals():  # imported in the worker (tests, lint): the harness's names
    from tseeds_jax.rewards.sandbox_harness import (
        _arm_cpu,
        _BaseException,
        _error,
        _exit,
        _len,
        _load_program,
        _read,
        _type,
        _write,
        decode,
        encode,
    )


class _Timeout(BaseException):
    """A call of the program's process ran past its wall limit (the process is killed)."""


class _Limit(BaseException):
    """A call of the program's process ran past its CPU limit."""


class _Lines:
    """Newline-delimited JSON frames read from a raw fd, with a timeout per frame."""

    def __init__(self, fd):
        self.fd, self.buf = fd, b""

    def get(self, timeout=None):
        import json

        while b"\n" not in self.buf:
            if timeout is not None and not _select.select([self.fd], [], [], timeout)[0]:
                raise _Timeout(f"no answer within {timeout} s")
            chunk = _read(self.fd, 1 << 16)
            if not chunk:
                raise EOFError("the other side ended")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)


def _send(fd, obj):
    import json

    data = memoryview(json.dumps(obj).encode() + b"\n")
    while data:
        data = data[_write(fd, data):]


_MUTABLE = (list, dict, set, bytearray)


def _serve(r, w, entries, cpu_s):
    """Import main.py, then answer the checker's requests until it hangs up."""
    lines = _Lines(r)
    try:
        ns = _load_program()
        missing = [n for n in entries if n not in ns]
        hello = ["ready"] if not missing else [
            "error", "NameError", f"the program does not define {', '.join(missing)[:150]}"]
    except _BaseException as e:
        hello = _error(e)
    _send(w, hello)
    if hello[0] != "ready":
        _exit(0)
    objs, ids = {}, {}

    def handle(v):
        hid = ids.get(id(v))
        if hid is None or objs[hid] is not v:
            hid = _len(objs) + 1
            objs[hid], ids[id(v)] = v, hid
        return ["h", hid, _type(v).__name__[:60]]

    def enc(v):
        return encode(v, 0, handle)

    def dec(v):
        return decode(v, 0, lambda h: objs[h[1]])

    while True:
        try:
            req = lines.get()
        except EOFError:
            _exit(0)
        if cpu_s:
            _arm_cpu(cpu_s)
        try:
            out = _answer(req, ns, objs, enc, dec)
        except StopIteration:
            out = ["stop"] if req[0] == "next" else ["error", "StopIteration", ""]
        except _BaseException as e:
            out = _error(e)
        _send(w, out)


def _answer(req, ns, objs, enc, dec):
    op = req[0]
    if op == "get":
        return ["ok", enc(ns[req[1]])] if req[1] in ns else ["missing"]
    obj = objs[req[1]]
    if op == "call":
        args, kwargs = [dec(a) for a in req[2]], {k: dec(a) for k, a in req[3].items()}
        out = enc(obj(*args, **kwargs))
        changed = {}
        for i, (raw, a) in enumerate(zip(req[2], args)):
            if _type(a) in _MUTABLE:
                new = enc(a)
                if new != raw:
                    changed[str(i)] = new  # mutated in place: the checker's copy follows
        return ["ok", out, changed]
    simple = {"attr": lambda: getattr(obj, req[2]), "iter": lambda: iter(obj), "next": lambda: next(obj),
              "len": lambda: len(obj), "bool": lambda: bool(obj), "repr": lambda: repr(obj),
              "str": lambda: str(obj), "contains": lambda: dec(req[2]) in obj,
              "getitem": lambda: obj[dec(req[2])], "eq": lambda: bool(obj == dec(req[2]))}
    if op in simple:
        return ["ok", enc(simple[op]())]
    if op == "setattr":
        setattr(obj, req[2], dec(req[3]))
    elif op == "setitem":
        obj[dec(req[2])] = dec(req[3])
    elif op == "delitem":
        del obj[dec(req[2])]
    else:
        raise ValueError(f"unknown request {op!r}")
    return ["ok", None]


def _on_xcpu_serve(signum, frame):
    _send(_SERVE_W[0], ["limit", "cpu_limit"])
    _exit(0)


_SERVE_W = [None]


