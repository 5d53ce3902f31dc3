"""A snapshot of the Dagster definitions (assets with groups, partitions, deps, kinds and checks; jobs;
schedules; sensors; resources), so a change to the graph shows as a diff of snapshots/dagster_definitions.json.

After an intended change: RAG_UPDATE_SNAPSHOTS=1 pytest rag_pipeline_tests/test_definitions.py, then review
and commit the new snapshot.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import dagster as dg

SNAPSHOT = Path(__file__).parent / "snapshots" / "dagster_definitions.json"


def partitions(definition: dg.PartitionsDefinition | None) -> str | None:
    if definition is None:
        return None
    keys = definition.get_partition_keys()
    return f"{type(definition).__name__}: {len(keys)} ({keys[0]}..{keys[-1]})"


def describe(definitions: dg.Definitions) -> dict[str, Any]:
    repository = definitions.get_repository_def()
    graph = repository.asset_graph
    assets = {}
    for key in sorted(graph.get_all_asset_keys(), key=lambda k: k.to_user_string()):
        node = graph.get(key)
        assets[key.to_user_string()] = {
            "group": node.group_name,
            "materializable": node.is_materializable,
            "partitions": partitions(node.partitions_def),
            "deps": sorted(parent.to_user_string() for parent in node.parent_keys),
            "kinds": sorted(node.kinds),
            "owners": sorted(node.owners),
            "pools": sorted(node.pools or ()),
            "checks": {check.name: graph.get_check_spec(check).blocking
                       for check in sorted(node.check_keys, key=lambda c: c.name)},
        }
    return {
        "assets": assets,
        "jobs": {
            job.name: {"assets": sorted(key.to_user_string() for key in job.asset_layer.selected_asset_keys),
                       "partitioned": job.partitions_def is not None}
            for job in sorted(repository.get_all_jobs(), key=lambda j: j.name) if not job.name.startswith("__")
        },
        "schedules": {schedule.name: {"cron": schedule.cron_schedule, "job": schedule.job_name,
                                      "default_status": schedule.default_status.value}
                      for schedule in repository.schedule_defs},
        "sensors": {sensor.name: {"type": type(sensor).__name__, "jobs": sorted(target.job_name for target in sensor.targets),
                                  "default_status": sensor.default_status.value}
                    for sensor in repository.sensor_defs},
        "resources": sorted(definitions.resources or {}),
    }


def test_definitions_match_the_snapshot() -> None:
    from rag_pipeline.definitions import defs

    current = describe(defs())
    if os.environ.get("RAG_UPDATE_SNAPSHOTS") == "1":
        SNAPSHOT.write_text(json.dumps(current, indent=2, sort_keys=True) + "\n")
    assert current == json.loads(SNAPSHOT.read_text()), (
        "the Dagster definitions changed: if intended, rerun with RAG_UPDATE_SNAPSHOTS=1 and review the diff")
