"""Tests from a mutation review of the twenty-eighth session's checks (c40c755..): each kills a mutant the other
tests let through (the review disabled or weakened one check at a time)."""

import numpy as np
import pytest
import torch

from replayssm.cli import main
from replayssm.tiny import TINY_MODEL
from tests.helpers.cli import assert_one_line_error


# --- ops/moe.py: moe_offsets_end, moe_offsets_start, moe_offsets_monotone
@pytest.mark.parametrize("impl", ["reference", "triton"])
@pytest.mark.parametrize("off", [[0, 2, 3, 4, 5], [1, 2, 3, 4, 6], [0, 4, 3, 4, 6]],
                         ids=["ends-short", "starts-at-1", "falls"])  # fmt: skip
def test_grouped_gemm_refuses_each_way_offsets_can_be_wrong(impl, off):
    from replayssm.ops.moe import moe_gemm, moe_route

    g = torch.Generator().manual_seed(2)
    x, w = torch.randn(3, 16, generator=g), torch.randn(4, 16, 16, generator=g)
    rows, offsets, _ = moe_route(torch.tensor([[0, 3], [1, 3], [2, 0]]), 4)
    assert offsets.tolist() == [0, 2, 3, 4, 6]
    with pytest.raises(ValueError, match="offsets must rise from 0 to num_pairs=6"):
        moe_gemm(x, w, rows, torch.tensor(off, dtype=torch.int32), num_pairs=6, impl=impl)


# --- ops/moe.py: moe_route_ids_tensor
def test_route_refuses_expert_ids_of_the_wrong_rank_or_dtype():
    from replayssm.ops.moe import moe_route

    with pytest.raises(ValueError, match="expert_ids must have 2 dimensions"):
        moe_route(torch.tensor([0, 1]), 4)
    with pytest.raises(TypeError, match="expert_ids must have dtype"):
        moe_route(torch.tensor([[0.0, 1.0]]), 4)


# --- ops/paged_attention.py: pa_validate_flag
@pytest.mark.parametrize("impl", ["reference", "triton"])
def test_paged_attention_refuses_a_validate_that_is_not_a_bool(impl):
    from replayssm.ops.paged_attention import paged_attention
    from replayssm.state.kv import KVCache

    kv = KVCache(1, 2, 32, 2, 16, dtype=torch.float32, device="cpu", page_size=16)
    q = torch.randn(4, 4, 16)
    with pytest.raises(TypeError, match="validate must be a bool"):
        paged_attention(q, kv.k[0], kv.v[0], kv.block_table, torch.tensor([0, 1]), torch.tensor([3, 4]), T=2,
                        scale=0.25, validate="no", impl=impl)  # fmt: skip


# --- ops/_validate.py: validate_seq_word
def test_prefill_names_sequence_lengths_not_window_lengths():
    from replayssm.ops.conv import causal_conv1d_prefill

    x, w, b = torch.randn(6, 8), torch.randn(8, 4), torch.randn(8)
    with pytest.raises(ValueError, match=r"at least one token, got sequence lengths \[0, 6\]"):
        causal_conv1d_prefill(x, w, b, torch.tensor([0, 0, 6], dtype=torch.int32))


# --- state/pool.py: pool_layer_int_return
def test_a_numpy_layer_index_is_taken_as_a_python_int():
    from tests.helpers import pools

    assert type(pools.pool()._layer(np.int64(1))) is int


# --- state/commit.py: abort_drop_ssm
def test_an_abort_after_a_first_layer_verify_that_succeeded_folds_every_layer():
    """Layer 0's verify ran (and folded slot 0's flushing history there), then the step was aborted: abort must
    fold the other layers too, or an offload (which carries no fold markers) folds layer 0 twice."""
    from tests.helpers import pools
    from tests.helpers.pools import inputs, slots
    from tests.state.test_misuse_review8 import _flushing_pool

    clean, _ = _flushing_pool()
    p, w = _flushing_pool()
    x = inputs(p.cfg, [3], torch.Generator().manual_seed(9))
    pools.conv(p, w, 0, [0], x)
    pools.ssm(p, w, 0, [0], x)
    assert p.abort(slots([0])) == [] and int(p.cursors.pending[0]) == 0
    moved = [q.restore(q.offload(slots([0]))) for q in (clean, p)]
    for layer in range(p.cfg.num_layers):
        assert torch.equal(p.committed_state(layer, moved[1]), clean.committed_state(layer, moved[0]))


# --- ops/ring.py, ring_layers.py, shape.py: NumPy integers (ringcursors_int_convert, ring_num_slots_check,
#     ringlayers_numpy, shape_headdim_numpy, gdnshape_numpy, gdnshape_int_convert)
def test_ring_geometry_takes_numpy_ints_as_python_ints_and_refuses_bools():
    from replayssm.ops import GDNShape, Ring, RingCursors, RingLayers
    from replayssm.ops.shape import head_dim_error

    c = RingCursors.allocate(np.int64(2), L=np.int64(8), window=np.int64(3))
    assert (type(c.L), type(c.window)) == (int, int)
    one = RingCursors.allocate(1, L=8, window=3)
    for bad in (True, 1.0):
        with pytest.raises(ValueError, match="num_slots must be a positive int"):
            Ring.allocate(bad, 1, 2, 16, 16, L=8, window=3, dtype=torch.float32, cursors=one)
    rl = RingLayers.allocate(np.int64(2), 2, 1, 2, 16, 16, L=8, window=3, dtype=torch.float32)
    assert rl.num_layers == 2
    assert head_dim_error("K", np.int64(16)) is None
    s = GDNShape(H=np.int64(1), HV=np.int32(2), K=np.int64(16), V=16)
    assert s == GDNShape(1, 2, 16, 16) and all(type(getattr(s, n)) is int for n in ("H", "HV", "K", "V"))


# --- demo.py: demo_positions_plus1
def test_demo_positions_keep_the_runner_s_spare_position():
    from replayssm.demo import check_positions

    check_positions(TINY_MODEL, 3875, 4)
    with pytest.raises(ValueError, match="so at most 3875"):
        check_positions(TINY_MODEL, 3876, 4)


# --- cli/generate.py: gen_prompt_too_long
def test_generate_names_the_prompt_when_it_alone_overflows_the_positions(capsys):
    assert main(["generate", "--model", "tiny", "--prompt", "a b " * 3000, "--max-new-tokens", "1"]) == 2
    assert_one_line_error(capsys.readouterr(), "--prompt", "max_position_embeddings (4096); shorten it")


# --- cli/generate.py: gen_tiny_lower (a full CPU generate of two tokens)
def test_generate_takes_tiny_in_any_case(capsys):
    assert main(["generate", "--model", "TINY", "--prompt", "Hello", "--max-new-tokens", "2", "--device", "cpu"]) == 0


# --- bench/kernels.py: bench_max_seconds_skipped, bench_max_seconds_nobreak
def test_max_seconds_lists_every_point_not_started(tmp_path):
    from replayssm.bench.kernels import run_kernel_bench
    from tests.bench.test_kernel_bench import FakeTimer, config, fake_backends

    payload = run_kernel_bench(config(max_seconds=0.0, batches=(1, 2, 3)), tmp_path, peers={}, timer=FakeTimer(),
                               bandwidth=1e12, backends=fake_backends())  # fmt: skip
    assert payload["points"] == []
    assert payload["skipped"] == [{"T": 2, "L": 8, "B": b} for b in (1, 2, 3)]


# --- cli/drift.py: drift_tiny_lower (refused later, on --out: the model spec was taken)
def test_drift_takes_tiny_in_any_case(tmp_path, capsys):
    f = tmp_path / "a-file"
    f.write_text("")
    assert main(["drift", "--model", "TINY", "--out", str(f)]) == 2
    assert_one_line_error(capsys.readouterr(), f"--out {f}", "exists and is not a folder")


# --- cli/__init__.py: cli_repeated_dashdash (unreachable through main: argparse refuses anything after "--")
def test_repeated_options_stop_at_the_double_dash():
    from replayssm.cli import check_repeated_options

    check_repeated_options(["memory", "--model", "tiny", "--", "--model", "x"])
