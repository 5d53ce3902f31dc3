"""file_lock: exclusive locks between processes, with the holder recorded."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from rag_pipeline.file_lock import LockHeld, holder_elsewhere, locked


def test_a_lock_names_its_holder_to_a_second_process(tmp_path: Path) -> None:
    """The lock every store and the ingest use: a process refused it learns who holds it."""
    lock = tmp_path / "x.lock"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from pathlib import Path; "
                               "from rag_pipeline.file_lock import acquire; "
                               f"acquire(Path({str(lock)!r}), record=True); print('held', flush=True); time.sleep(30)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert holder_elsewhere(lock).startswith(f"pid {holder.pid} (")  # asking does not take it
        assert holder_elsewhere(lock).startswith(f"pid {holder.pid} (")
        try:
            with locked(lock, wait=False):
                raise AssertionError("the lock was not held")
        except LockHeld as held:
            assert held.holder.startswith(f"pid {holder.pid} (")
    finally:
        holder.kill()
        holder.wait()
    assert holder_elsewhere(lock) is None  # released when its holder died
    with locked(lock, wait=False, record=True):
        assert holder_elsewhere(lock) is None  # this process holds it
    assert holder_elsewhere(tmp_path / "missing.lock") is None
