"""The docker-compose deployment, checked structurally (no Docker engine runs here): every referenced path
exists, services reach each other by name, ports stay on 127.0.0.1, the Dagster instance and workspace fit the
services, and the Grafana dashboard queries only metrics the HTTP API exports."""

from __future__ import annotations

import json
import re
import shutil
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml

from .conftest import REPO

COMPOSE_FILE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "Dockerfile"
DEPLOY = REPO / "deploy"
RAG_SERVICES = ("code-location", "dagster-webserver", "dagster-daemon", "api", "worker")
DAGSTER_SERVICES = ("code-location", "dagster-webserver", "dagster-daemon")
REQUIRED_SERVICES = {"qdrant", "ollama", "ollama-pull", "postgres", *RAG_SERVICES, "prometheus", "grafana"}
DAGSTER_HOME = "/opt/dagster/home"

VARIABLE = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?+])(?P<arg>[^}]*))?\}")


def interpolate(value: str) -> str:
    """`value` as Compose resolves it with none of the variables set: `${VAR:-default}` / `${VAR-default}` give
    the default, `$$` a literal `$`. A variable without a default fails: the file must work without an .env."""

    def substitute(match: re.Match[str]) -> str:
        if match["op"] not in (":-", "-"):
            raise AssertionError(f"${{{match['name']}}} has no default in {value!r}")
        return match["arg"]

    parts = value.split("$$")
    resolved = [VARIABLE.sub(substitute, part) for part in parts]
    for part in resolved:
        assert not re.search(r"\$[A-Za-z_{]", part), f"unsupported interpolation in {value!r}"
    return "$".join(resolved)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE_FILE.read_text())


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


def environment(service: dict[str, Any]) -> dict[str, str]:
    """A service's environment with defaults resolved (list or mapping form)."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {key: interpolate(str(value)) for key, value in env.items()}


def raw_environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {key: str(value) for key, value in env.items()}


def published_ports(service: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(host ip, host port, container port) of each `ports` entry, short or long syntax."""
    ports = []
    for entry in service.get("ports") or []:
        if isinstance(entry, dict):
            ports.append((str(entry.get("host_ip", "")), str(entry.get("published", "")), str(entry["target"])))
            continue
        spec = interpolate(str(entry)).split("/")[0]
        parts = spec.rsplit(":", 2)
        if len(parts) == 3:
            ports.append((parts[0], parts[1], parts[2]))
        elif len(parts) == 2:
            ports.append(("", parts[0], parts[1]))
        else:
            ports.append(("", "", parts[0]))
    return ports


def container_ports(service: dict[str, Any]) -> set[str]:
    return {container for _, _, container in published_ports(service)} | {str(p) for p in service.get("expose", [])}


def mounts(service: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(kind "bind" | "volume", source, target) of each volume entry; bind sources are resolved paths."""
    result = []
    for entry in service.get("volumes") or []:
        if isinstance(entry, dict):
            kind, source, target = entry["type"], interpolate(str(entry.get("source", ""))), entry["target"]
        else:
            source, target, *_ = interpolate(str(entry)).split(":")
            kind = "bind" if source.startswith((".", "/", "~")) else "volume"
        result.append((kind, source, target))
    return result


def depends_on(service: dict[str, Any]) -> dict[str, str]:
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        return dict.fromkeys(deps, "service_started")
    return {name: spec.get("condition", "service_started") for name, spec in deps.items()}


def command(service: dict[str, Any]) -> list[str]:
    cmd = service.get("command") or []
    return [interpolate(str(part)) for part in (cmd if isinstance(cmd, list) else cmd.split())]


def option(args: list[str], *names: str) -> str:
    for index, arg in enumerate(args):
        if arg in names:
            return args[index + 1]
    raise AssertionError(f"none of {names} in {args}")


# --- compose file --------------------------------------------------------------------------------------------


def test_services_present_and_monitoring_behind_a_profile(compose, services):
    assert REQUIRED_SERVICES <= set(services)
    for name in ("prometheus", "grafana"):
        assert services[name].get("profiles") == ["monitoring"]
    for name in REQUIRED_SERVICES - {"prometheus", "grafana"}:
        assert not services[name].get("profiles"), f"{name} must start with a plain `docker compose up`"
    assert services["qdrant"]["image"] == "qdrant/qdrant:v1.20.0"
    assert services["postgres"]["image"] == "postgres:16"
    assert services["ollama"]["image"].startswith("ollama/ollama")
    assert services["ollama-pull"]["image"] == services["ollama"]["image"]
    header = COMPOSE_FILE.read_text().split("\n\n")[0]
    for phrase in ("docker compose up -d", "--profile monitoring", "127.0.0.1:3000", "embedded defaults"):
        assert phrase in header


def test_rag_services_share_one_image_and_the_environment_anchor(compose, services):
    shared_env = compose["x-rag-env"]
    images = {interpolate(services[name]["image"]) for name in RAG_SERVICES}
    assert len(images) == 1
    for name in RAG_SERVICES:
        build = services[name]["build"]
        context = build if isinstance(build, str) else build.get("context", ".")
        assert (COMPOSE_FILE.parent / context).resolve() == REPO
        dockerfile = "Dockerfile" if isinstance(build, str) else build.get("dockerfile", "Dockerfile")
        assert (REPO / dockerfile).is_file()
        assert services[name]["environment"] == shared_env, f"{name} must use the x-rag-env anchor"
    assert command(services["dagster-webserver"])[:1] == ["dagster-webserver"]
    assert command(services["dagster-daemon"])[:2] == ["dagster-daemon", "run"]
    assert command(services["api"])[:2] == ["rag-pipeline", "serve"]
    assert option(command(services["api"]), "--host") == "0.0.0.0"


def test_shared_environment_names_real_settings(compose, monkeypatch):
    """Every RAG_* variable of the anchor is a Settings field and its default value validates."""
    from rag_pipeline.settings import Settings

    env = {key: interpolate(str(value)) for key, value in compose["x-rag-env"].items()}
    for key in env:
        assert key.startswith(("RAG_", "DAGSTER_PG_", "DAGSTER_CELERY_")), key
    fields = set(Settings.model_fields)
    for key, value in env.items():
        if key.startswith("RAG_"):
            assert key.removeprefix("RAG_").lower() in fields, f"{key} is not a setting"
            monkeypatch.setenv(key, value)
    settings = Settings()
    assert settings.data_dir == Path("/data")
    assert settings.roots == [Path("/corpus")]
    assert settings.ollama_chat_model == Settings.model_fields["ollama_chat_model"].default
    assert settings.ollama_embed_model == Settings.model_fields["ollama_embed_model"].default


def test_referenced_paths_exist_and_named_volumes_are_declared(compose, services):
    declared_volumes = set(compose.get("volumes") or {})
    base = COMPOSE_FILE.parent
    for name, service in services.items():
        for kind, source, target in mounts(service):
            assert target.startswith("/"), (name, target)
            if kind == "bind":
                assert (base / source).resolve().exists(), f"{name}: bind source {source} does not exist"
            else:
                assert source in declared_volumes, f"{name}: volume {source} is not declared"
        env_files = service.get("env_file") or []
        for env_file in [env_files] if isinstance(env_files, str) else env_files:
            path = env_file if isinstance(env_file, str) else env_file["path"]
            assert (base / interpolate(path)).is_file(), f"{name}: env_file {path}"
        for config in service.get("configs") or []:
            config_name = config if isinstance(config, str) else config["source"]
            assert config_name in (compose.get("configs") or {}), f"{name}: config {config_name}"
    for config_name, config in (compose.get("configs") or {}).items():
        if "file" in config:
            assert (base / interpolate(config["file"])).exists(), f"config {config_name}"


def test_corpus_mount_defaults_to_the_sample_corpus(services):
    for name in ("code-location", "api"):
        corpus = [entry for entry in services[name]["volumes"] if str(entry).endswith(":/corpus:ro")]
        assert corpus == ["${RAG_CORPUS_DIR:-./golden/corpus}:/corpus:ro"], name
        source = (COMPOSE_FILE.parent / interpolate(corpus[0]).split(":")[0]).resolve()
        assert source == REPO / "golden" / "corpus"
        assert any(path.is_file() for path in source.rglob("*"))
        assert ("volume", "rag_data", "/data") in mounts(services[name])


def test_host_ports_are_bound_to_loopback_only(services):
    seen: dict[str, str] = {}
    for name, service in services.items():
        for host_ip, host_port, _ in published_ports(service):
            assert host_ip == "127.0.0.1", f"{name} publishes port {host_port} on {host_ip or 'all interfaces'}"
            assert host_port, f"{name}: give the host port explicitly"
            assert host_port not in seen, f"host port {host_port} used by {seen.get(host_port)} and {name}"
            seen[host_port] = name
    assert not published_ports(services["postgres"]), "PostgreSQL stays on the compose network"
    assert {"3000", "8000", "6333"} <= set(seen)


def test_urls_point_at_the_service_names_and_ports(compose, services):
    env = environment({"environment": compose["x-rag-env"]})
    qdrant = urlparse(env["RAG_QDRANT_URL"])
    assert qdrant.hostname == "qdrant" and qdrant.port == 6333  # the REST port qdrant-client talks to
    assert "6333" in container_ports(services["qdrant"])
    ollama = urlparse(env["RAG_OLLAMA_URL"])
    assert ollama.hostname == "ollama" and str(ollama.port) in container_ports(services["ollama"])
    assert env["DAGSTER_PG_HOST"] == "postgres" and env["DAGSTER_PG_PORT"] == "5432"
    pull_host = environment(services["ollama-pull"])["OLLAMA_HOST"]
    assert pull_host == f"{ollama.hostname}:{ollama.port}"


def test_dagster_credentials_match_the_postgres_service(services):
    postgres_raw = raw_environment(services["postgres"])
    postgres = environment(services["postgres"])
    pairs = {"DAGSTER_PG_USERNAME": "POSTGRES_USER", "DAGSTER_PG_PASSWORD": "POSTGRES_PASSWORD",
             "DAGSTER_PG_DB": "POSTGRES_DB"}
    for name in RAG_SERVICES:
        raw, resolved = raw_environment(services[name]), environment(services[name])
        for dagster_key, postgres_key in pairs.items():
            assert resolved[dagster_key] == postgres[postgres_key], (name, dagster_key)
            # the same variable on both sides, so overriding it in .env changes both
            assert raw[dagster_key] == postgres_raw[postgres_key], (name, dagster_key)


def test_ollama_pull_fetches_the_configured_models(compose, services):
    pull = services["ollama-pull"]
    assert pull["restart"] == "no"
    assert depends_on(pull) == {"ollama": "service_healthy"}
    script = " ".join(pull["entrypoint"] if isinstance(pull["entrypoint"], list) else [pull["entrypoint"]])
    for key in ("RAG_OLLAMA_CHAT_MODEL", "RAG_OLLAMA_EMBED_MODEL"):
        assert f"ollama pull {compose['x-rag-env'][key]}" in script
    assert "ollama pull llama3.2" in interpolate(script) and "ollama pull nomic-embed-text" in interpolate(script)


def test_healthchecks_and_dependencies(services):
    for name in ("qdrant", "postgres", "ollama", "api", "code-location"):
        test = services[name].get("healthcheck", {}).get("test")
        assert test and test[0] in ("CMD", "CMD-SHELL") and len(test) > 1, name
    qdrant_check = " ".join(services["qdrant"]["healthcheck"]["test"])
    assert "/dev/tcp/127.0.0.1/6333" in qdrant_check and "curl" not in qdrant_check and "wget" not in qdrant_check
    assert "pg_isready" in " ".join(services["postgres"]["healthcheck"]["test"])
    assert services["ollama"]["healthcheck"]["test"][1:] == ["ollama", "list"]
    api_port = option(command(services["api"]), "--port")
    api_check = " ".join(services["api"]["healthcheck"]["test"])
    assert "urllib" in api_check and f"127.0.0.1:{api_port}/healthz" in api_check
    assert api_port in container_ports(services["api"])
    for name, service in services.items():
        for target, condition in depends_on(service).items():
            assert target in services, f"{name} depends on unknown service {target}"
            assert condition in ("service_started", "service_healthy", "service_completed_successfully")
            if condition == "service_healthy":
                assert services[target].get("healthcheck"), f"{name} waits for {target}, which has no healthcheck"
            if not service.get("profiles"):
                assert not services[target].get("profiles"), f"{name} depends on {target}, which needs a profile"
    for name in ("dagster-webserver", "dagster-daemon"):
        assert depends_on(services[name]) == {"postgres": "service_healthy", "code-location": "service_healthy"}
    assert depends_on(services["code-location"])["postgres"] == "service_healthy"


# --- Dagster instance and workspace ----------------------------------------------------------------------------


def test_workspace_points_at_the_code_location_service(services):
    workspace = yaml.safe_load((DEPLOY / "dagster" / "workspace.yaml").read_text())
    (entry,) = workspace["load_from"]
    grpc = entry["grpc_server"]
    assert grpc["host"] == "code-location" and grpc["host"] in services
    code_server = command(services["code-location"])
    assert code_server[:3] == ["dagster", "code-server", "start"]
    assert str(grpc["port"]) == option(code_server, "-p", "--port")
    assert option(code_server, "-h", "--host") == "0.0.0.0"
    assert option(code_server, "-m", "--module-name") == "rag_pipeline.definitions"
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert grpc["location_name"] == pyproject["tool"]["dagster"]["code_location_name"]
    assert option(code_server, "--location-name") == grpc["location_name"]
    for name in ("dagster-webserver", "dagster-daemon"):
        assert option(command(services[name]), "-w", "--workspace") == f"{DAGSTER_HOME}/workspace.yaml"
    webserver = command(services["dagster-webserver"])
    assert option(webserver, "-h", "--host") == "0.0.0.0"
    assert option(webserver, "-p", "--port") in container_ports(services["dagster-webserver"])
    assert ("127.0.0.1", "3000", option(webserver, "-p", "--port")) in published_ports(services["dagster-webserver"])


def test_dagster_instance_uses_postgres_and_the_repo_concurrency(tmp_path, compose, monkeypatch):
    from dagster._config import validate_config
    from dagster._core.instance.config import dagster_instance_config
    from dagster._serdes.config_class import class_from_code_pointer

    path = DEPLOY / "dagster" / "dagster.yaml"
    config = yaml.safe_load(path.read_text())
    db = config["storage"]["postgres"]["postgres_db"]
    expected = {"username": "DAGSTER_PG_USERNAME", "password": "DAGSTER_PG_PASSWORD", "hostname": "DAGSTER_PG_HOST",
                "db_name": "DAGSTER_PG_DB", "port": "DAGSTER_PG_PORT"}
    assert db.pop("scheme") == "postgresql+psycopg2"  # SQLAlchemy 2.1 maps bare postgresql:// to psycopg 3
    assert db == {field: {"env": var} for field, var in expected.items()}
    assert set(expected.values()) <= set(compose["x-rag-env"])

    repo_config = yaml.safe_load((REPO / "dagster.yaml").read_text())
    assert config["concurrency"] == repo_config["concurrency"]
    assert config["concurrency"]["pools"] == {"granularity": "op", "default_limit": 1}
    assert config["concurrency"]["runs"]["max_concurrent_runs"] == 4
    assert config["run_coordinator"]["class"] == "QueuedRunCoordinator"
    assert config["run_launcher"]["class"] == "DefaultRunLauncher"
    assert config["telemetry"] == {"enabled": False}

    # Dagster's own schema accepts the file (storage selector, concurrency, configurable classes) ...
    shutil.copy(path, tmp_path / "dagster.yaml")
    for var in expected.values():
        monkeypatch.setenv(var, "5432" if var == "DAGSTER_PG_PORT" else "x")
    validated, _ = dagster_instance_config(str(tmp_path))
    assert "postgres" in validated["storage"]
    # ... and every configurable class it names imports and accepts its config.
    for key in ("run_coordinator", "run_launcher", "local_artifact_storage", "compute_logs"):
        entry = config[key]
        cls = class_from_code_pointer(entry["module"], entry["class"])
        result = validate_config(cls.config_type(), entry.get("config") or {})
        assert result.success, (key, result.errors)


def test_ingest_assets_hold_the_pool_the_instance_limits_to_one():
    import dagster as dg

    import rag_pipeline.defs.assets as assets

    pools = {definition.op.pool for definition in vars(assets).values() if isinstance(definition, dg.AssetsDefinition)}
    # "rag_store_writer" has no explicit limit, so `pools.default_limit: 1` of the instance applies to it.
    assert pools - {None} == {"rag_store_writer"}


# --- Dockerfile ------------------------------------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    lines = [line for line in DOCKERFILE.read_text().splitlines() if not line.lstrip().startswith("#")]
    text = re.sub(r"\\\n", " ", "\n".join(lines))
    result = []
    for line in text.splitlines():
        if line.strip():
            instruction, _, arguments = line.strip().partition(" ")
            result.append((instruction.upper(), " ".join(arguments.split())))
    return result


def test_dockerfile_installs_cpu_torch_before_the_project():
    instructions = dockerfile_instructions()
    assert instructions[0] == ("FROM", "python:3.11-slim")
    runs = [arguments for instruction, arguments in instructions if instruction == "RUN"]
    script = " && ".join(runs)
    torch_cpu = "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"
    assert torch_cpu in script
    project = re.search(r"pip install (?:[-\w]+ )*(?:-e )?\.(?: |$)", script)
    deps = script.find("pip install -r")
    assert project and deps != -1
    assert script.index(torch_cpu) < deps < project.start()
    assert "dagster-postgres==0.29.27" in script
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "dagster==1.13.27" in pyproject["project"]["dependencies"]  # dagster-postgres 0.29.x pairs with 1.13.x
    assert "torch==2.13.0" in pyproject["project"]["dependencies"]
    check = script[project.end():]
    assert "pip show --quiet torchvision" in check and "exit 1" in check
    assert "2.13.0+cpu" in check  # the CPU build is what ended up installed
    # dg.load_from_defs_folder needs pyproject.toml above the package: installed in place, not into site-packages
    assert "-e ." in project.group()


def test_dockerfile_environment_files_and_default_command(services):
    instructions = dockerfile_instructions()
    env = " ".join(arguments for instruction, arguments in instructions if instruction == "ENV")
    assert "HF_HUB_OFFLINE=1" in env and f"DAGSTER_HOME={DAGSTER_HOME}" in env
    copies = [arguments.split() for instruction, arguments in instructions if instruction == "COPY"]
    assert ["deploy/dagster/dagster.yaml", "deploy/dagster/workspace.yaml", f"{DAGSTER_HOME}/"] in copies
    for *sources, _ in copies:
        for source in sources:
            if not source.startswith("--"):
                assert (REPO / source).exists(), f"COPY source {source} does not exist"
    (cmd,) = [json.loads(arguments) for instruction, arguments in instructions if instruction == "CMD"]
    assert cmd == command(services["code-location"])


def test_dockerignore_keeps_local_state_out_but_not_the_project():
    patterns = {line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")}
    for required in (".venv", ".rag_data", ".bench", ".git"):
        assert required in patterns
    assert any("__pycache__" in pattern for pattern in patterns)
    for needed in ("pyproject.toml", "README.md", "rag_pipeline", "golden", "deploy", "Dockerfile"):
        assert not any(Path(needed).match(pattern.rstrip("/")) for pattern in patterns), needed


# --- monitoring ------------------------------------------------------------------------------------------------


def bind_target(service: dict[str, Any], repo_path: Path) -> str:
    """The container path a repo file or folder is mounted at."""
    for kind, source, target in mounts(service):
        if kind == "bind" and (COMPOSE_FILE.parent / source).resolve() == repo_path.resolve():
            return target
    raise AssertionError(f"{repo_path} is not mounted")


def test_prometheus_scrapes_the_api(services):
    config_path = DEPLOY / "prometheus" / "prometheus.yml"
    prometheus = services["prometheus"]
    target = bind_target(prometheus, config_path)
    assert option([a for arg in command(prometheus) for a in arg.split("=", 1)], "--config.file") == target
    config = yaml.safe_load(config_path.read_text())
    (job,) = config["scrape_configs"]
    assert job.get("metrics_path", "/metrics") == "/metrics"
    assert job.get("scrape_interval", config["global"]["scrape_interval"]) == "15s"
    targets = [t for static in job["static_configs"] for t in static["targets"]]
    api_port = option(command(services["api"]), "--port")
    assert targets == [f"api:{api_port}"]


def test_grafana_provisioning_is_mounted_and_consistent(services):
    grafana = services["grafana"]
    datasources_dir = DEPLOY / "grafana" / "provisioning" / "datasources"
    dashboards_dir = DEPLOY / "grafana" / "provisioning" / "dashboards"
    assert bind_target(grafana, datasources_dir) == "/etc/grafana/provisioning/datasources"
    assert bind_target(grafana, dashboards_dir) == "/etc/grafana/provisioning/dashboards"
    (datasource,) = yaml.safe_load((datasources_dir / "prometheus.yml").read_text())["datasources"]
    url = urlparse(datasource["url"])
    assert datasource["type"] == "prometheus" and url.hostname == "prometheus"
    assert str(url.port) in container_ports(services["prometheus"])
    (provider,) = yaml.safe_load((dashboards_dir / "dashboards.yml").read_text())["providers"]
    assert provider["type"] == "file"
    assert provider["options"]["path"] == bind_target(grafana, DEPLOY / "grafana" / "dashboards")
    dashboard = json.loads((DEPLOY / "grafana" / "dashboards" / "rag.json").read_text())
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == datasource["uid"], panel["title"]
        for target in panel["targets"]:
            assert target.get("datasource", panel["datasource"])["uid"] == datasource["uid"]


# --- dashboard PromQL against the API's metrics ----------------------------------------------------------------

PROMQL_FUNCTIONS = {"sum", "avg", "min", "max", "count", "topk", "bottomk", "rate", "irate", "increase",
                    "histogram_quantile", "clamp_min", "clamp_max", "vector", "abs", "round", "delta", "deriv"}
PROMQL_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless"}


def promql_names(expr: str) -> tuple[set[str], set[str], set[str]]:
    """(metric names, label names, function names) used by a PromQL expression."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    labels: set[str] = set()
    grouping = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
    for match in grouping.finditer(text):
        labels |= {name.strip() for name in match.group(1).split(",") if name.strip()}
    text = grouping.sub(" ", text)
    for match in re.finditer(r"\{([^}]*)\}", text):
        labels |= set(re.findall(r"([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)", match.group(1)))
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"(?<![\w.])\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", " ", text)
    metrics, functions = set(), set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        name = match.group()
        if name in PROMQL_KEYWORDS:
            continue
        (functions if text[match.end():].lstrip().startswith("(") else metrics).add(name)
    return metrics, labels, functions


def test_promql_parser_finds_names():
    assert promql_names('histogram_quantile(0.95, sum by (le, stage) (rate(x_bucket{a="b,c"}[5m]))) / 1e-9') == (
        {"x_bucket"}, {"le", "stage", "a"}, {"histogram_quantile", "sum", "rate"})


def exported_metrics() -> tuple[set[str], set[str]]:
    """(sample names, label names) the HTTP API exposes on /metrics, read from its registry."""
    from prometheus_client.metrics import MetricWrapperBase

    from rag_pipeline.serve.middleware.prometheus import Metrics

    metrics = Metrics()
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}
    names = {family.name + suffix for family in metrics.registry.collect() for suffix in suffixes[family.type]}
    labels = {"le"}
    for value in vars(metrics).values():
        if isinstance(value, MetricWrapperBase):
            labels |= set(value._labelnames)
    return names, labels


def test_dashboard_queries_only_exported_metrics():
    names, labels = exported_metrics()
    assert {"rag_http_requests_total", "rag_http_request_seconds_bucket", "rag_retrieval_stage_seconds_bucket",
            "rag_semantic_cache_lookups_total", "rag_retrieval_warnings_total", "rag_index_points"} <= names
    dashboard = json.loads((DEPLOY / "grafana" / "dashboards" / "rag.json").read_text())
    assert dashboard["uid"] and dashboard["title"]
    panels = dashboard["panels"]
    assert len({panel["id"] for panel in panels}) == len(panels) >= 5
    used: set[str] = set()
    exprs: list[str] = []
    for panel in panels:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            metric_names, label_names, functions = promql_names(target["expr"])
            assert metric_names, target["expr"]
            assert metric_names <= names, f"{panel['title']}: {metric_names - names} not exported by the API"
            assert label_names <= labels, f"{panel['title']}: unknown labels {label_names - labels}"
            assert functions <= PROMQL_FUNCTIONS, f"{panel['title']}: unknown functions {functions - PROMQL_FUNCTIONS}"
            used |= metric_names
            exprs.append(" ".join(target["expr"].split()))
    for quantile in ("0.5", "0.95"):
        assert (f"histogram_quantile({quantile}, sum by (le, stage) (rate(rag_retrieval_stage_seconds_bucket[5m])))"
                in exprs)
    assert {"rag_http_requests_total", "rag_http_request_seconds_bucket", "rag_index_points",
            "rag_semantic_cache_lookups_total"} <= used
    assert any("by (endpoint, status)" in expr and "rag_http_requests_total" in expr for expr in exprs)
    assert any(expr.startswith("histogram_quantile(0.95") and "rag_http_request_seconds_bucket" in expr
               for expr in exprs)


# --- API key ---------------------------------------------------------------------------------------------------


def test_api_gets_its_key_and_prometheus_scrapes_with_it(compose, services, tmp_path, monkeypatch):
    """The api serves on 0.0.0.0, so it needs a key: the token api-token writes into a volume that the api
    (RAG_API_KEY_FILE) and Prometheus (the scrape's bearer credentials file) mount; no default token exists."""
    token_file = environment({"environment": compose["x-rag-env"]})["RAG_API_KEY_FILE"]
    folder = str(Path(token_file).parent)
    writer = services["api-token"]
    assert depends_on(services["api"])["api-token"] == "service_completed_successfully"
    assert writer["restart"] == "no" and not writer.get("ports")
    assert interpolate(writer["environment"]["RAG_API_KEY"]) == ""  # only from .env, never a default
    for name, read_only in (("api-token", False), ("api", True), ("prometheus", True)):
        (entry,) = [entry for entry in services[name]["volumes"] if str(entry).startswith("api_token:")]
        assert entry == f"api_token:{folder}" + (":ro" if read_only else ""), name
    (job,) = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())["scrape_configs"]
    assert job["authorization"] == {"type": "Bearer", "credentials_file": token_file}

    # The writer's script, run on a file here: a fresh token, kept on the next start, replaced by RAG_API_KEY.
    script = command(writer)
    assert script[:2] == ["python", "-c"] and token_file in script[2]
    local = tmp_path / "api_token"
    code = script[2].replace(token_file, str(local)).replace("os.chown(path, 10001, 65534); ", "")
    exec(code, {})
    first = local.read_text()
    assert first.startswith("rag_") and len(first.strip()) >= 40 and oct(local.stat().st_mode & 0o777) == "0o440"
    from rag_pipeline.serve.keys import Keyring
    from rag_pipeline.settings import Settings

    keyring = Keyring(Settings(data_dir=tmp_path, api_key_file=local))  # the api accepts it as its admin key
    assert keyring.lookup(first.strip()).role == "admin"
    exec(code, {})
    assert local.read_text() == first
    monkeypatch.setenv("RAG_API_KEY", "k" * 40)
    exec(code, {})
    assert local.read_text() == "k" * 40 + "\n"


# --- Scale-out: the worker service -----------------------------------------------------------------------------


def test_worker_service_scales_with_the_broker_and_shared_stores(compose, services, monkeypatch):
    """`docker compose up --scale worker=N` multiplies a Celery worker of the image that takes ingest steps from the
    broker, with the data volume, the corpus, PostgreSQL (Dagster's storage and the sidecar's database) and Qdrant
    of the other services."""
    worker = services["worker"]
    assert "container_name" not in worker and not published_ports(worker), "a scaled service has no fixed name/port"
    assert command(worker)[:5] == ["dagster-celery", "worker", "start", "-A", "dagster_celery.app"]
    assert "--concurrency=1" in command(worker)  # one step at a time per worker (one core each)
    assert {("volume", "rag_data", "/data"), ("volume", "dagster_storage", "/opt/dagster/storage")} <= set(
        mounts(worker))
    assert depends_on(worker) == {"broker": "service_healthy", "postgres": "service_healthy",
                                  "qdrant": "service_healthy"}
    env = environment({"environment": compose["x-rag-env"]})
    assert env["DAGSTER_CELERY_BROKER_HOST"] == "broker" and services["broker"]["image"].startswith("rabbitmq:")
    assert "rabbitmq-diagnostics" in services["broker"]["healthcheck"]["test"]
    assert int(env["RAG_INGEST_WORKERS"]) > 1
    for key in ("RAG_DAGSTER_EXECUTOR", "RAG_INGEST_WORKERS", "RAG_QDRANT_URL"):
        monkeypatch.setenv(key, env[key])
    from rag_pipeline.settings import Settings

    settings = Settings()
    # celery: the ingest job's steps go to the workers; a Qdrant server: vector_index upserts need no pool
    assert settings.dagster_executor == "celery" and settings.qdrant_url
    # the image installs the executor with the version that pairs with dagster (as dagster-postgres)
    install = " ".join(arguments for instruction, arguments in dockerfile_instructions() if instruction == "RUN")
    assert "dagster-celery==0.29.27" in install and "dagster-postgres==0.29.27" in install
    # the postgres service creates the sidecar's database on its first start
    (initdb,) = [source for kind, source, target in mounts(services["postgres"])
                 if target == "/docker-entrypoint-initdb.d"]
    scripts = "".join(path.read_text() for path in sorted(Path(initdb).glob("*.sql")))
    assert "CREATE DATABASE rag_sidecar;" in scripts
