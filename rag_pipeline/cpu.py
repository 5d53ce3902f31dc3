"""The CPU cores this process may use: its affinity mask, capped by a cgroup CPU quota (a container's `--cpus`, a
Kubernetes CPU limit), so that thread pools and worker counts fit the container rather than the host's cores."""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")


def cgroup_cpu_quota(root: Path = CGROUP) -> float | None:
    """The CPUs a cgroup quota allows (quota / period; v2 `cpu.max`, else v1 `cpu.cfs_quota_us`), None without one."""
    try:
        quota, period = (root / "cpu.max").read_text().split()
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return quota_us / period_us if quota_us > 0 and period_us > 0 else None


def usable_cores(root: Path = CGROUP) -> int:
    """The cores this process may run on (its affinity), at most its cgroup quota rounded up; at least 1."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    quota = cgroup_cpu_quota(root)
    return max(1, min(cores, math.ceil(quota))) if quota else cores
