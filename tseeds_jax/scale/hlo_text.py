"""Reading XLA's HLO module text (`compiled.as_text()`): computations, instructions, shapes.

The parser `hlo_cost` counts with. An instruction is `[ROOT] %name = TYPE opcode(%operands),
attributes`; operands are printed by name only, so their shapes come from the instruction that
defines them in the same computation. An attribute may continue on the next lines (a Pallas
call's kernel metadata); those lines are joined to their instruction.
"""

from __future__ import annotations

import dataclasses
import math
import re

DTYPE_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4,
               "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16,
               "s4": 0.5, "u4": 0.5, "s2": 0.25, "u2": 0.25, "token": 0}
_SHAPE = re.compile(r"\b(pred|token|[suf]\d+|bf16|c64|c128|f8e\w+)\[([\d,]*)\]")
_HEADER = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s*\(.*\)\s*->\s*.*\{\s*$")
_START = re.compile(r"^\s+(ROOT\s+)?%?[\w.\-]+\s*=\s")
_INSTR = re.compile(r"^\s*(ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*)$")


def _dtype_bytes(dt: str) -> float:
    if dt.startswith("f8"):
        return 1
    return DTYPE_BYTES.get(dt, 4)


def shapes_of(type_text: str) -> list[tuple[str, tuple[int, ...]]]:
    """Every array shape in an HLO type ("bf16[4,64]{1,0}" or a tuple of them)."""
    return [(dt, tuple(int(x) for x in dims.split(",") if x))
            for dt, dims in _SHAPE.findall(type_text)]


def nbytes(type_text: str) -> float:
    return sum(math.prod(s) * _dtype_bytes(dt) for dt, s in shapes_of(type_text))


_SHAPE_LAYOUT = re.compile(r"\b(pred|token|[suf]\d+|bf16|c64|c128|f8e\w+)\[([\d,]*)\](\{[^{}]*\})?")
_MEMORY_SPACE = re.compile(r"S\((\d+)\)")


def hbm_nbytes(type_text: str) -> float:
    """`nbytes` of the arrays that live in HBM: a layout with a memory space S(k), k >= 1 (on
    TPU the on-chip VMEM / SMEM the compiler prefetches weights and scalars into), is not HBM
    traffic; the copy that fills it reads its HBM operand, which is counted."""
    total = 0.0
    for dt, dims, layout in _SHAPE_LAYOUT.findall(type_text):
        m = _MEMORY_SPACE.search(layout or "")
        if m and int(m.group(1)) >= 1:
            continue
        total += math.prod(int(x) for x in dims.split(",") if x) * _dtype_bytes(dt)
    return total


def first_shape(type_text: str) -> str:
    """The first array type of a (tuple) type, with its layout."""
    return nth_shape(type_text, 0)


def nth_shape(type_text: str, n: int) -> str:
    """The n-th array type (in print order) of a (tuple) type, with its layout."""
    found = [m.group(0) for m in _SHAPE_LAYOUT.finditer(type_text)]
    return found[n] if n < len(found) else ""


def nelems(type_text: str) -> int:
    return sum(math.prod(s) for _, s in shapes_of(type_text))


@dataclasses.dataclass
class Instr:
    name: str
    type: str  # the result's HLO type text
    opcode: str
    operands: list[str]
    attrs: str
    root: bool = False


@dataclasses.dataclass
class Computation:
    name: str
    instrs: list[Instr]
    entry: bool = False

    def __post_init__(self):
        self.by_name = {i.name: i for i in self.instrs}

    @property
    def root(self) -> Instr:
        return next((i for i in self.instrs if i.root), self.instrs[-1])


def _balanced(text: str, start: int) -> int:
    """Index just past the bracket group opening at text[start]."""
    depth, opener = 0, text[start]
    closer = {"(": ")", "{": "}", "[": "]"}[opener]
    for k in range(start, len(text)):
        if text[k] == opener:
            depth += 1
        elif text[k] == closer:
            depth -= 1
            if depth == 0:
                return k + 1
    raise ValueError(f"HLO: unbalanced {opener!r} in {text[:120]!r}")


def _parse_instr(line: str) -> Instr | None:
    m = _INSTR.match(line)
    if not m:
        return None
    root, name, rest = bool(m.group(1)), m.group(2), m.group(3)
    rest = re.sub(r"/\*.*?\*/", "", rest)
    if rest.startswith("("):
        end = _balanced(rest, 0)
    else:
        end = rest.index(" ") if " " in rest else len(rest)
    type_text, rest = rest[:end], rest[end:].lstrip()
    m2 = re.match(r"([\w\-]+)\(", rest)
    if not m2:
        return None
    opcode = m2.group(1)
    close = _balanced(rest, len(opcode))
    inner = rest[len(opcode) + 1:close - 1]
    if opcode in ("parameter", "constant"):
        operands = [inner.strip()]  # the parameter number / the literal
    else:
        operands = re.findall(r"%([\w.\-]+)", inner)
    return Instr(name, type_text, opcode, operands, rest[close:], root)


def parse_module(text: str) -> dict[str, Computation]:
    """Computations of an HLO module text by name (the entry one has `entry=True`)."""
    if not isinstance(text, str) or "{" not in text:
        raise ValueError("parse_module: expected HLO module text (compiled.as_text())")
    comps: dict[str, Computation] = {}
    cur_name, cur_entry, instrs = None, False, []
    lines: list[str] = []
    for line in text.splitlines():
        # an attribute may span lines (a Pallas call's kernel metadata): join it to its instruction
        if lines and lines[-1].startswith("  ") and line.strip() != "}" and not _START.match(line) \
                and not _HEADER.match(line):
            lines[-1] += " " + line.strip()
        else:
            lines.append(line)
    for line in lines:
        if cur_name is None:
            m = _HEADER.match(line)
            if m:
                cur_name, cur_entry, instrs = m.group(2), bool(m.group(1)), []
            continue
        if line.strip() == "}":
            comps[cur_name] = Computation(cur_name, instrs, cur_entry)
            cur_name = None
            continue
        ins = _parse_instr(line)
        if ins is not None:
            instrs.append(ins)
    if not any(c.entry for c in comps.values()):
        raise ValueError("parse_module: no ENTRY computation in the HLO text")
    return comps


def attr(attrs: str, key: str) -> str | None:
    m = re.search(rf"\b{key}=%?([\w.\-]+)", attrs)
    return m.group(1) if m else None


def called(attrs: str, key: str) -> list[str]:
    m = re.search(rf"\b{key}=\{{([^}}]*)\}}", attrs)
    if m:
        return re.findall(r"%?([\w.\-]+)", m.group(1))
    one = attr(attrs, key)
    return [one] if one else []


def group_size(attrs: str, num_devices: int) -> int:
    """Devices per replica group of a collective (its `replica_groups`)."""
    # mesh['axis_0'=8,'axis_1'=8] {'axis_0'}, or with the mesh's device order between them:
    # mesh[...], device_ids=([8,8]T(1,0)) {'axis_0'} (libtpu prints that for a transposed mesh).
    m = re.search(r"replica_groups=mesh\[([^\]]*)\](?:,\s*device_ids=[^{]*?)?\s*\{([^}]*)\}", attrs)
    if m:
        sizes = dict((k.strip("' "), int(v)) for k, v in
                     (kv.split("=") for kv in m.group(1).split(",") if "=" in kv))
        names = [x.strip("' ") for x in m.group(2).split(",") if x.strip()]
        return math.prod(sizes.get(n, 1) for n in names) if names else num_devices
    m = re.search(r"replica_groups=\[(\d+),(\d+)\]<=", attrs)
    if m:
        return int(m.group(2))
    m = re.search(r"replica_groups=\{(\{[^}]*\})", attrs)
    if m:
        return len([x for x in m.group(1).strip("{}").split(",") if x.strip()])
    return num_devices


def const_int(ins: Instr | None) -> int | None:
    if ins is None or ins.opcode != "constant":
        return None
    m = re.fullmatch(r"\s*(-?\d+)\s*", ins.operands[0] if ins.operands else "")
    return int(m.group(1)) if m else None
