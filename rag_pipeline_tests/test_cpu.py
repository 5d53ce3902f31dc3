"""The CPU: the cores thread pools and worker counts use (the affinity mask, capped by a cgroup CPU quota, v2 and
v1), and its instruction-set flags."""

from __future__ import annotations

import os
from pathlib import Path

from rag_pipeline.cpu import cgroup_cpu_quota, cpu_flags, usable_cores

AFFINITY = len(os.sched_getaffinity(0))


def test_a_cgroup_v2_quota_caps_the_cores(tmp_path: Path) -> None:
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_quota(tmp_path) is None and usable_cores(tmp_path) == AFFINITY
    (tmp_path / "cpu.max").write_text("50000 100000\n")  # half a CPU: still one thread
    assert cgroup_cpu_quota(tmp_path) == 0.5 and usable_cores(tmp_path) == 1
    (tmp_path / "cpu.max").write_text(f"{(AFFINITY + 8) * 100000} 100000\n")  # a quota above the affinity
    assert usable_cores(tmp_path) == AFFINITY


def test_a_cgroup_v1_quota_caps_the_cores(tmp_path: Path) -> None:
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")  # no quota
    assert cgroup_cpu_quota(tmp_path) is None
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("100000\n")
    assert cgroup_cpu_quota(tmp_path) == 1.0 and usable_cores(tmp_path) == 1


def test_no_cgroup_files_mean_the_affinity_mask(tmp_path: Path) -> None:
    assert cgroup_cpu_quota(tmp_path) is None and usable_cores(tmp_path) == AFFINITY
    (tmp_path / "cpu.max").write_text("garbage\n")
    assert cgroup_cpu_quota(tmp_path) is None


def test_cpu_flags_are_read_from_cpuinfo(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: fpu sse2 avx512f amx_bf16 amx_tile\n"
                       "\nprocessor\t: 1\nflags\t\t: fpu sse2 avx512f amx_bf16 amx_tile\n")
    assert cpu_flags(cpuinfo) == {"fpu", "sse2", "avx512f", "amx_bf16", "amx_tile"}
    assert cpu_flags(tmp_path / "missing") == frozenset()  # not Linux: no flags, so no AMX-only choice is made
