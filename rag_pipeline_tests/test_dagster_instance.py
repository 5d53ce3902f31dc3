"""The Dagster instance a newcomer meets: no community pop-up over the UI, and `make demo` and `make dev` on the same
instance so the UI lists the demo's runs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster import DagsterInstance
from dagster._core.instance.ref import InstanceRef

from rag_pipeline.defs.sensors import corpus_summary_after_ingest

from .conftest import REPO

INSTANCE_CONFIGS = [REPO / "dagster.yaml", REPO / "deploy" / "dagster-postgres.yaml",
                    REPO / "deploy" / "dagster" / "dagster.yaml"]


@pytest.mark.parametrize("path", INSTANCE_CONFIGS, ids=lambda path: str(path.relative_to(REPO)))
def test_instance_configs_turn_the_community_pop_up_off(path: Path) -> None:
    assert yaml.safe_load(path.read_text())["nux"] == {"enabled": False}


def test_the_instance_shows_no_community_pop_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Dagster reads the setting: the UI's `shouldShowNux` is `nux_enabled and not seen`."""
    (tmp_path / "dagster.yaml").write_text((REPO / "dagster.yaml").read_text())
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    with dg.DagsterInstance.get() as instance:
        assert instance.nux_enabled is False


def make_commands(target: str, data_dir: Path) -> list[str]:
    environment = {key: value for key, value in os.environ.items() if not key.startswith("MAKE")}
    dry_run = subprocess.run(["make", "-n", target, f"DATA_DIR={data_dir}"], cwd=REPO, env=environment,
                             capture_output=True, text=True, check=True)
    return dry_run.stdout.splitlines()


def dagster_home_of(commands: list[str]) -> str:
    [home] = {match.group(1) for line in commands for match in [re.search(r"DAGSTER_HOME=(\S+)", line)] if match}
    return home


@pytest.mark.slow
def test_make_demo_records_its_runs_in_the_instance_make_dev_opens(tmp_path: Path) -> None:
    """`make demo` and `make dev` set the same DAGSTER_HOME and copy the same dagster.yaml into it; an ingest run
    the way `make demo` runs it is then in that instance's run storage (what the UI of `make dev` lists)."""
    data_dir = tmp_path / "data"
    demo, dev = make_commands("demo", data_dir), make_commands("dev", data_dir)
    home = dagster_home_of(demo)
    assert home == dagster_home_of(dev) == str(data_dir / "dagster_home")
    copy = f"cp dagster.yaml {home}/dagster.yaml"
    assert any(copy in line for line in demo) and any(copy in line for line in dev)
    [ingest] = [line for line in demo if "rag-pipeline ingest" in line]
    assert ingest.startswith(f"DAGSTER_HOME={home} ") and ingest.endswith(f"--data-dir {data_dir}")

    Path(home).mkdir(parents=True)
    (Path(home) / "dagster.yaml").write_text((REPO / "dagster.yaml").read_text())
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "pumps.md").write_text("# Pumps\n\nThe bilge pump seals are inspected every fortnight.\n")
    for number in range(4):
        (corpus / f"note-{number}.md").write_text(f"# Note {number}\n\nValve {number} is checked monthly.\n")
    done = subprocess.run([sys.executable, "-m", "rag_pipeline", "ingest", str(corpus), "--data-dir", str(data_dir),
                           "--json"], cwd=REPO, env={**os.environ, "DAGSTER_HOME": home}, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    run_ids = summary["run_ids"]
    assert len(summary["shards"]) > 1
    with DagsterInstance.from_ref(InstanceRef.from_dir(home)) as instance:
        assert run_ids and all(instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.SUCCESS
                               for run_id in run_ids)
        # One run: the shards, then the assets after them (enrichment, roster, the generation switch, the summary),
        # with one "planned" event per asset for the whole shard range.
        [run_id] = run_ids

        def events(kind: dg.DagsterEventType) -> list:
            return [record.event_log_entry.dagster_event
                    for record in instance.get_records_for_run(run_id, of_type=kind, limit=1000).records]

        materialised = {event.asset_key.to_user_string() for event in events(dg.DagsterEventType.ASSET_MATERIALIZATION)}
        assert {"raw_documents", "metadata_sidecar", "index_generation", "corpus_summary"} <= materialised
        assert len(events(dg.DagsterEventType.ASSET_MATERIALIZATION_PLANNED)) == len(materialised)
        # That run refreshed the corpus summary itself: the sensor that refreshes it after ingest runs skips it.
        context = dg.build_run_status_sensor_context(
            sensor_name="corpus_summary_after_ingest", dagster_instance=instance,
            dagster_run=instance.get_run_by_id(run_id), dagster_event=events(dg.DagsterEventType.RUN_SUCCESS)[0])
        assert "refreshed the corpus summary itself" in corpus_summary_after_ingest(context).skip_message


def test_every_step_that_opens_the_stores_holds_the_store_pool() -> None:
    """Every asset, asset check and op given the `rag` or `retrieval` resource (they open the sidecar, the embedded
    store or the artifacts) but the per-document stages holds the rag_store_writer pool, which dagster.yaml limits
    to one step: a sensor-started corpus_summary and the eval job queue behind each other instead of failing with
    StoreLocked."""
    from rag_pipeline.definitions import defs
    from rag_pipeline.defs.resources import STORE_POOL

    repository = defs().get_repository_def()
    steps = {node.name: node for job in repository.get_all_jobs() for node in job.all_node_defs}
    opening = {name: node for name, node in steps.items() if node.required_resource_keys & {"rag", "retrieval"}}
    assert {"eval_report", "eval_report_eval_quality_gate", "corpus_summary", "source_manifest",
            "answer_question_op", "raw_documents", "index_generation"} <= set(opening)
    # The per-document stages of shard-range runs run in parallel (issue 28): they never open the embedded store,
    # and the sidecar's connection waits for its file lock.
    per_document = {"markdown_documents", "redacted_documents", "chunks", "embeddings"}
    assert per_document <= set(opening) and all(opening[name].pool is None for name in per_document)
    assert {name: node.pool for name, node in opening.items()
            if node.pool != STORE_POOL and name not in per_document} == {}
    concurrency = yaml.safe_load((REPO / "dagster.yaml").read_text())["concurrency"]
    assert concurrency["pools"] == {"granularity": "op", "default_limit": 1}
