"""Launch shapes (ops/launch.py): defaults, overrides, the split of small batches."""

import pytest
import torch

from replayssm.ops import launch

CPU = torch.device("cpu")  # one "SM": a batch is small below launch.SPLIT_PER_SM (2) programs


def test_verify_default_and_small_batch_shape():
    big = launch.resolve("verify", 128, 64, CPU, split_small=True)
    assert (big.num_warps, big.rows, big.rows_per_program) == (4, 64, 128)  # a whole head per program
    assert (big.stages, big.k_chunk) == (2, 32)
    small = launch.resolve("verify", 128, 1, CPU, split_small=True)
    assert small.rows_per_program == 64 and small.programs_per_head == 2  # a head split over two programs
    # the verify streams one row per thread: no more warps than 64 rows fill, and the fold tile shrinks with them
    assert small.num_warps == 2 and small.rows == 32


def test_tile_config_checks_the_chunk():
    assert launch.TileConfig(k_chunk=64).k_chunk == 64
    for bad in (4, 24, "32"):
        with pytest.raises(ValueError, match="k_chunk"):
            launch.TileConfig(k_chunk=bad)


def test_an_override_wins_over_the_small_batch_shape():
    with launch.override(verify=launch.TileConfig(num_warps=2, rows_per_thread=1)):
        ln = launch.resolve("verify", 128, 1, CPU, split_small=True)
    assert ln.num_warps == 2 and ln.rows == 8  # 4 row-lanes x 2 warps x 1 row
    # an override is taken as given: 4 warps on 64-row programs (the default split would halve the warps)
    with launch.override(verify=launch.TileConfig(num_warps=4, rows_per_thread=4, rows_per_program=64)):
        ln = launch.resolve("verify", 128, 1, CPU, split_small=True)
    assert (ln.num_warps, ln.rows, ln.rows_per_program) == (4, 64, 64)


def test_other_kernels_keep_their_defaults_and_unknown_names_are_refused():
    ln = launch.resolve("fold", 128, 2, CPU)
    assert ln.num_warps == launch.DEFAULTS["fold"].num_warps and ln.rows_per_program == ln.rows
    with pytest.raises(ValueError, match="unknown kernels"), launch.override(nope=launch.TileConfig()):
        pass
