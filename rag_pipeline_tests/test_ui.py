"""End to end through the Dagster UI, as a person would see it.

`dagster dev` runs from the repository (`workspace.yaml`, a copy of `dagster.yaml` in a fresh DAGSTER_HOME) over
a copy of the sample corpus. Through the UI's own GraphQL API the test backfills every shard partition of the
seven ingest assets, waits for the corpus-summary sensor to materialise `corpus_summary`, materialises
`eval_report`, then headless Chromium renders the asset
graph and the pages of vector_index (its shard partitions), markdown_documents (a shard's documents table),
corpus_summary (documents by type) and eval_report (the metrics), and the rendered DOM is checked against the
corpus itself. Screenshots go to `<tmp_path>/screenshots` and, when `$RAG_UI_SCREENSHOTS` is set, to that folder.

Needs Debian's `chromium` (`apt-get install -y chromium`); see `dagster_ui.py`.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from rag_pipeline.defs.assets import TABLE_COLUMNS
from rag_pipeline_tests.conftest import REPO, SAMPLE_CORPUS
from rag_pipeline_tests.dagster_ui import DagsterDev, GraphQL, Page, png_size, render, running_dagster_dev, wait_for

pytestmark = pytest.mark.slow

INGEST_ASSETS = ["raw_documents", "markdown_documents", "redacted_documents", "chunks", "embeddings",
                 "vector_index", "metadata_sidecar"]
ALL_ASSETS = [*INGEST_ASSETS, "source_manifest", "corpus_summary", "golden_set", "eval_report"]
GROUPS = ["ingest", "index", "eval"]
SHARD_KEYS = list("0123456789abcdef")
EVAL_METRICS = ["recall@5", "recall@10", "ndcg@10", "mrr@10", "map", "precision@5"]
NUX = "Join the Dagster community"
MIN_PNG_BYTES = 30_000  # a blank 1600x1000 page is a few kB; the real pages are 100 kB and more
BACKFILL_TIMEOUT = 360
RUN_TIMEOUT = 300
BACKFILL_DONE = {"COMPLETED_SUCCESS", "COMPLETED"}
BACKFILL_BAD = {"FAILED", "FAILING", "CANCELED", "CANCELING", "COMPLETED_FAILED"}
RUN_BAD = {"FAILURE", "CANCELED", "CANCELING"}

INSTIGATORS = """query($repo: RepositorySelector!) {
  sensorsOrError(repositorySelector: $repo) { __typename
    ... on Sensors { results { name sensorState { id status ticks(limit: 1) { status skipReason runIds } } } }
    ... on PythonError { message } }
  schedulesOrError(repositorySelector: $repo) { __typename
    ... on Schedules { results { name scheduleState { id status } } }
    ... on PythonError { message } } }"""
STOP_SENSOR = """mutation($id: String) { stopSensor(id: $id) { __typename
  ... on StopSensorMutationResult { instigationState { status } } ... on Error { message } } }"""
STOP_SCHEDULE = """mutation($id: String) { stopRunningSchedule(id: $id) { __typename
  ... on ScheduleStateResult { scheduleState { status } } ... on Error { message } } }"""
LAUNCH_BACKFILL = """mutation($params: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $params) {
  __typename ... on LaunchBackfillSuccess { backfillId } ... on Error { message } ... on PythonError { stack } } }"""
BACKFILL = """query($id: String!) { partitionBackfillOrError(backfillId: $id) { __typename
  ... on PartitionBackfill { id status numPartitions partitionNames assetSelection { path }
                             error { message stack } runs(limit: 100) { runId status jobName } }
  ... on Error { message } } }"""
LAUNCH_RUN = """mutation($params: ExecutionParams!) { launchRun(executionParams: $params) { __typename
  ... on LaunchRunSuccess { run { runId status } } ... on Error { message } ... on PythonError { stack }
  ... on RunConfigValidationInvalid { errors { message } } } }"""
RUN = """query($id: ID!) { runOrError(runId: $id) { __typename
  ... on Run { runId status jobName } ... on Error { message } } }"""
RUNS = """{ runsOrError(limit: 100) { __typename ... on Runs { results { runId jobName status tags { key value } } }
  ... on Error { message } } }"""
RUN_LOGS = """query($id: ID!) { logsForRun(runId: $id, limit: 1000) { __typename
  ... on EventConnection { events { __typename
      ... on MessageEvent { message level stepKey eventType }
      ... on ErrorEvent { error { message stack causes { message stack } } } } }
  ... on Error { message } } }"""
PARTITION_STATS = """query($keys: [AssetKeyInput!]) { assetNodes(assetKeys: $keys) {
  assetKey { path } partitionStats { numMaterialized numPartitions numFailed numMaterializing } } }"""
LATEST_MATERIALIZATION = """query($key: AssetKeyInput!) { assetOrError(assetKey: $key) { __typename
  ... on Asset { assetMaterializations(limit: 1) { runId timestamp metadataEntries { __typename label
      ... on FloatMetadataEntry { floatValue } ... on IntMetadataEntry { intValue }
      ... on MarkdownMetadataEntry { mdStr } ... on TextMetadataEntry { text } } } }
  ... on Error { message } } }"""
DAEMONS = """{ instance { daemonHealth { allDaemonStatuses {
  daemonType healthy required lastHeartbeatErrors { message } } } } }"""


# ---------------------------------------------------------------------------------------------- GraphQL steps


def run_logs(gql: GraphQL, run_id: str, last: int = 80) -> str:
    """The run's event log (the last `last` events, with error stacks), for failure messages."""
    data = gql(RUN_LOGS, {"id": run_id})["logsForRun"]
    if data["__typename"] != "EventConnection":
        return f"(no logs for run {run_id}: {data})"
    lines = []
    for event in data["events"][-last:]:
        line = (f"{event.get('level', '')} {event.get('stepKey') or '-'} {event.get('eventType')}: "
                f"{event.get('message')}")
        error = event.get("error")
        if error:
            line += f"\n  {error['message']}\n{''.join(error.get('stack') or [])}"
            for cause in error.get("causes") or []:
                line += f"\n  caused by: {cause['message']}\n{''.join(cause.get('stack') or [])}"
        lines.append(line)
    return f"--- events of run {run_id} ---\n" + "\n".join(lines)


def daemon_health(gql: GraphQL) -> str:
    try:
        statuses = gql(DAEMONS)["instance"]["daemonHealth"]["allDaemonStatuses"]
    except AssertionError as error:
        return f"(daemon health unavailable: {error})"
    return "daemons: " + ", ".join(f"{s['daemonType']}={'ok' if s['healthy'] else 'UNHEALTHY'}"
                                    for s in statuses if s["required"])


KEEP_RUNNING = "corpus_summary_after_ingest"


def stop_automation(dev: DagsterDev, repo: dict) -> dict[str, str]:
    """Keep the run set deterministic (see the test's docstring): stop source_files_sensor, every schedule
    (nightly_eval) and any other sensor but the run-status sensor, then wait until no tick of a stopped sensor is
    still in flight and the run-status sensor has ticked once. Returns the instigators' states as found (name ->
    status)."""
    gql = dev.graphql
    data = gql(INSTIGATORS, {"repo": repo})
    assert data["sensorsOrError"]["__typename"] == "Sensors", gql.last
    assert data["schedulesOrError"]["__typename"] == "Schedules", gql.last
    sensors = {s["name"]: s["sensorState"] for s in data["sensorsOrError"]["results"]}
    schedules = {s["name"]: s["scheduleState"] for s in data["schedulesOrError"]["results"]}
    assert {"source_files_sensor", KEEP_RUNNING} <= sensors.keys(), gql.last
    found = {name: state["status"] for name, state in {**sensors, **schedules}.items()}

    for name, state in sensors.items():
        if name != KEEP_RUNNING and state["status"] == "RUNNING":
            stopped = gql(STOP_SENSOR, {"id": state["id"]})["stopSensor"]
            assert (stopped.get("instigationState") or {}).get("status") == "STOPPED", f"{name}: {gql.last}"
    for name, state in schedules.items():
        if state["status"] == "RUNNING":
            stopped = gql(STOP_SCHEDULE, {"id": state["id"]})["stopRunningSchedule"]
            assert (stopped.get("scheduleState") or {}).get("status") == "STOPPED", f"{name}: {gql.last}"

    # A tick the daemon began before the stop may still be evaluating (over the still empty roots): let it end.
    time.sleep(2)

    def sensor_states() -> dict[str, dict]:
        return {s["name"]: s["sensorState"] for s in gql(INSTIGATORS, {"repo": repo})["sensorsOrError"]["results"]}

    def no_tick_in_flight() -> bool:
        stopped = {name: state for name, state in sensor_states().items() if name != KEEP_RUNNING}
        assert all(state["status"] == "STOPPED" for state in stopped.values()), gql.last
        return all(not state["ticks"] or state["ticks"][0]["status"] != "STARTED" for state in stopped.values())

    wait_for("the last source_files_sensor tick to finish", no_tick_in_flight, 60, 1.0, lambda: gql.last)

    # The run-status sensor's first tick sets its cursor at the latest run to finish: only runs that end after it
    # are answered, so the backfill starts once that tick is done.
    def cursor_set() -> bool:
        ticks = sensor_states()[KEEP_RUNNING]["ticks"]
        return bool(ticks) and ticks[0]["status"] != "STARTED"

    wait_for(f"the first tick of {KEEP_RUNNING}", cursor_set, 120, 1.0, lambda: gql.last)
    return found


def launch_backfill(gql: GraphQL) -> str:
    params = {"assetSelection": [{"path": [name]} for name in INGEST_ASSETS], "allPartitions": True,
              "title": "UI test: every shard", "tags": [{"key": "rag/test", "value": "test_ui"}]}
    result = gql(LAUNCH_BACKFILL, {"params": params})["launchPartitionBackfill"]
    assert result["__typename"] == "LaunchBackfillSuccess", f"backfill not launched: {gql.last}"
    return result["backfillId"]


def wait_backfill(dev: DagsterDev, backfill_id: str, *, complete: bool = True) -> dict:
    """The backfill once it is complete, or (`complete=False`) once it has runs and every one succeeded: the
    daemon marks a backfill complete on its next tick, up to 30 s after its last run ends."""
    gql = dev.graphql
    seen: dict = {}

    def done() -> dict | None:
        backfill = gql(BACKFILL, {"id": backfill_id})["partitionBackfillOrError"]
        assert backfill["__typename"] == "PartitionBackfill", gql.last
        seen.update(backfill)
        failed_runs = [run for run in backfill["runs"] if run["status"] in RUN_BAD]
        if backfill["status"] in BACKFILL_BAD or failed_runs:
            logs = "\n".join(run_logs(gql, run["runId"]) for run in backfill["runs"])
            raise AssertionError(f"backfill {backfill_id} is {backfill['status']} (runs: {backfill['runs']}; "
                                 f"error: {backfill['error']})\n{logs}\n{dev.log_tail(40)}")
        runs_done = bool(backfill["runs"]) and all(run["status"] == "SUCCESS" for run in backfill["runs"])
        return backfill if backfill["status"] in BACKFILL_DONE or (runs_done and not complete) else None

    def describe() -> str:
        logs = "\n".join(run_logs(gql, run["runId"]) for run in seen.get("runs", []))
        return f"last GraphQL response: {gql.last}\n{daemon_health(gql)}\n{logs}\n{dev.log_tail(40)}"

    what = "complete" if complete else "run"
    return wait_for(f"backfill {backfill_id} to {what}", done, BACKFILL_TIMEOUT, 2.0, describe)


def launch_job(gql: GraphQL, repo: dict, job: str) -> str:
    selector = {"repositoryName": repo["repositoryName"], "repositoryLocationName": repo["repositoryLocationName"],
                "jobName": job}
    params = {"selector": selector, "executionMetadata": {"tags": [{"key": "rag/test", "value": "test_ui"}]}}
    result = gql(LAUNCH_RUN, {"params": params})["launchRun"]
    assert result["__typename"] == "LaunchRunSuccess", f"{job} not launched: {gql.last}"
    return result["run"]["runId"]


def wait_until_no_run_is_active(dev: DagsterDev, timeout: float = 180.0) -> None:
    """Wait until every run of the instance has ended (the embedded store admits one process at a time)."""
    deadline = time.monotonic() + timeout
    while any(run["status"] in ("QUEUED", "NOT_STARTED", "STARTING", "STARTED")
              for run in dev.graphql(RUNS)["runsOrError"]["results"]):
        assert time.monotonic() < deadline, dev.graphql(RUNS)
        time.sleep(1)


def wait_runs(dev: DagsterDev, run_ids: dict[str, str]) -> None:
    """Wait until every run (job name -> run id) succeeded; fail with the run's events when one does not."""
    gql = dev.graphql
    pending = dict(run_ids)

    def all_done() -> bool:
        for job, run_id in list(pending.items()):
            run = gql(RUN, {"id": run_id})["runOrError"]
            assert run["__typename"] == "Run", gql.last
            if run["status"] in RUN_BAD:
                raise AssertionError(f"{job} run {run_id} ended {run['status']}\n{run_logs(gql, run_id)}")
            if run["status"] == "SUCCESS":
                del pending[job]
        return not pending

    wait_for(f"runs {run_ids} to succeed", all_done, RUN_TIMEOUT, 2.0,
             lambda: "\n".join(run_logs(gql, run_id) for run_id in pending.values()) + "\n" + dev.log_tail(40))


def latest_metadata(gql: GraphQL, asset: str) -> tuple[str, dict]:
    """(run id, label -> entry) of the asset's latest materialization."""
    data = gql(LATEST_MATERIALIZATION, {"key": {"path": [asset]}})["assetOrError"]
    assert data["__typename"] == "Asset", gql.last
    assert data["assetMaterializations"], f"{asset} has no materialization: {gql.last}"
    latest = data["assetMaterializations"][0]
    return latest["runId"], {entry["label"]: entry for entry in latest["metadataEntries"]}


# -------------------------------------------------------------------------------------------------------- test


def test_dagster_ui_shows_the_pipeline(tmp_path: Path) -> None:
    """Determinism: the daemon starts with both sensors and the nightly_eval schedule RUNNING (their defaults) and
    ticks the file sensor at once, before the API even answers. So RAG_ROOTS starts as an EMPTY folder: that first
    tick finds nothing and requests nothing. The test then stops source_files_sensor through `stopSensor` (and every
    schedule through `stopRunningSchedule`: nightly_eval would add an eval_job run to a CI run near 02:00 UTC; any
    sensor added later but the run-status one is stopped too), waits until no tick is in flight, and only then
    copies the corpus in, so every ingest run is the backfill's and the set of runs is known.

    corpus_summary_after_ingest stays RUNNING, as a user would have it: it answers the backfill's run (the implicit
    asset job, `__ASSET_JOB`, which materialised ingest assets) with one corpus_summary_job run. The test waits for
    that run to succeed and only then launches eval_job (both open the embedded store, which one process at a time
    may hold), so the set of runs is exactly the backfill's, the sensor's and the test's.
    """
    started = time.monotonic()
    phases: dict[str, float] = {}

    def phase(name: str) -> None:
        phases[name] = round(time.monotonic() - started, 1)
        print(f"[test_ui] {phases[name]:6.1f}s {name}", flush=True)

    home, data_dir, roots = tmp_path / "dagster_home", tmp_path / "data", tmp_path / "corpus"
    shots, doms = tmp_path / "screenshots", tmp_path / "dom"
    for folder in (home, data_dir, roots, shots, doms):
        folder.mkdir()
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    stable = Path(os.environ["RAG_UI_SCREENSHOTS"]) if os.environ.get("RAG_UI_SCREENSHOTS") else None
    if stable:
        stable.mkdir(parents=True, exist_ok=True)

    # What the pages must show, computed from the corpus itself.
    files = sorted(path for path in SAMPLE_CORPUS.rglob("*") if path.is_file())
    sha_of = {path.relative_to(SAMPLE_CORPUS).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
              for path in files}
    types = Counter(path.suffix.lstrip(".").lower() for path in files)
    assert len(files) >= 10 and "pdf" in types, f"unexpected sample corpus: {files}"

    env = {"RAG_DATA_DIR": str(data_dir), "RAG_ROOTS": str(roots), "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1"}
    with running_dagster_dev(home, env, tmp_path / "dagster_dev.log") as dev:
        gql = dev.graphql
        repo = {"repositoryName": dev.repository, "repositoryLocationName": dev.location}
        phase(f"dagster dev up on port {dev.port}, code location {dev.location} loaded")

        found = stop_automation(dev, repo)
        runs = gql(RUNS)["runsOrError"]["results"]
        assert runs == [], f"no run may exist before the backfill (empty roots, file sensor stopped): {runs}"
        # The community/onboarding modal ("Join the Dagster community") covers every page of a fresh instance
        # on localhost. Its "Skip" button calls the `setNuxSeen` mutation (plus a localStorage flag): do the same,
        # so the screenshots show the pages; the DOM checks would pass behind the modal as well.
        assert gql("mutation { setNuxSeen }")["setNuxSeen"] is True, gql.last
        assert gql("{ shouldShowNux }")["shouldShowNux"] is False, gql.last
        shutil.copytree(SAMPLE_CORPUS, roots, dirs_exist_ok=True)
        phase(f"automation as found {found}; all but {KEEP_RUNNING} stopped; corpus copied into RAG_ROOTS")

        backfill_id = launch_backfill(gql)
        backfill = wait_backfill(dev, backfill_id, complete=False)  # complete: checked at the end
        assert sorted(backfill["partitionNames"]) == SHARD_KEYS, gql.last
        assert backfill["numPartitions"] == len(SHARD_KEYS), gql.last
        assert {tuple(key["path"]) for key in backfill["assetSelection"]} == {(a,) for a in INGEST_ASSETS}
        nodes = gql(PARTITION_STATS, {"keys": [{"path": [a]} for a in INGEST_ASSETS]})["assetNodes"]
        stats = {node["assetKey"]["path"][0]: node["partitionStats"] for node in nodes}
        for asset in INGEST_ASSETS:
            assert stats[asset] == {"numMaterialized": 16, "numPartitions": 16, "numFailed": 0,
                                    "numMaterializing": 0}, f"{asset}: {stats[asset]}"
        phase(f"backfill {backfill_id} of {len(INGEST_ASSETS)} assets x 16 shards ran in "
              f"{len(backfill['runs'])} run(s)")

        # The run-status sensor answers the backfill's run with a corpus_summary_job run; eval_job once it is done.
        def sensor_run() -> dict | None:
            return next((run for run in gql(RUNS)["runsOrError"]["results"]
                         if run["jobName"] == "corpus_summary_job"), None)

        refresh = wait_for("corpus_summary_after_ingest to launch corpus_summary_job", sensor_run, RUN_TIMEOUT, 1.0,
                           lambda: f"{gql.last}\n{dev.log_tail(40)}")
        assert {"key": "dagster/sensor_name", "value": "corpus_summary_after_ingest"} in refresh["tags"], refresh
        wait_runs(dev, {"corpus_summary_job": refresh["runId"]})
        wait_until_no_run_is_active(dev)
        launched = {"eval_job": launch_job(gql, repo, "eval_job")}
        wait_runs(dev, launched)
        summary_run, summary = latest_metadata(gql, "corpus_summary")
        eval_run, metrics = latest_metadata(gql, "eval_report")
        assert summary_run == refresh["runId"] and eval_run == launched["eval_job"], gql.last
        assert summary["documents"]["intValue"] == len(files), summary
        for name in EVAL_METRICS:
            assert metrics[name]["__typename"] == "FloatMetadataEntry", metrics.get(name)
            assert 0.0 <= metrics[name]["floatValue"] <= 1.0, metrics[name]
        phase("corpus_summary_job and eval_job succeeded")

        all_runs = gql(RUNS)["runsOrError"]["results"]
        by_job = Counter(run["jobName"] for run in all_runs)
        assert by_job["ingest_job"] == 0, f"the stopped file sensor launched runs: {all_runs}"
        assert by_job == {"__ASSET_JOB": 1, "corpus_summary_job": 1, "eval_job": 1}, all_runs
        assert all(run["status"] == "SUCCESS" for run in all_runs), all_runs

        pages: list[Page] = []

        def show(name: str, path: str, ready: Callable[[Page], bool]) -> Page:
            """Render a page; once more with a larger virtual time budget if it was not ready yet."""
            url = dev.url(path)
            for budget in (10_000, 30_000):
                page = render(url, shots / f"{len(pages) + 1:02d}-{name}.png", tmp_path, budget_ms=budget)
                (doms / f"{name}.html").write_text(page.html)
                if ready(page):
                    break
            if stable:
                shutil.copy(page.screenshot, stable / page.screenshot.name)
            print(f"[test_ui] rendered {path} in {page.seconds:.1f}s", flush=True)
            assert ready(page), f"{url} did not render in time; its DOM is in {doms / (name + '.html')}:\n" \
                                f"{page.text[:3000]}"
            assert NUX not in page.text, f"the community modal still covers {url}"
            pages.append(page)
            return page

        # 1. The asset graph (global lineage) with its three groups expanded: every asset, every group.
        expanded = ",".join([f"global@global:{g}" for g in GROUPS]
                            + [f"{dev.repository}@{dev.location}:{g}" for g in GROUPS])
        graph = show("asset-graph", "/asset-groups?" + urllib.parse.urlencode({"expanded": expanded}, safe="@:,"),
                     lambda p: all(name in p.texts for name in ALL_ASSETS))
        assert "lineage" in graph.title.lower(), graph.title
        for name in [*ALL_ASSETS, *GROUPS]:
            assert name in graph.texts, f"{name} missing from the asset graph: {graph.text[:2000]}"

        # 2. vector_index's partitions tab: the 16 shard partitions, all materialized.
        partitions = show("vector_index-partitions", "/assets/vector_index?view=partitions",
                          lambda p: re.search(r"Materialized\s*\(\s*16\s*\)", p.text) is not None)
        assert "vector_index" in partitions.title, partitions.title
        text = partitions.text
        assert re.search(r"16\s+Partitions", text), text[:2000]
        assert re.search(r"Materialized\s*\(\s*16\s*\)", text) and re.search(r"Missing\s*\(\s*0\s*\)", text), text
        assert re.search(r"Failed\s*\(\s*0\s*\)", text), text[:2000]
        listed = [title for title in partitions.titles if title in SHARD_KEYS]
        assert sorted(set(listed)) == SHARD_KEYS, f"shard partition keys listed: {listed}"
        assert all(key in partitions.texts for key in SHARD_KEYS), partitions.texts

        # 3. markdown_documents' materialisation of one shard (the one holding the most sample documents; which
        # partition the overview's "latest" shows is up to the event log, and a shard may hold none): the documents
        # table of that shard, one row per document converted in it.
        HEAD = ["path", "sha", "shard", "type", "sources", "tags"]
        by_shard = Counter(sha[0] for sha in sha_of.values())
        shard = min(by_shard, key=lambda key: (-by_shard[key], key))
        in_shard = {relative for relative, sha in sha_of.items() if sha[0] == shard}
        documents = show("markdown_documents", "/assets/markdown_documents?"
                         + urllib.parse.urlencode({"view": "partitions", "partition": shard}),
                         lambda p: any(t and t[0][:6] == HEAD and len(t) > 1 for t in p.tables))
        assert "markdown_documents" in documents.title, documents.title
        rows = documents.table_with_header(list(TABLE_COLUMNS))
        assert HEAD == list(TABLE_COLUMNS)[:6]
        assert len(rows) == len(in_shard), f"{len(rows)} document rows for shard {shard}: {rows}"
        shown = {}
        for row in rows:
            record = dict(zip(TABLE_COLUMNS, row))
            relative = Path(record["path"]).relative_to(roots).as_posix()
            sha = sha_of[relative]
            assert record["sha"] == sha[:12] and record["shard"] == sha[0], record
            assert record["type"] == Path(relative).suffix.lstrip(".").lower() and record["tags"] == "", record
            assert record["sources"] == "default", record
            # The sidecar's state when this stage ran: converted (chars, pages of paged formats), not failed;
            # "ok" comes at the end of the document's ingest (the catalogue), so the row says "pending".
            assert record["status"] == "pending" and record["error"] == "", record
            assert int(record["chars"]) > 0, record
            if record["type"] in ("pdf", "pptx"):
                assert int(record["pages"]) > 0, record
            shown[relative] = record
        assert shown.keys() == in_shard
        assert documents.metadata_value("shards") == ",".join(SHARD_KEYS)
        assert documents.metadata_value("added") == str(len(files))

        # 4. corpus_summary: documents by type (a Markdown table rendered by the UI), counted from the corpus.
        corpus_summary = show("corpus_summary", "/assets/corpus_summary",
                              lambda p: any(t and t[0][:2] == ["type", "documents"] for t in p.tables))
        assert "corpus_summary" in corpus_summary.title, corpus_summary.title
        by_type = corpus_summary.table_with_header(["type", "documents", "failed", "chunks", "redactions"])
        counts = {row[0]: int(row[1]) for row in by_type}
        assert counts == dict(types), f"documents by type shown: {counts}, in the corpus: {dict(types)}"
        assert "pdf" in counts and all(row[2] == "0" and int(row[3]) > 0 for row in by_type), by_type
        assert corpus_summary.metadata_value("documents") == str(len(files))
        assert corpus_summary.metadata_value("failures") == "none"

        # 5. eval_report: every headline metric as float metadata, the same values as the API's, and the report.
        report = show("eval_report", "/assets/eval_report",
                      lambda p: any(t and t[0] == ["Key", "Timestamp", "Value"] for t in p.tables))
        assert "eval_report" in report.title, report.title
        for name in EVAL_METRICS:
            value = float(report.metadata_value(name))
            assert abs(value - metrics[name]["floatValue"]) < 1e-6, (name, value, metrics[name])
        assert float(report.metadata_value("recall@5")) >= 0.5 and float(report.metadata_value("ndcg@10")) >= 0.4
        assert "Evaluation of" in report.metadata_value("report"), report.metadata_value("report")[:500]
        assert report.table_with_header(["id", "kind", "recall@5", "ndcg@10"]), "no per-question table"

        for page in pages:
            size = page.screenshot.stat().st_size
            assert size > MIN_PNG_BYTES, f"{page.screenshot} is only {size} bytes"
            assert png_size(page.screenshot) == (1600, 1000), png_size(page.screenshot)
            if stable:
                assert (stable / page.screenshot.name).stat().st_size == size
        phase(f"{len(pages)} pages rendered and checked")

        completed = wait_backfill(dev, backfill_id)
        assert {run["runId"] for run in completed["runs"]} == {run["runId"] for run in backfill["runs"]}, gql.last
        phase(f"backfill {backfill_id} {completed['status']}")

    assert not dev.survivors, f"processes of dagster dev survived the shutdown: {dev.survivors}"
    phase("dagster dev stopped, no process left")
    print(f"[test_ui] screenshots: {shots}" + (f" and {stable}" if stable else ""), flush=True)
