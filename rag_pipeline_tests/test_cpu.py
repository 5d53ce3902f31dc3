"""The cores thread pools and worker counts use: the affinity mask, capped by a cgroup CPU quota (v2 and v1)."""

from __future__ import annotations

import os
from pathlib import Path

from rag_pipeline.cpu import cgroup_cpu_quota, usable_cores

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
