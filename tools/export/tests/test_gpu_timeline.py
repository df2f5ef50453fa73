"""The timeline analysis (npu_export.gpu_timeline) on hand-made block records: each launch's
pre, release, body, late and tail, the steps' first launch found past the graph's own kernels,
and the step's sums. The records themselves need the GPU machine (NPU_CUDA_TIMELINE=1).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from npu_export.gpu_timeline import align, grids_of, summarize  # noqa: E402


def rec(grid: int, t0: int, t1: int, t2: int, block: int, nblocks: int) -> list[int]:
    """One block's record as npu-cuda-bench writes it: [grid, t0, t1, t2, block, smid, blocks]."""
    return [grid, t0, t1, t2, block, block % 4, nblocks]


def run() -> list[list[int]]:
    """A graph kernel of one block (grid 1), then the step's two launches: grid 2 (two blocks,
    waits at 3000 and 3400, exits 9000 and 10000) and grid 3 (one block, entered at 5000 while
    grid 2 ran, released at 11000 after grid 2's last exit at 10000, exits at 13000)."""
    return [
        rec(1, 0, 0, 2000, 0, 1),
        rec(2, 1000, 3000, 9000, 0, 2),
        rec(2, 1500, 3400, 10000, 1, 2),
        rec(3, 5000, 11000, 13000, 0, 1),
    ]


def doc(runs: int = 2) -> dict[str, Any]:
    return {"graph": True, "launches": [["k_gemv", 2], ["k_attn", 1]], "runs": [run() for _ in range(runs)]}


def test_grids_are_ordered_by_entry_with_their_first_and_last_stamps() -> None:
    grids = grids_of(list(reversed(run())))
    assert [g.grid for g in grids] == [1, 2, 3]
    g = grids[1]
    assert (g.blocks, g.records, g.t0, g.t1, g.t1_last, g.t2) == (2, 2, 1000, 3000, 3400, 10000)
    assert g.t2_median == 9500


def test_a_kernel_without_a_recorded_wait_counts_from_its_entry() -> None:
    (g,) = grids_of([rec(5, 700, 0, 900, 0, 1)])
    assert g.t1 == 700 and g.t1_last == 700


def test_the_steps_start_where_the_block_counts_agree() -> None:
    grids = grids_of(run())
    assert align(grids, [("k_gemv", 2), ("k_attn", 1)]) == 1


def test_each_launch_is_priced_per_kind() -> None:
    s = summarize(doc())
    kinds = {k["kind"]: k for k in s["kinds"]}
    gemv, attn = kinds["k_gemv x2"], kinds["k_attn x1"]
    # grid 2: released 1 us after grid 1's exit, body 7 us, its second block 0.4 us late,
    # its last exit 0.5 us past the median
    assert gemv["pre_us"] == pytest.approx(2.0)
    assert gemv["release_us"] == pytest.approx(1.0)
    assert gemv["body_us"] == pytest.approx(7.0)
    assert gemv["late_us"] == pytest.approx(0.4)
    assert gemv["tail_us"] == pytest.approx(0.5)
    # grid 3: resident 6 us before its release, which came 1 us after grid 2's last exit
    assert attn["pre_us"] == pytest.approx(6.0)
    assert attn["release_us"] == pytest.approx(1.0)
    assert attn["body_us"] == pytest.approx(2.0)
    assert gemv["per_step"] == 1 and attn["per_step"] == 1
    # the step's sum per kind is (release + body) x occurrences, largest first
    assert [k["kind"] for k in s["kinds"]] == ["k_gemv x2", "k_attn x1"]
    assert gemv["step_us"] == pytest.approx(8.0)
    (st, _) = s["steps"]
    assert st == {"span_us": 10.0, "grids": 3, "offset": 1, "block_count_mismatches": 0}


def test_a_launch_list_that_disagrees_is_counted() -> None:
    d = doc(runs=1)
    d["launches"] = [["k_gemv", 2], ["k_attn", 4]]
    assert summarize(d)["steps"][0]["block_count_mismatches"] == 1
