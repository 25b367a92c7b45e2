"""`scale/hlo_cost`: loop-aware FLOPs, HBM bytes and collective bytes of optimized HLO text.

The programs are written by hand in the printer's format (`compiled.as_text()`), with counts worked
out here from the shapes: a matmul in a loop of known trip count, a loop whose count is read from
its condition, a fusion that reads one slice of a stacked operand and updates another in place, and
the collectives of a 4-device group. One program compiled by XLA:CPU checks that the parser reads
the real printer's output (a scan of matmuls: 2 M K N x trips)."""

# ruff: noqa: E501  (HLO instructions are one line each, as the printer writes them)

import pytest

from tseeds_jax.scale import hlo_cost as hc

# A [8, 32] x [32, 16] f32 matmul inside a loop of 5 trips (backend config), then an all-reduce of
# its [8, 16] result over groups of 4 and an all-gather of a [2, 16] f32 operand over 4 devices.
LOOP_KNOWN = """HloModule m, num_partitions=4

%body (p: (s32[], f32[8,32], f32[32,16], f32[8,16])) -> (s32[], f32[8,32], f32[32,16], f32[8,16]) {
  %p = (s32[], f32[8,32]{1,0}, f32[32,16]{1,0}, f32[8,16]{1,0}) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %x = f32[8,32]{1,0} get-tuple-element(%p), index=1
  %w = f32[32,16]{1,0} get-tuple-element(%p), index=2
  %one = s32[] constant(1)
  %next = s32[] add(%i, %one)
  %y = f32[8,16]{1,0} dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %t = (s32[], f32[8,32]{1,0}, f32[32,16]{1,0}, f32[8,16]{1,0}) tuple(%next, %x, %w, %y)
}

%cond (q: (s32[], f32[8,32], f32[32,16], f32[8,16])) -> pred[] {
  %q = (s32[], f32[8,32]{1,0}, f32[32,16]{1,0}, f32[8,16]{1,0}) parameter(0)
  %j = s32[] get-tuple-element(%q), index=0
  %lim = s32[] constant(999)
  ROOT %lt = pred[] compare(%j, %lim), direction=LT
}

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

ENTRY %main (x0: f32[8,32], w0: f32[32,16], g0: f32[2,16]) -> (f32[8,16], f32[8,16]) {
  %x0 = f32[8,32]{1,0} parameter(0)
  %w0 = f32[32,16]{1,0} parameter(1)
  %g0 = f32[2,16]{1,0} parameter(2)
  %zero = s32[] constant(0)
  %acc = f32[8,16]{1,0} broadcast(%zero), dimensions={}
  %init = (s32[], f32[8,32]{1,0}, f32[32,16]{1,0}, f32[8,16]{1,0}) tuple(%zero, %x0, %w0, %acc)
  %loop = (s32[], f32[8,32]{1,0}, f32[32,16]{1,0}, f32[8,16]{1,0}) while(%init), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"5"}}
  %r = f32[8,16]{1,0} get-tuple-element(%loop), index=3
  %ar = f32[8,16]{1,0} all-reduce(%r), channel_id=1, replica_groups=[1,4]<=[4], to_apply=%add
  %ag = f32[8,16]{1,0} all-gather(%g0), channel_id=2, replica_groups={{0,1,2,3}}, dimensions={0}
  ROOT %out = (f32[8,16]{1,0}, f32[8,16]{1,0}) tuple(%ar, %ag)
}
"""


def test_loop_with_known_trip_count():
    c = hc.hlo_cost(LOOP_KNOWN)
    assert c.loops == [("body", 5)] and c.unknown_loops == []
    # per trip: the matmul 2*8*32*16 and the counter's add (1 element)
    assert c.flops == 5 * (2 * 8 * 32 * 16 + 1)
    # ring all-reduce of 512 B over 4: 2 * 512 * 3/4; all-gather of 128 B to 4: 128 * 3
    assert c.collective_bytes == {"all-reduce": 2 * 512 * 3 / 4, "all-gather": 128 * 3}
    assert c.collective_counts == {"all-reduce": 1, "all-gather": 1}
    # bytes: per trip the dot reads 1024 + 2048 and writes 512, the add 4+4 -> 4; outside:
    # broadcast 4 -> 512, all-reduce 512 -> 512, all-gather 128 -> 512
    per_trip = (1024 + 2048 + 512) + 12
    assert c.bytes_accessed == 5 * per_trip + (4 + 512) + 1024 + 640


def test_trip_count_from_the_condition_and_the_init_tuple():
    # no backend config: the condition says i < 999 and the counter starts at copy(constant 3)
    text = LOOP_KNOWN.replace(', backend_config={"known_trip_count":{"n":"5"}}', "")
    text = text.replace("tuple(%zero, %x0, %w0, %acc)", "tuple(%three, %x0, %w0, %acc)")
    text = text.replace("  %zero = s32[] constant(0)\n",
                        "  %zero = s32[] constant(0)\n  %c3 = s32[] constant(3)\n"
                        "  %three = s32[] copy(%c3)\n")
    c = hc.hlo_cost(text)
    assert c.loops == [("body", 996)]
    assert c.flops == 996 * (2 * 8 * 32 * 16 + 1)


def test_loop_of_unknown_count_is_counted_once_and_named():
    text = LOOP_KNOWN.replace(', backend_config={"known_trip_count":{"n":"5"}}', "")
    text = text.replace("ROOT %lt = pred[] compare(%j, %lim), direction=LT",
                        "ROOT %lt = pred[] compare(%j, %j), direction=LT")
    c = hc.hlo_cost(text)
    assert c.unknown_loops == ["body"] and c.flops == 2 * 8 * 32 * 16 + 1


# A fusion reading layer i of a stacked [4, 64, 32] bf16 weight (dynamic-slice) and writing its
# [64, 32] result into row i of a [4, 64, 32] buffer in place (dynamic-update-slice).
FUSION = """HloModule f, num_partitions=1

%fused (p0: bf16[4,64,32], p1: s32[], p2: bf16[4,64,32]) -> bf16[4,64,32] {
  %p0 = bf16[4,64,32]{2,1,0} parameter(0)
  %p1 = s32[] parameter(1)
  %p2 = bf16[4,64,32]{2,1,0} parameter(2)
  %z = s32[] constant(0)
  %sl = bf16[1,64,32]{2,1,0} dynamic-slice(%p0, %p1, %z, %z), dynamic_slice_sizes={1,64,32}
  %m = bf16[1,64,32]{2,1,0} multiply(%sl, %sl)
  ROOT %up = bf16[4,64,32]{2,1,0} dynamic-update-slice(%p2, %m, %p1, %z, %z)
}

ENTRY %e (w: bf16[4,64,32], i: s32[], buf: bf16[4,64,32]) -> bf16[4,64,32] {
  %w = bf16[4,64,32]{2,1,0} parameter(0)
  %i = s32[] parameter(1)
  %buf = bf16[4,64,32]{2,1,0} parameter(2)
  ROOT %f = bf16[4,64,32]{2,1,0} fusion(%w, %i, %buf), kind=kLoop, calls=%fused
}
"""


def test_fusion_counts_slices_and_in_place_updates():
    c = hc.hlo_cost(FUSION)
    layer = 64 * 32 * 2  # one [64, 32] bf16 slice
    # reads the slice of w, the 4-byte index, not the buffer; writes one slice
    assert c.bytes_accessed == layer + 4 + layer
    assert c.flops == 64 * 32  # the multiply; the slices are data movement
    assert c.collective_bytes == {}


@pytest.mark.parametrize("groups, n", [
    ("replica_groups=mesh['axis_0'=4,'axis_1'=2] {'axis_0'}", 4),
    ("replica_groups=mesh['axis_0'=4,'axis_1'=2] {'axis_0','axis_1'}", 8),
    # libtpu's form on a transposed mesh (seen on v6e:8x8 with data 8 x fsdp 8)
    ("replica_groups=mesh['axis_0'=4,'axis_1'=1,'axis_2'=1,'axis_3'=2], "
     "device_ids=([2,4]T(1,0)) {'axis_0'}, dimensions={0}", 4),
    ("replica_groups=mesh['axis_0'=2,'axis_1'=4], device_ids=([4,2]T(1,0)) {'axis_0'}", 2),
    ("replica_groups=[4,2]<=[8]", 2),
    ("replica_groups={{0,2,4},{1,3,5}}", 3),
    ("replica_groups={}", 8),
])
def test_group_size_formats(groups, n):
    assert hc.group_size(groups, 8) == n


def test_num_partitions_is_read_past_a_long_header():
    """An update's header line carries its aliasing and layouts for every parameter leaf (11 kB
    for a 2-layer model): the partition count after them still sizes an empty replica group."""
    alias = ", ".join(f"{{{i}}}: ({i}, {{}}, may-alias)" for i in range(400))
    text = f"""HloModule big, input_output_alias={{ {alias} }}, num_partitions=8

ENTRY %e (x: f32[64]) -> f32[512] {{
  %x = f32[64]{{0}} parameter(0)
  ROOT %ag = f32[512]{{0}} all-gather(%x), replica_groups={{}}, dimensions={{0}}
}}
"""
    assert len(text.split("\n", 1)[0]) > 10_000
    assert hc.hlo_cost(text).collective_bytes == {"all-gather": 64 * 4 * 7}


def test_reduce_scatter_all_to_all_permute_and_async_pairs():
    text = """HloModule c, num_partitions=8

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

ENTRY %e (x: f32[64,8]) -> f32[64,8] {
  %x = f32[64,8]{1,0} parameter(0)
  %rs = f32[8,8]{1,0} reduce-scatter(%x), replica_groups=[1,8]<=[8], dimensions={0}, to_apply=%add
  %a2a = f32[64,8]{1,0} all-to-all(%x), replica_groups=[2,4]<=[8], dimensions={0}
  %cps = (f32[64,8]{1,0}, f32[64,8]{1,0}, u32[], u32[]) collective-permute-start(%x), source_target_pairs={{0,1},{1,0}}
  %cpd = f32[64,8]{1,0} collective-permute-done(%cps)
  %ags = (f32[64,8]{1,0}, f32[128,8]{1,0}) all-gather-start(%x), replica_groups=[4,2]<=[8], dimensions={0}
  %agd = f32[128,8]{1,0} all-gather-done(%ags)
  ROOT %o = f32[64,8]{1,0} add(%a2a, %cpd)
}
"""
    c = hc.hlo_cost(text)
    s = 64 * 8 * 4
    assert c.collective_bytes == {"reduce-scatter": s * 7 / 8, "all-to-all": s * 3 / 4,
                                  "collective-permute": s, "all-gather": s * 1}
    assert c.collective_counts == {"reduce-scatter": 1, "all-to-all": 1,
                                   "collective-permute": 1, "all-gather": 1}
    assert c.ici_bytes == sum(c.collective_bytes.values())


def test_tpu_all_reduce_scatter_fusion_counts_as_reduce_scatter():
    """libtpu writes a weight gradient's reduce-scatter as a kCustom fusion calling a computation
    named `all-reduce-scatter...` (an all-reduce whose result only feeds this device's
    dynamic-slice; the form seen in an optimized v5p update, fsdp 4). It sends a reduce-scatter's
    S (n-1)/n, not an all-reduce's 2 S (n-1)/n; a plain all-reduce beside it keeps its count."""
    text = """HloModule rs, num_partitions=4

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%all-reduce-scatter.clone.1 (input.32: f32[1024,512]) -> f32[256,512] {
  %input.32 = f32[1024,512]{1,0:T(8,128)} parameter(0)
  %all-reduce.232 = f32[1024,512]{1,0:T(8,128)} all-reduce(%input.32), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=%add
  %partition-id.69 = u32[] partition-id()
  %constant.1731 = u32[] constant(256)
  %multiply.573 = u32[]{:T(128)} multiply(%partition-id.69, %constant.1731)
  %constant.1732 = u32[] constant(0)
  ROOT %dynamic-slice.453 = f32[256,512]{1,0:T(8,128)} dynamic-slice(%all-reduce.232, %multiply.573, %constant.1732), dynamic_slice_sizes={256,512}
}

ENTRY %e (g: f32[1024,512], v: f32[128]) -> (f32[256,512], f32[128]) {
  %g = f32[1024,512]{1,0:T(8,128)} parameter(0)
  %v = f32[128]{0:T(128)} parameter(1)
  %fusion.516 = f32[256,512]{1,0:T(8,128)} fusion(%g), kind=kCustom, calls=%all-reduce-scatter.clone.1, backend_config={"collective_algorithm_config":{"emitter":"SingleInputAllReduceScatterFusion"}}
  %ar = f32[128]{0:T(128)} all-reduce(%v), replica_groups={{0,1,2,3}}, to_apply=%add
  ROOT %t = (f32[256,512]{1,0:T(8,128)}, f32[128]{0:T(128)}) tuple(%fusion.516, %ar)
}
"""
    c = hc.hlo_cost(text)
    s, v = 1024 * 512 * 4, 128 * 4
    assert c.collective_bytes == {"reduce-scatter": s * 3 / 4, "all-reduce": 2 * v * 3 / 4}
    assert c.collective_counts == {"reduce-scatter": 1, "all-reduce": 1}


def test_bad_text_is_named():
    with pytest.raises(ValueError, match="HLO module text"):
        hc.hlo_cost("not hlo")
    with pytest.raises(ValueError, match="no ENTRY"):
        hc.hlo_cost("HloModule m\n\n%f (a: f32[]) -> f32[] {\n  ROOT %a = f32[] parameter(0)\n}\n")


def test_real_printer_output_scan_of_matmuls():
    """XLA:CPU's optimized HLO of a 6-step scan of [16, 32] x [32, 32] matmuls: the parser finds
    the loop's trips (from the printer's own format) and 2 M K N per trip; XLA's cost analysis
    counts the body once."""
    import jax
    import jax.numpy as jnp

    def f(x, ws):
        def step(h, w):
            return jnp.dot(h, w, precision="highest"), None
        return jax.lax.scan(step, x, ws)[0]

    x = jax.ShapeDtypeStruct((16, 32), jnp.float32)
    ws = jax.ShapeDtypeStruct((6, 32, 32), jnp.float32)
    exe = jax.jit(f).lower(x, ws).compile()
    c = hc.hlo_cost(exe.as_text())
    matmuls = 6 * 2 * 16 * 32 * 32
    assert c.unknown_loops == [] and [n for _, n in c.loops] == [6]
    assert matmuls <= c.flops <= 1.02 * matmuls, c.to_dict()
    # each trip reads one [32, 32] weight slice, not the whole stack
    assert c.bytes_accessed < 6 * (6 * 32 * 32 * 4), c.to_dict()


def test_convolution_counts_only_taps_on_the_input():
    """An einsum 'btd,dcf->btcf' the TPU compiler writes as a convolution whose spatial window
    of 2 slides over padding 1 on each side of a size-1 input: each of the 2 outputs meets one
    real tap, so 2 x (b t) x f x d x 2 FLOPs, not twice that (the whole window). A plain
    [16, 64] x [64, 32] matmul as a 1x1 convolution counts 2 M K N."""
    text = """HloModule c, num_partitions=1

ENTRY %e (x: f32[2,48,1024,1], w: bf16[1024,2,4096,1], a: f32[16,64], b: f32[64,32]) -> f32[2,48,2,4096] {
  %x = f32[2,48,1024,1]{2,1,3,0} parameter(0)
  %w = bf16[1024,2,4096,1]{2,0,1,3} parameter(1)
  %a = f32[16,64]{1,0} parameter(2)
  %b = f32[64,32]{1,0} parameter(3)
  %mm = f32[16,32]{1,0} convolution(%a, %b), dim_labels=bf_io->bf
  ROOT %c = f32[2,48,2,4096]{3,1,2,0} convolution(%x, %w), window={size=1x2 pad=0_0x1_1 rhs_reversal=0x1}, dim_labels=0bf1_i1o0->0b1f
}
"""
    c = hc.hlo_cost(text)
    assert c.matmul_flops == 2 * 16 * 64 * 32 + 2 * (2 * 48) * 4096 * 1024 * 2
    assert c.flops == c.matmul_flops


def test_counter_that_steps_by_two():
    """The compiler's bidirectional windowed loops add 2 to their counter: `i < 8` from 0 runs 4
    trips, not 8."""
    text = LOOP_KNOWN.replace(', backend_config={"known_trip_count":{"n":"5"}}', "")
    text = text.replace("%lim = s32[] constant(999)", "%lim = s32[] constant(8)")
    text = text.replace("%one = s32[] constant(1)", "%one = s32[] constant(2)")
    c = hc.hlo_cost(text)
    assert c.loops == [("body", 4)] and c.flops == 4 * (2 * 8 * 32 * 16 + 1)


def test_splash_attention_calls_count_model_flops():
    """A splash forward on q [2, 4, 1, 512, 64] and k [2, 4, 512, 64]: 4 x (2 4 1 512) x 512 x 64;
    a Pallas call of unknown name counts 0 and is listed."""
    text = """HloModule s, num_partitions=1

ENTRY %e (q: bf16[2,4,1,512,64], k: bf16[2,4,512,64], v: bf16[2,4,512,64], h: f32[64,32]) -> (f32[2,4,1,512,64], f32[64]) {
  %m = s8[1,1,1]{2,1,0} constant({...})
  %q = bf16[2,4,1,512,64]{4,3,2,1,0} parameter(0)
  %k = bf16[2,4,512,64]{3,2,1,0} parameter(1)
  %v = bf16[2,4,512,64]{3,2,1,0} parameter(2)
  %h = f32[64,32]{1,0} parameter(3)
  %splash_mqa_fwd_segmented_residuals.2 = f32[2,4,1,512,64]{4,3,2,1,0} custom-call(%m, %m, %q, %k, %v), custom_call_target="tpu_custom_call"
  %shard_map.7 = f32[64]{0} custom-call(%h), custom_call_target="tpu_custom_call"
  ROOT %t = (f32[2,4,1,512,64]{4,3,2,1,0}, f32[64]{0}) tuple(%splash_mqa_fwd_segmented_residuals.2, %shard_map.7)
}
"""
    c = hc.hlo_cost(text)
    assert c.pallas_flops == 4 * (2 * 4 * 1 * 512) * 512 * 64 == c.flops == c.matmul_flops
    assert c.pallas_calls == {"splash_mqa_fwd_segmented_residuals": 1, "shard_map": 1}


def test_fused_increment_and_fused_condition():
    """The counter's `+ 2` and the loop's `i < 8` each inside a fusion (as the TPU compiler often
    writes them): still 4 trips."""
    text = LOOP_KNOWN.replace(', backend_config={"known_trip_count":{"n":"5"}}', "")
    text = text.replace("%lim = s32[] constant(999)", "%lim = s32[] constant(8)")
    text = text.replace("%one = s32[] constant(1)", "%one = s32[] constant(2)")
    text = text.replace("%next = s32[] add(%i, %one)",
                        "%next = s32[] fusion(%i, %one), kind=kLoop, calls=%inc")
    text = text.replace("ROOT %lt = pred[] compare(%j, %lim), direction=LT",
                        "ROOT %lt = pred[] fusion(%j, %lim), kind=kLoop, calls=%less")
    text = text.replace("%body (p:", """%inc (u: s32[], v: s32[]) -> s32[] {
  %u = s32[] parameter(0)
  %v = s32[] parameter(1)
  ROOT %w = s32[] add(%u, %v)
}

%less (x: s32[], y: s32[]) -> pred[] {
  %x = s32[] parameter(0)
  %y = s32[] parameter(1)
  ROOT %c = pred[] compare(%x, %y), direction=LT
}

%body (p:""", 1)
    c = hc.hlo_cost(text)
    assert c.loops == [("body", 4)] and c.unknown_loops == []
    assert c.flops == 4 * (2 * 8 * 32 * 16 + 1)


@pytest.mark.parametrize("update", ["copy(%raw)", "add(%ci, %one)"])
def test_counter_copied_around_its_increment(update):
    """The 7B update's windowed loops copy the counter before or after `+ 2` (`i < 8`: 4 trips);
    read as `+ 1` they were counted twice."""
    text = LOOP_KNOWN.replace(', backend_config={"known_trip_count":{"n":"5"}}', "")
    text = text.replace("%lim = s32[] constant(999)", "%lim = s32[] constant(8)")
    text = text.replace("%one = s32[] constant(1)", "%one = s32[] constant(2)")
    text = text.replace("%next = s32[] add(%i, %one)",
                        "%ci = s32[] copy(%i)\n  %raw = s32[] add(%i, %one)\n"
                        f"  %next = s32[] {update}")
    c = hc.hlo_cost(text)
    adds = 2 if update.startswith("add") else 1
    assert c.loops == [("body", 4)] and c.flops == 4 * (2 * 8 * 32 * 16 + adds)


def test_decode_attention_kernel_cache_bytes_counted_per_trip():
    """The ragged decode kernel inside a loop of 3 trips, on lengths s32[4], live blocks s32[2],
    q bf16[4,1,2,128], k bf16[4,1,128,256], v bf16[4,1,256,128]: its cache operands are
    4 x 128 x 256 x 2 B each, 3 times; a second call found by its metadata op_name; a splash
    call and another Pallas call add nothing."""
    from tseeds_jax.model import decode_attention

    assert hc.DECODE_KERNEL == decode_attention.KERNEL_NAME
    tup = "(s32[], bf16[4,1,2,128], bf16[4,1,128,256], bf16[4,1,256,128], s32[4], s32[2])"
    text = f"""HloModule d, num_partitions=1

%body (p: {tup}) -> {tup} {{
  %p = {tup} parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %q = bf16[4,1,2,128]{{3,2,1,0}} get-tuple-element(%p), index=1
  %k = bf16[4,1,128,256]{{3,2,1,0}} get-tuple-element(%p), index=2
  %v = bf16[4,1,256,128]{{3,2,1,0}} get-tuple-element(%p), index=3
  %n = s32[4]{{0}} get-tuple-element(%p), index=4
  %b = s32[2]{{0}} get-tuple-element(%p), index=5
  %one = s32[] constant(1)
  %next = s32[] add(%i, %one)
  %ragged_decode_attention.3 = bf16[4,1,2,128]{{3,2,1,0}} custom-call(%n, %b, %q, %k, %v), custom_call_target="tpu_custom_call"
  ROOT %t = {tup} tuple(%next, %ragged_decode_attention.3, %k, %v, %n, %b)
}}

%cond (c: {tup}) -> pred[] {{
  %c = {tup} parameter(0)
  %j = s32[] get-tuple-element(%c), index=0
  %lim = s32[] constant(3)
  ROOT %lt = pred[] compare(%j, %lim), direction=LT
}}

ENTRY %e (q0: bf16[4,1,2,128], k0: bf16[4,1,128,256], v0: bf16[4,1,256,128], n0: s32[4], b0: s32[2]) -> bf16[4,1,2,128] {{
  %q0 = bf16[4,1,2,128]{{3,2,1,0}} parameter(0)
  %k0 = bf16[4,1,128,256]{{3,2,1,0}} parameter(1)
  %v0 = bf16[4,1,256,128]{{3,2,1,0}} parameter(2)
  %n0 = s32[4]{{0}} parameter(3)
  %b0 = s32[2]{{0}} parameter(4)
  %zero = s32[] constant(0)
  %init = {tup} tuple(%zero, %q0, %k0, %v0, %n0, %b0)
  %loop = {tup} while(%init), condition=%cond, body=%body
  %q1 = bf16[4,1,2,128]{{3,2,1,0}} get-tuple-element(%loop), index=1
  %custom-call.9 = bf16[4,1,2,128]{{3,2,1,0}} custom-call(%n0, %b0, %q1, %k0, %v0), custom_call_target="tpu_custom_call", metadata={{op_name="jit(step)/ragged_decode_attention/pallas_call"}}
  %splash_mqa_fwd.1 = bf16[4,1,2,128]{{3,2,1,0}} custom-call(%n0, %b0, %q1, %k0, %v0), custom_call_target="tpu_custom_call"
  ROOT %other.2 = bf16[4,1,2,128]{{3,2,1,0}} custom-call(%n0, %b0, %custom-call.9, %k0, %v0), custom_call_target="tpu_custom_call"
}}
"""
    c = hc.hlo_cost(text)
    assert c.loops == [("body", 3)]
    cache = 2 * (4 * 128 * 256 * 2)
    assert c.decode_cache_bytes == 3 * cache + cache
    assert c.to_dict()["decode_cache_bytes"] == c.decode_cache_bytes
    assert c.bytes_accessed > c.decode_cache_bytes  # counted there too (as the whole cache)


def test_prefetch_into_on_chip_memory_counts_the_hbm_read_once():
    # The TPU compiler copies a weight [64, 32] bf16 into VMEM (layout memory space S(1)) with
    # copy-start / copy-done and the matmul fusion reads the VMEM copy: the weight crosses HBM
    # once (4,096 B), the fusion reads x [8, 64] f32 (2,048 B) from HBM and writes y [8, 32] f32
    # (1,024 B); the u32 context in S(2) (SMEM) is not HBM either.
    text = """HloModule v, num_partitions=1

%fused (a: f32[8,64], b: bf16[64,32]) -> f32[8,32] {
  %a = f32[8,64]{1,0} parameter(0)
  %b = bf16[64,32]{1,0:T(8,128)(2,1)S(1)} parameter(1)
  %bc = f32[64,32]{1,0} convert(%b)
  ROOT %d = f32[8,32]{1,0} dot(%a, %bc), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

ENTRY %main (x: f32[8,64], w: bf16[64,32]) -> f32[8,32] {
  %x = f32[8,64]{1,0} parameter(0)
  %w = bf16[64,32]{1,0:T(8,128)(2,1)} parameter(1)
  %cs = (bf16[64,32]{1,0:T(8,128)(2,1)S(1)}, bf16[64,32]{1,0:T(8,128)(2,1)}, u32[]{:S(2)}) copy-start(%w)
  %cd = bf16[64,32]{1,0:T(8,128)(2,1)S(1)} copy-done(%cs)
  ROOT %y = f32[8,32]{1,0} fusion(%x, %cd), kind=kOutput, calls=%fused
}
"""
    c = hc.hlo_cost(text)
    assert c.bytes_accessed == 64 * 32 * 2 + 8 * 64 * 4 + 8 * 32 * 4


def test_async_slices_into_on_chip_memory_read_their_slice():
    # A [2048, 1024] bf16 weight (4 MiB) prefetched into VMEM in two 2 MiB slices, then used by
    # a fusion: 4 MiB read from HBM, plus the fusion's [8, 1024] f32 result (32 KiB); a third
    # slice lands in HBM (read and written: 2 x 1 MiB).
    text = """HloModule a, num_partitions=1

%fused (a: s8[2097152], b: s8[2097152], c: s8[1048576]) -> f32[8,1024] {
  %a = s8[2097152]{0:T(1024)(128)(4,1)S(1)} parameter(0)
  %b = s8[2097152]{0:T(1024)(128)(4,1)S(1)} parameter(1)
  %c = s8[1048576]{0:T(1024)(128)(4,1)} parameter(2)
  ROOT %z = f32[8,1024]{1,0} broadcast(%a), dimensions={}
}

ENTRY %main (w: s8[4194304]) -> f32[8,1024] {
  %w = s8[4194304]{0:T(1024)(128)(4,1)} parameter(0)
  %s0 = ((s8[4194304]{0:T(1024)(128)(4,1)}), s8[2097152]{0:T(1024)(128)(4,1)S(1)}, s32[]{:S(2)}) slice-start(%w), slice={[0:2097152]}
  %s1 = ((s8[4194304]{0:T(1024)(128)(4,1)}), s8[2097152]{0:T(1024)(128)(4,1)S(1)}, s32[]{:S(2)}) slice-start(%w), slice={[2097152:4194304]}
  %s2 = ((s8[4194304]{0:T(1024)(128)(4,1)}), s8[1048576]{0:T(1024)(128)(4,1)}, s32[]{:S(2)}) slice-start(%w), slice={[0:1048576]}
  %d0 = s8[2097152]{0:T(1024)(128)(4,1)S(1)} slice-done(%s0)
  %d1 = s8[2097152]{0:T(1024)(128)(4,1)S(1)} slice-done(%s1)
  %d2 = s8[1048576]{0:T(1024)(128)(4,1)} slice-done(%s2)
  ROOT %y = f32[8,1024]{1,0} fusion(%d0, %d1, %d2), kind=kLoop, calls=%fused
}
"""
    c = hc.hlo_cost(text)
    mib = 1 << 20
    # the fusion reads d2 (1 MiB, in HBM) too
    assert c.bytes_accessed == 4 * mib + 2 * mib + 1 * mib + 8 * 1024 * 4
