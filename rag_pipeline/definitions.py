"""The Dagster code location: every definition under rag_pipeline/defs/, with code references on the assets."""

from pathlib import Path

import dagster as dg

from rag_pipeline.defs.step_executor import step_executor


@dg.definitions
def defs() -> dg.Definitions:
    loaded = dg.load_from_defs_folder(path_within_project=Path(__file__).parent)
    assets = list({id(asset): asset for asset in loaded.assets or []}.values())  # once, however often imported
    return dg.Definitions(
        assets=dg.with_source_code_references(assets),
        asset_checks=loaded.asset_checks, jobs=loaded.jobs, schedules=loaded.schedules, sensors=loaded.sensors,
        resources=loaded.resources, executor=step_executor,
    )
