"""npu_export.ncu_source against a hand-written source page in ncu's CSV layout."""

from __future__ import annotations

from npu_export.ncu_source import parse, regions, report

HEADER = (
    '"Address","Source","# Samples","Instructions Executed",'
    '"L2 Theoretical Sectors Global Excessive","L2 Theoretical Sectors Global",'
    '"L1 Wavefronts Shared Excessive","L1 Wavefronts Shared",'
    '"stall_long_sb","stall_no_inst","stall_wait","stall_long_sb (Not Issued)"'
)
PAGE = [
    '"Kernel Name","k_demo",',
    HEADER,
    '"0x7f0000001000","  IMAD R1, R2, R3, RZ","30","100","0","0","0","0","0","30","0","9"',
    '"0x7f0000001010","  BAR.SYNC.DEFER_BLOCKING 0x0","10","100","0","0","0","0","0","0","10","0"',
    '"0x7f0000001020","  LDGSTS.E.BYPASS.128 [R4], [R6.64]","0","50",'
    '"400","1200","300","525","0","0","0","0"',
    '"0x7f0000001030","  ISETP.LT.U32.AND P0, PT, R30, R12, PT","60","100","0","0","0","0","60","0","0","0"',
    '"Kernel Name","k_other",',
    HEADER,
    '"0x7f0000002000","  EXIT","99","1","0","0","0","0","0","0","0","0"',
]


def test_parses_the_first_kernel_only_with_relative_offsets() -> None:
    instrs = parse(PAGE)
    assert [i.offset for i in instrs] == [0x0, 0x10, 0x20, 0x30]
    assert instrs[0].stalls == {"no_inst": 30}  # the "(Not Issued)" column is not a reason
    assert instrs[2].l2_sectors == 1200 and instrs[2].shared_excess == 300


def test_regions_split_at_block_barriers() -> None:
    r = regions(parse(PAGE))
    assert [(lo, hi, s) for lo, hi, s, _ in r] == [(0x0, 0x10, 40.0), (0x20, 0x30, 60.0)]
    assert r[0][3] == {"no_inst": 30, "wait": 10}


def test_report_gives_shares_and_per_execution_excess() -> None:
    text = report(parse(PAGE), top=5)
    assert "4 instructions, 100 stall samples" in text
    assert " 60.0%  ISETP.LT.U32.AND" in text
    # 1200 sectors over 50 executions, 400 of them over the ideal; 525 wavefronts, 300 over
    assert "L2 24.0 (+8.0) shared 10.5 (+6.0)" in text
