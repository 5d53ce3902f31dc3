"""The CPU this process runs on: the cores it may use (its affinity mask, capped by a cgroup CPU quota: a container's
`--cpus`, a Kubernetes CPU limit, so that thread pools and worker counts fit the container rather than the host's
cores) and the instruction sets it has."""

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


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The instruction-set flags the kernel reports for this machine's CPU (Linux; empty elsewhere). The kernel
    lists a feature only when it supports it too (AMX needs Linux 5.16)."""
    try:
        with cpuinfo.open() as lines:
            for line in lines:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()
