"""FLOPs, HBM bytes and collective bytes of an optimized XLA program, counted loop by loop from
its HLO text (`compiled.as_text()`).

Why not `compiled.cost_analysis()`: it counts a while loop's body once. The TPU compiler turns
an fsdp all-gather -> matmul (or matmul -> reduce-scatter) into a small loop of its own
(`windowed_dot_general_body_ag` / `_rs`, one trip per shard), and the model's layer scan and the
update's micro-batch loop are loops too, so its totals can be several times too small. Here every
instruction is weighted by the product of the trip counts of the loops around it.

Conventions (per device of a partitioned program):
- FLOPs: `dot` 2 x output elements x contracted size; `convolution` (what the TPU compiler makes
  of dots) 2 x output elements x kernel elements / kernel output features; element-wise
  arithmetic 1 per output element (transcendentals not counted, as in XLA's own analysis);
  `reduce` 1 per input element. Pallas kernels (`tpu_custom_call`) are opaque: splash attention's
  calls are counted from their operand shapes (q [..., Tq, E] and k [..., Tk, E], the first two
  floating operands): forward 4 x q's rows x Tk x E, the dq and dkv kernels 4 x the same each, so
  a backward is twice the forward as in 6 x params x tokens; the kernel's Tq x Tk (padded to its
  block, masked blocks included), which is what it executes, not the model's causal count); any
  other Pallas call counts 0 (its FLOPs are the caller's to add: the fused LM-head
  kernel's are, in compile_programs) and is listed in `pallas_calls`.
- Decode cache bytes: the ragged decode attention kernel (`model.decode_attention`, a
  `tpu_custom_call` named `ragged_decode_attention`) is counted in bytes accessed, like any
  custom call, with all its operands: the whole KV cache. It reads only the live blocks, a
  runtime quantity, so the bytes of its key and value operands (and an int8 cache's scale
  operands) are also summed on their own in `decode_cache_bytes` (loop trips included): a step
  that reads a live fraction f of the cache accesses bytes_accessed - (1 - f) x
  decode_cache_bytes.
- Bytes accessed: for each instruction outside fusions, its operands and result, except where
  nothing moves (parameter, constant, tuple, get-tuple-element, bitcast, loop / call wrappers,
  buffer allocation). A fusion operand read only through (dynamic-)slices counts the slices; a
  fusion that updates a slice of an operand in place (dynamic-update-slice) counts the update, not
  the buffer. Instructions inside fusions stay on chip and count 0. Arrays in an on-chip
  memory space (a layout with `S(k)`, k >= 1: the TPU compiler prefetches weights into VMEM with
  `copy-start`) count 0: the prefetch counts its HBM read once, the consumer's read is on chip
  (counting both, as `cost_analysis()` does, put the 7B decode step 1.8 GB over its arguments).
  An async `slice-start` (weights prefetched into VMEM in 4 MiB chunks) reads its slice once;
  counting its whole source per chunk put r1's on-policy decode step at 24 GB for 3 GB read.
- Collective bytes: what one device sends with ring algorithms over a group of n devices:
  all-reduce 2 S (n-1)/n, all-gather and all-to-all and reduce-scatter S_in (n-1) and S_in (n-1)/n
  respectively (S_in: the operand bytes), collective-permute S_in. `*-done` halves count 0.
  libtpu's fused reduce-scatter (a kCustom fusion calling `all-reduce-scatter...`: all-reduce,
  then this device's dynamic-slice) counts as the reduce-scatter it is.
- Trip counts: the while's backend config `known_trip_count`, else the loop condition
  `counter < constant` (or <=, >, >=, !=) with the counter's start read from the loop's init
  tuple (a constant, possibly through a copy) and its step from the body (`counter + constant`;
  the windowed loops step by 2). A loop whose count cannot be read counts once and is listed in
  `unknown_loops`.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

from tseeds_jax.scale.hlo_text import (  # noqa: F401 (parse_module, group_size: API)
    Computation,
    Instr,
    attr,
    called,
    const_int,
    first_shape,
    group_size,
    hbm_nbytes,
    nbytes,
    nelems,
    nth_shape,
    parse_module,
    shapes_of,
)

COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
# A kCustom fusion calling a computation of this name (all-reduce + dynamic-slice of the device's
# shard) is what libtpu emits for a reduce-scatter ("SingleInputAllReduceScatterFusion"): it moves
# a reduce-scatter's bytes, not an all-reduce's, and is counted as one.
REDUCE_SCATTER_FUSION = "all-reduce-scatter"
_ELEMENTWISE = {"add", "subtract", "multiply", "divide", "maximum", "minimum", "negate", "abs",
                "compare", "select", "and", "or", "xor", "not", "clamp", "power", "remainder",
                "sign", "floor", "ceil", "round-nearest-afz", "round-nearest-even", "atan2"}
_NO_TRAFFIC = {"parameter", "constant", "tuple", "get-tuple-element", "bitcast", "while", "call",
               "conditional", "after-all", "partition-id", "replica-id", "opt-barrier",
               "add-dependency", "copy-done", "async-done", "all-reduce-done", "all-gather-done",
               "collective-permute-done", "send-done", "recv-done", "iota",
               "async-start", "async-update"}  # an async pair: the wrapped op is counted
# `model.decode_attention.KERNEL_NAME` (tests/test_hlo_cost.py checks they agree).
DECODE_KERNEL = "ragged_decode_attention"
@dataclasses.dataclass
class HloCost:
    flops: float = 0.0
    matmul_flops: float = 0.0  # the dots', convolutions' and splash attention's share of `flops`
    pallas_flops: float = 0.0  # splash attention calls, from their shapes (in `flops` too)
    pallas_calls: dict[str, int] = dataclasses.field(default_factory=dict)  # name -> executions
    bytes_accessed: float = 0.0
    decode_cache_bytes: float = 0.0  # the decode kernel's K/V operands (in bytes_accessed too)
    collective_bytes: dict[str, float] = dataclasses.field(default_factory=dict)
    collective_counts: dict[str, int] = dataclasses.field(default_factory=dict)
    loops: list[tuple[str, int]] = dataclasses.field(default_factory=list)  # (body, trips)
    unknown_loops: list[str] = dataclasses.field(default_factory=list)

    @property
    def ici_bytes(self) -> float:
        return float(sum(self.collective_bytes.values()))

    def to_dict(self) -> dict[str, Any]:
        return dict(flops=self.flops, matmul_flops=self.matmul_flops,
                    pallas_flops=self.pallas_flops, pallas_calls=dict(self.pallas_calls),
                    bytes_accessed=self.bytes_accessed,
                    decode_cache_bytes=self.decode_cache_bytes,
                    collective_bytes=dict(self.collective_bytes),
                    collective_counts=dict(self.collective_counts), ici_bytes=self.ici_bytes,
                    loops=[list(x) for x in self.loops], unknown_loops=list(self.unknown_loops))


class _Counter:
    def __init__(self, comps: dict[str, Computation], num_devices: int):
        self.comps, self.n_dev, self.cost = comps, num_devices, HloCost()

    # -- trip counts ---------------------------------------------------------------------------
    def trips(self, comp: Computation, w: Instr) -> int | None:
        m = re.search(r'"known_trip_count"\s*:\s*\{\s*"n"\s*:\s*"?(\d+)', w.attrs)
        if m:
            return int(m.group(1))
        cond = self.comps.get(attr(w.attrs, "condition") or "")
        if cond is None:
            return None
        root = cond.root
        resolve = cond.by_name.get
        if root.opcode == "fusion":  # the compare fused: look inside, parameters mapped back
            fused = self.comps.get(attr(root.attrs, "calls") or "")
            if fused is None:
                return None
            outer, root = root, fused.root
            params = {i.name: outer.operands[int(i.operands[0])] for i in fused.instrs
                      if i.opcode == "parameter" and i.operands[0].isdigit()
                      and int(i.operands[0]) < len(outer.operands)}

            def resolve(x, fused=fused, params=params):
                return cond.by_name.get(params[x]) if x in params else fused.by_name.get(x)
        if root.opcode != "compare" or len(root.operands) != 2:
            return None
        direction = (re.search(r"direction=(\w+)", root.attrs) or [None, ""])[1]
        a, b = (resolve(x) for x in root.operands)
        if a is None or b is None:
            return None
        if a.opcode == "constant" and b.opcode == "get-tuple-element":
            a, b = b, a
            direction = {"LT": "GT", "GT": "LT", "LE": "GE", "GE": "LE"}.get(direction, direction)
        if a.opcode != "get-tuple-element" or b.opcode != "constant":
            return None
        limit = const_int(b)
        index = int((re.search(r"index=(\d+)", a.attrs) or [0, 0])[1])
        start = self.init_value(comp, w, index)
        if limit is None or start is None:
            return None
        step = self.step(w, index)
        if step is None or step == 0:
            return None
        span = limit - start
        if direction in ("GT", "GE"):
            span, step = -span, -step
        if step < 0:
            return None
        if direction == "LE" or direction == "GE":
            n = span // step + 1 if span >= 0 else 0
        elif direction in ("LT", "GT", "NE"):
            n = -(-span // step) if span > 0 else 0
        else:
            return None
        return max(int(n), 0)

    def step(self, w: Instr, index: int) -> int | None:
        """What the body adds to loop counter `index` each trip (1 when the body's update is not
        `counter + constant` / `counter - constant`: the compiler's windowed loops count by 2
        when they handle two shards a trip)."""
        body = self.comps.get(attr(w.attrs, "body") or "")
        if body is None or body.root.opcode != "tuple" or index >= len(body.root.operands):
            return 1
        upd = _unwrap(body, body.by_name.get(body.root.operands[index]))
        comp = body
        if upd is not None and upd.opcode == "fusion":  # the increment fused: look inside
            fused = self.comps.get(attr(upd.attrs, "calls") or "")
            if fused is None:
                return 1
            outer = upd
            upd = fused.root
            if upd.opcode not in ("add", "subtract") or len(upd.operands) != 2:
                return 1
            # map the fused parameters back to the body's instructions
            params = {i.name: outer.operands[int(i.operands[0])] for i in fused.instrs
                      if i.opcode == "parameter" and i.operands[0].isdigit()
                      and int(i.operands[0]) < len(outer.operands)}
            ops = [_unwrap(body, body.by_name.get(params[x])) if x in params
                   else _unwrap(fused, fused.by_name.get(x)) for x in upd.operands]
            return self._step_of(upd.opcode, ops, index)
        if upd is None or upd.opcode not in ("add", "subtract") or len(upd.operands) != 2:
            return 1
        return self._step_of(upd.opcode, [_unwrap(comp, comp.by_name.get(x))
                                          for x in upd.operands], index)

    @staticmethod
    def _step_of(opcode: str, ops, index: int) -> int:
        a, b = ops
        upd_opcode = opcode
        if a is not None and a.opcode == "constant" and upd_opcode == "add":
            a, b = b, a
        if (a is None or b is None or a.opcode != "get-tuple-element" or b.opcode != "constant"
                or int((re.search(r"index=(\d+)", a.attrs) or [0, -1])[1]) != index):
            return 1
        c = const_int(b)
        if c is None:
            return 1
        return c if upd_opcode == "add" else -c

    def init_value(self, comp: Computation, w: Instr, index: int) -> int | None:
        init = comp.by_name.get(w.operands[0]) if w.operands else None
        if init is None or init.opcode != "tuple" or index >= len(init.operands):
            return None
        x = comp.by_name.get(init.operands[index])
        while x is not None and x.opcode in ("copy", "bitcast", "convert") and x.operands:
            x = comp.by_name.get(x.operands[0])
        return const_int(x) if x is not None and x.opcode == "constant" else None

    # -- counting ------------------------------------------------------------------------------
    def shape(self, comp: Computation, name: str) -> str:
        ins = comp.by_name.get(name)
        return ins.type if ins is not None else ""

    def flops_of(self, comp: Computation, ins: Instr) -> float:
        op = ins.opcode
        if op == "dot":
            lhs = shapes_of(self.shape(comp, ins.operands[0]))
            dims = re.search(r"lhs_contracting_dims=\{([\d,]*)\}", ins.attrs)
            k = 1
            if lhs and dims:
                k = math.prod(lhs[0][1][int(d)] for d in dims.group(1).split(",") if d)
            return 2.0 * nelems(ins.type) * k
        if op == "convolution":
            return self.conv_flops(comp, ins)
        if op in _ELEMENTWISE:
            return float(nelems(ins.type))
        if op == "reduce":
            half = max(len(ins.operands) // 2, 1)
            return float(sum(nelems(self.shape(comp, x)) for x in ins.operands[:half]))
        return 0.0

    def conv_flops(self, comp: Computation, ins: Instr) -> float:
        """2 x batch x output features x input features (per group) x the kernel taps that land
        on the input (not on padding), summed over output positions. The TPU compiler writes
        some einsums as convolutions over a padded window (e.g. a stacked gate/up projection:
        window 2, padding 1 on each side, one valid tap per output), so counting the whole
        window would double them."""
        if len(ins.operands) < 2:
            return 0.0
        lhs = shapes_of(self.shape(comp, ins.operands[0]))
        rhs = shapes_of(self.shape(comp, ins.operands[1]))
        out = shapes_of(ins.type)
        labels = re.search(r"dim_labels=(\w+)_(\w+)->(\w+)", ins.attrs)
        if not (lhs and rhs and out and labels):
            return 0.0
        (_, lhs), (_, rhs), (_, out) = lhs[0], rhs[0], out[0]
        ll, rl, ol = labels.groups()
        macs = float(out[ol.index("b")] * out[ol.index("f")] * rhs[rl.index("i")])
        spatial = sorted(ch for ch in rl if ch.isdigit())
        win = re.search(r"window=\{([^}]*)\}", ins.attrs)
        fields = dict(kv.split("=", 1) for kv in win.group(1).split()) if win else {}

        def per_dim(key, j, default):
            if key not in fields:
                return default
            return fields[key].split("x")[j]

        for j, ch in enumerate(spatial):
            size_in, k, o = lhs[ll.index(ch)], rhs[rl.index(ch)], out[ol.index(ch)]
            lo = int(per_dim("pad", j, "0_0").split("_")[0])
            stride = int(per_dim("stride", j, "1"))
            ldil, rdil = int(per_dim("lhs_dilate", j, "1")), int(per_dim("rhs_dilate", j, "1"))
            if o * k > 1 << 20:  # too many to enumerate: every tap
                macs *= o * k
                continue
            extent = (size_in - 1) * ldil + 1
            taps = sum(1 for a in range(o) for b in range(k)
                       if 0 <= a * stride + b * rdil - lo < extent
                       and (a * stride + b * rdil - lo) % ldil == 0)
            macs *= taps
        return 2.0 * macs

    def splash_flops(self, comp: Computation, ins: Instr) -> float:
        """Model FLOPs of one splash attention kernel call (see the module docstring); 0 for any
        other Pallas call or an operand layout this does not recognise."""
        if not re.match(r"splash_\w*?_(fwd|dq|dkv)", ins.name):
            return 0.0
        arrays = [shapes_of(self.shape(comp, x)) for x in ins.operands]
        floats = [a[0] for a in arrays if a and a[0][0] in ("bf16", "f32", "f16") and
                  len(a[0][1]) >= 3]
        if len(floats) < 2:
            return 0.0
        (_, q), (_, k) = floats[0], floats[1]
        if q[-1] != k[-1]:
            return 0.0
        return 4.0 * math.prod(q[:-1]) * k[-2] * q[-1]

    def decode_cache_bytes(self, comp: Computation, ins: Instr) -> float:
        """Bytes of the cache operands of one decode attention kernel call: its array operands
        after q (the int32 lengths and live-block counts come first): K and V, and an int8
        cache's K and V scales; 0 for any other Pallas call."""
        op_name = (re.search(r'op_name="([^"]*)"', ins.attrs) or [None, ""])[1]
        if not (re.match(rf"{DECODE_KERNEL}(\.\d+)?$", ins.name)
                or f"/{DECODE_KERNEL}/" in op_name):
            return 0.0
        arrays = [nbytes(self.shape(comp, x)) for x in ins.operands
                  if (shapes_of(self.shape(comp, x)) or [("", ())])[0][0]
                  in ("bf16", "f32", "f16", "s8")]
        return float(sum(arrays[1:5]))

    def collective(self, comp: Computation, ins: Instr, mult: float) -> None:
        op = ins.opcode
        kind = op[:-len("-start")] if op.endswith("-start") else op
        if kind not in COLLECTIVES:
            return
        if kind == "all-reduce" and comp.name.lstrip("%").startswith(REDUCE_SCATTER_FUSION):
            # The TPU compiler's fused reduce-scatter: an all-reduce whose result only feeds a
            # dynamic-slice of this device's shard, emitted as one reduce-scatter.
            kind = "reduce-scatter"
        s_in = sum(nbytes(self.shape(comp, x)) for x in ins.operands)
        n = group_size(ins.attrs, self.n_dev)
        if n <= 1 and kind != "collective-permute":
            sent = 0.0
        elif kind == "all-reduce":
            sent = 2.0 * s_in * (n - 1) / n
        elif kind == "all-gather":
            sent = s_in * (n - 1)
        elif kind in ("reduce-scatter", "all-to-all"):
            sent = s_in * (n - 1) / n
        else:
            sent = s_in
        c = self.cost
        c.collective_bytes[kind] = c.collective_bytes.get(kind, 0.0) + sent * mult
        c.collective_counts[kind] = c.collective_counts.get(kind, 0) + int(mult)

    def traffic(self, comp: Computation, ins: Instr) -> float:
        op = ins.opcode
        if op in _NO_TRAFFIC or op.endswith("-done"):
            return 0.0
        if op == "custom-call" and "AllocateBuffer" in ins.attrs:
            return 0.0
        if op == "dynamic-slice" or op == "slice":
            return 2.0 * hbm_nbytes(ins.type)
        if op == "dynamic-update-slice" and len(ins.operands) > 1:
            return 2.0 * hbm_nbytes(self.shape(comp, ins.operands[1]))
        if op == "fusion":
            return self.fusion_traffic(comp, ins)
        if op == "slice-start":
            # ((source), destination, context): an async slice (the TPU compiler prefetches
            # weights into VMEM in chunks this way) reads its slice, not the whole source.
            dest = nth_shape(ins.type, 1)
            return hbm_nbytes(dest) + nbytes(dest)
        if op == "copy-start":  # (destination, source alias, context): the copy writes only the first
            return hbm_nbytes(first_shape(ins.type)) + sum(
                hbm_nbytes(self.shape(comp, x)) for x in ins.operands)
        return hbm_nbytes(ins.type) + sum(hbm_nbytes(self.shape(comp, x)) for x in ins.operands)

    def fusion_traffic(self, comp: Computation, ins: Instr) -> float:
        fused = self.comps.get(attr(ins.attrs, "calls") or "")
        if fused is None:
            return hbm_nbytes(ins.type) + sum(hbm_nbytes(self.shape(comp, x)) for x in ins.operands)
        params = {int(i.operands[0]): i for i in fused.instrs
                  if i.opcode == "parameter" and i.operands[0].isdigit()}
        users: dict[str, list[Instr]] = {}
        for i in fused.instrs:
            for k, x in enumerate(i.operands):
                users.setdefault(x, []).append((i, k))
        total = 0.0
        for idx, x in enumerate(ins.operands):
            full = hbm_nbytes(self.shape(comp, x))
            p = params.get(idx)
            if p is None:
                total += full
                continue
            total += self.param_read(fused, p.name, users, full)
        out = fused.root
        outs = ([fused.by_name.get(o) for o in out.operands] if out.opcode == "tuple" else [out])
        for o in outs:
            if o is None:
                continue
            if o.opcode == "dynamic-update-slice" and len(o.operands) > 1:
                total += hbm_nbytes(fused.by_name[o.operands[1]].type) \
                    if o.operands[1] in fused.by_name else hbm_nbytes(o.type)
            else:
                total += hbm_nbytes(o.type)
        return total

    def param_read(self, fused: Computation, name: str, users, full: float, depth: int = 0) -> float:
        """Bytes a fusion reads of one parameter: the slices when it is only sliced, 0 when it is
        only the buffer of an in-place update, else all of it."""
        use = users.get(name, [])
        if not use or depth > 4:
            return full
        got = 0.0
        for u, k in use:
            if u.opcode in ("dynamic-slice", "slice") and k == 0:
                got += hbm_nbytes(u.type)
            elif u.opcode == "dynamic-update-slice" and k == 0:
                continue
            elif u.opcode == "bitcast" or self.relayout(u):
                got += self.param_read(fused, u.name, users, full, depth + 1)
            else:
                return full
        return min(got, full)

    def relayout(self, ins: Instr) -> bool:
        """A nested fusion that only copies its one operand into another tiling (the TPU
        compiler wraps an int8 cache's (32, 128)-tiled array this way before slicing one slot's
        column out of it): elementwise, so it reads what its users read, not the whole array
        (the compiler's own cycle estimate of such a fusion equals the 16-bit one's, which has
        no wrapper)."""
        if ins.opcode != "fusion" or len(ins.operands) != 1:
            return False
        sub = self.comps.get(attr(ins.attrs, "calls") or "")
        return (sub is not None and len(sub.instrs) == 2 and sub.root.opcode == "copy"
                and sub.root.operands and sub.by_name.get(sub.root.operands[0]) is not None
                and sub.by_name[sub.root.operands[0]].opcode == "parameter")

    def walk(self, comp: Computation, mult: float, fused: bool, seen: tuple = ()) -> None:
        if comp.name in seen:
            return
        seen = (*seen, comp.name)
        c = self.cost
        for ins in comp.instrs:
            op = ins.opcode
            f = self.flops_of(comp, ins) * mult
            c.flops += f
            if op in ("dot", "convolution"):
                c.matmul_flops += f
            if op == "custom-call" and "tpu_custom_call" in ins.attrs:
                kernel = re.sub(r"\.\d+$", "", ins.name)
                c.pallas_calls[kernel] = c.pallas_calls.get(kernel, 0) + int(mult)
                f = self.splash_flops(comp, ins) * mult
                c.flops += f
                c.matmul_flops += f
                c.pallas_flops += f
                c.decode_cache_bytes += self.decode_cache_bytes(comp, ins) * mult
            self.collective(comp, ins, mult)
            if not fused:
                c.bytes_accessed += self.traffic(comp, ins) * mult
            if op == "while":
                n = self.trips(comp, ins)
                body = self.comps.get(attr(ins.attrs, "body") or "")
                if n is None:
                    n = 1
                    c.unknown_loops.append(body.name if body else ins.name)
                if body is not None:
                    c.loops.append((body.name, n))
                    self.walk(body, mult * n, fused, seen)
            elif op == "fusion":
                sub = self.comps.get(attr(ins.attrs, "calls") or "")
                if sub is not None:
                    self.walk(sub, mult, True, seen)
            elif op in ("call", "async-start") or (op == "custom-call"
                                                   and "called_computations" in ins.attrs):
                for name in called(ins.attrs, "calls") + called(ins.attrs,
                                                                  "called_computations"):
                    if name in self.comps:
                        self.walk(self.comps[name], mult, fused, seen)
            elif op == "conditional":
                branches = [self.comps[b] for b in called(ins.attrs, "branch_computations")
                            if b in self.comps]
                # the most expensive branch: an upper bound on one execution
                best = None
                for b in branches:
                    sub = _Counter(self.comps, self.n_dev)
                    sub.walk(b, mult, fused, seen)
                    if best is None or sub.cost.flops + sub.cost.bytes_accessed > \
                            best.flops + best.bytes_accessed:
                        best = sub.cost
                if best is not None:
                    _merge(c, best)


def _unwrap(comp: Computation, x: Instr | None) -> Instr | None:
    """`x` with the copies / bitcasts / converts around it removed (a loop counter is often
    copied before its increment)."""
    while x is not None and x.opcode in ("copy", "bitcast", "convert") and x.operands:
        x = comp.by_name.get(x.operands[0])
    return x


def _merge(into: HloCost, other: HloCost) -> None:
    into.flops += other.flops
    into.matmul_flops += other.matmul_flops
    into.pallas_flops += other.pallas_flops
    for k, v in other.pallas_calls.items():
        into.pallas_calls[k] = into.pallas_calls.get(k, 0) + v
    into.bytes_accessed += other.bytes_accessed
    into.decode_cache_bytes += other.decode_cache_bytes
    for k, v in other.collective_bytes.items():
        into.collective_bytes[k] = into.collective_bytes.get(k, 0.0) + v
    for k, v in other.collective_counts.items():
        into.collective_counts[k] = into.collective_counts.get(k, 0) + v
    into.loops += other.loops
    into.unknown_loops += other.unknown_loops


def hlo_cost(text: str, *, num_devices: int | None = None) -> HloCost:
    """Loop-aware cost of an optimized HLO module (`compiled.as_text()`); `num_devices`: the
    group size of a collective whose replica groups are empty (all devices; default: the
    module's `num_partitions`, else 1)."""
    comps = parse_module(text)
    if num_devices is None:
        # In the module's header line, after its input/output aliasing and layouts (which run
        # to tens of kB for an update with hundreds of parameter leaves).
        m = re.search(r"num_partitions=(\d+)", text.split("\n", 1)[0])
        num_devices = int(m.group(1)) if m else 1
    counter = _Counter(comps, int(num_devices))
    entry = next(c for c in comps.values() if c.entry)
    counter.walk(entry, 1.0, False)
    return counter.cost
