"""API keys: the `keys` commands and their file, roles and scopes through a real uvicorn server (search, answers
and the semantic cache never cross a key's scope), the loopback-only default and the access log."""

from __future__ import annotations

import json
import logging
import os
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from rag_pipeline.components import load_settings
from rag_pipeline.errors import ConfigError
from rag_pipeline.index.sparse import encode_query
from rag_pipeline.index.vector_store import IndexPoint, Scope, VectorStore
from rag_pipeline.serve.cli import main
from rag_pipeline.serve.keys import Keyring, check_bind, create_key, digest, is_loopback, read_keys, revoke_key
from rag_pipeline_tests.test_api import parse_sse, running_api

from .conftest import REPO

DOCUMENTS = {
    "policy/leave.md": "# Leave policy\n\nEmployees get 25 days of paid annual leave. Unused leave days carry over "
                       "until the end of March.\n",
    "policy/expenses.md": "# Expenses\n\nTravel expenses are reimbursed within 30 days when the receipts are "
                          "attached.\n",
    "legal/contract.md": "# Supplier contract\n\nThe supplier contract terminates with 90 days written notice. "
                         "Liability under the supplier contract is capped at the annual fee.\n",
    "legal/nda.md": "# Non-disclosure\n\nConfidential information must not be disclosed for five years after the "
                    "agreement ends.\n",
    "misc/notes.md": "# Notes\n\nThe supplier contract review meeting is on Tuesday.\n",
}
RULES = 'tags:\n  "policy/**": policy\n  "legal/**": legal\n'
CONTRACT_QUESTION = "How much notice terminates the supplier contract?"


def run_cli(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, dict]:
    code = main(list(argv) + ["--json"])
    return code, json.loads(capsys.readouterr().out)


# --- the keys commands and file ----------------------------------------------------------------------------------


def test_keys_commands_store_only_a_digest(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    data = ["--data-dir", str(tmp_path)]
    code, created = run_cli(capsys, "keys", "create", "alice", "--role", "ingester", "--tag", "policy", "hr",
                            "--source", "wiki", *data)
    assert code == 0
    assert set(created) == {"name", "token", "role", "tags", "sources"}
    assert created | {"token": ""} == {"name": "alice", "token": "", "role": "ingester", "tags": ["policy", "hr"],
                                       "sources": ["wiki"]}
    token = created["token"]
    assert token.startswith("rag_") and len(token) >= 40
    path = tmp_path / "api_keys.yaml"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert token not in path.read_text() and digest(token) in path.read_text()

    _, other = run_cli(capsys, "keys", "create", "bob", *data)  # default role: reader, no scope
    assert (other["role"], other["tags"], other["sources"]) == ("reader", [], [])
    assert other["token"] != token
    assert run_cli(capsys, "keys", "create", "alice", *data) == (2, {"error": {
        "code": "duplicate_key", "message": "a key named 'alice' already exists; revoke it first or pick another name"}})
    for bad in (["bad name"], ["env"], ["x", "--tag", " "], ["x" * 65]):
        code, body = run_cli(capsys, "keys", "create", *bad, *data)
        assert (code, body["error"]["code"]) == (2, "invalid_key"), bad

    _, listed = run_cli(capsys, "keys", "list", *data)
    assert [(key["name"], key["role"], key["tags"]) for key in listed["keys"]] == [
        ("alice", "ingester", ["policy", "hr"]), ("bob", "reader", [])]
    assert token not in json.dumps(listed) and "sha256" not in json.dumps(listed)
    assert run_cli(capsys, "keys", "revoke", "alice", *data) == (0, {"revoked": "alice"})
    assert run_cli(capsys, "keys", "revoke", "alice", *data)[1]["error"]["code"] == "unknown_key"
    assert [key.name for key in read_keys(path)] == ["bob"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600

    assert main(["keys", "create", "carol", *data]) == 0  # readable output: the token alone on stdout
    out, err = capsys.readouterr()
    assert out.strip().startswith("rag_") and "shown only now" in err


def test_keys_file_from_the_environment_and_unsafe_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "elsewhere" / "keys.yaml"
    monkeypatch.setenv("RAG_API_KEYS_FILE", str(path))
    assert main(["keys", "create", "ops", "--data-dir", str(tmp_path / "data")]) == 0
    assert [key.name for key in read_keys(path)] == ["ops"] and not (tmp_path / "data" / "api_keys.yaml").exists()
    path.chmod(0o666)
    with pytest.raises(ConfigError, match="others may write"):
        read_keys(path)
    path.chmod(0o600)
    path.write_text("keys:\n- name: x\n  role: root\n  sha256: abc\n")
    with pytest.raises(ConfigError, match="not a valid API keys file"):
        Keyring(load_settings(data_dir=tmp_path))
    path.write_text("keys: [")
    with pytest.raises(ConfigError, match="not a valid API keys file"):
        read_keys(path)


def test_keyring_lookup_reload_and_environment_key(tmp_path: Path) -> None:
    path = tmp_path / "api_keys.yaml"
    _, token = create_key(path, "alice", "reader", ("policy",))
    keyring = Keyring(load_settings(data_dir=tmp_path))
    assert keyring.lookup(token).name == "alice" and keyring.lookup(token).scope == Scope(("policy",))
    assert keyring.lookup(token + "x") is None and keyring.lookup("") is None
    _, later = create_key(path, "bob", "admin")
    assert keyring.lookup(later).role == "admin"  # a running server sees new keys ...
    revoke_key(path, "alice")
    assert keyring.lookup(token) is None  # ... and revocations

    env_token = "e" * 40
    with_env = Keyring(load_settings(data_dir=tmp_path, api_key=env_token))
    key = with_env.lookup(env_token)
    assert (key.name, key.role, key.scope) == ("env", "admin", None)
    token_file = tmp_path / "token"
    token_file.write_text(env_token + "\n")
    assert Keyring(load_settings(data_dir=tmp_path, api_key_file=token_file)).lookup(env_token).name == "env"
    for bad in ({"api_key": "short"}, {"api_key": "a b" * 20}, {"api_key_file": tmp_path / "missing"},
                {"api_key": env_token, "api_key_file": token_file}):
        with pytest.raises(ConfigError):
            Keyring(load_settings(data_dir=tmp_path, **bad))


def test_loopback_rules(tmp_path: Path) -> None:
    for host in ("127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost", "::ffff:127.0.0.1"):
        assert is_loopback(host), host
    for host in ("0.0.0.0", "::", "192.0.2.2", "example.com", "", "localhost.evil.com"):
        assert not is_loopback(host), host
    empty = Keyring(load_settings(data_dir=tmp_path))
    check_bind("127.0.0.1", empty, keyless_loopback=True)
    with pytest.raises(ConfigError, match="--keyless-loopback"):
        check_bind("127.0.0.1", empty, keyless_loopback=False)  # keyless loopback mode is a choice made at start
    for keyless in (True, False):
        with pytest.raises(ConfigError, match="rag-pipeline keys create"):
            check_bind("0.0.0.0", empty, keyless)
    create_key(tmp_path / "api_keys.yaml", "ops", "admin")
    check_bind("0.0.0.0", empty, False)  # the same keyring, once a key exists
    check_bind("0.0.0.0", Keyring(load_settings(data_dir=tmp_path / "other", api_key="k" * 32)), False)


def test_serve_refuses_a_public_host_without_a_key(tmp_path: Path) -> None:
    process = subprocess.run([sys.executable, "-m", "rag_pipeline", "serve", "--host", "0.0.0.0", "--data-dir",
                              str(tmp_path)], cwd=REPO, env={**os.environ, "HF_HUB_OFFLINE": "1"},
                             capture_output=True, text=True, timeout=120, check=False)
    assert process.returncode == 2
    assert process.stderr.strip().splitlines() == [(
        "rag-pipeline: refusing to serve on 0.0.0.0 without an API key: create one with `rag-pipeline keys create "
        "NAME --role admin` (or set RAG_API_KEY), or serve on 127.0.0.1 with --keyless-loopback")]
    assert process.stdout == ""


def test_scope_conditions_narrow_every_search_leg(store: VectorStore, points: list[IndexPoint]) -> None:
    """A scope is ANDed with the request's filters in both backends; a source scope matches nothing until the
    payload has `sources`."""
    from rag_pipeline.index.vector_store import parse_filters

    store.upsert(points)
    store.relabel("sha0", ["/docs/sha0.md"], ["handbook", "policy"], [], [])
    store.relabel("sha2", ["/docs/sha2.md"], ["legal"], [], [])
    dense, sparse = points[0].dense, encode_query("pump")
    policy = Scope(("policy",)).conditions()

    def shas(hits: list) -> set[str]:
        return {hit.payload["sha"] for hit in hits}

    assert shas(store.search_dense(dense, 20, policy)) == {"sha0"}
    assert shas(store.search_sparse(sparse, 20, policy)) == {"sha0"}
    assert shas(store.search_hybrid(dense, sparse, 20, policy)) == {"sha0"}
    assert store.search_hybrid(dense, sparse, 20, parse_filters({"tags": "legal"}) + policy) == []
    assert shas(store.search_dense(dense, 20, parse_filters({"tags": ["legal", "handbook"]}) + policy)) == {"sha0"}
    assert store.search_hybrid(dense, sparse, 20, Scope(sources=("wiki",)).conditions()) == []
    assert store.search_dense(dense, 20, Scope(("policy",), ("wiki",)).conditions()) == []


# --- through the HTTP API ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tagged_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data dir holding the DOCUMENTS ingested with tag rules: policy/ -> policy, legal/ -> legal, misc/ none."""
    from rag_pipeline.defs.ingest_runner import ingest

    base = tmp_path_factory.mktemp("tagged")
    for relative, text in DOCUMENTS.items():
        (base / "corpus" / relative).parent.mkdir(parents=True, exist_ok=True)
        (base / "corpus" / relative).write_text(text)
    (base / "rules.yaml").write_text(RULES)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RAG_CORPUS_RULES", str(base / "rules.yaml"))
        summary = ingest([base / "corpus"], base / "data")
    assert summary["added"] == len(DOCUMENTS) and summary["failed"] == []
    return base / "data"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def search(url: str, token: str, query: str, **body) -> dict:
    response = httpx.post(f"{url}/search", json={"query": query, "top_k": 5, **body}, headers=bearer(token),
                          timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def ask(url: str, token: str, question: str) -> dict:
    response = httpx.post(f"{url}/ask", json={"question": question, "top_k": 5}, headers=bearer(token), timeout=60)
    assert response.status_code == 200, response.text
    (done,) = [data for event, data in parse_sse(response.text) if event == "done"]
    return done


def folders(results: list[dict]) -> set[str]:
    return {Path(result["path"]).parent.name for result in results}


@pytest.fixture(scope="module")
def keyed_api(tagged_index: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """(url, tokens by key name) of a server with the semantic cache on and five keys."""
    path = tagged_index / "api_keys.yaml"
    tokens = {name: create_key(path, name, role, tags, sources)[1] for name, role, tags, sources in [
        ("policy-reader", "reader", ("policy",), ()), ("legal-reader", "reader", ("legal",), ()),
        ("wiki-reader", "reader", (), ("wiki",)), ("loader", "ingester", ("policy",), ()), ("root", "admin", (), ())]}
    with running_api(load_settings(data_dir=tagged_index, semantic_cache=True)) as url:
        yield url, tokens


def test_requests_need_a_valid_key_of_the_right_role(keyed_api: tuple[str, dict[str, str]]) -> None:
    url, tokens = keyed_api
    assert httpx.get(f"{url}/healthz").status_code == 200  # the one open endpoint
    for method, route, body in [("POST", "/search", {"query": "leave"}), ("POST", "/ask", {"question": "leave"}),
                                ("POST", "/ingest", {"roots": ["/tmp"]}), ("GET", "/ingest/x", None),
                                ("GET", "/metrics", None), ("GET", "/openapi.json", None)]:
        for headers in ({}, bearer("rag_not-a-key"), {"Authorization": f"Basic {tokens['root']}"},
                        {"Authorization": tokens["root"]}):
            response = httpx.request(method, f"{url}{route}", json=body, headers=headers)
            assert response.status_code == 401, (route, headers, response.text)
            assert response.headers["www-authenticate"] == "Bearer"
            assert response.json()["error"]["code"] in ("not_authenticated", "invalid_api_key")
    reader = bearer(tokens["policy-reader"])
    forbidden = httpx.post(f"{url}/ingest", json={"roots": ["/tmp"]}, headers=reader)
    assert forbidden.status_code == 403 and forbidden.json()["error"] == {
        "code": "forbidden", "message": "the key 'policy-reader' has the role reader; this endpoint needs ingester"}
    assert httpx.get(f"{url}/ingest/x", headers=reader).status_code == 403
    assert httpx.get(f"{url}/metrics", headers=reader).status_code == 200
    assert httpx.get(f"{url}/openapi.json", headers=reader).json()["components"]["securitySchemes"] == {
        "HTTPBearer": {"type": "http", "scheme": "bearer",
                       "description": "an API key's token (`rag-pipeline keys create`)"}}
    for name in ("loader", "root"):
        assert httpx.get(f"{url}/ingest/x", headers=bearer(tokens[name])).status_code == 404  # allowed: no such job


def test_a_scope_limits_search_and_answers(keyed_api: tuple[str, dict[str, str]]) -> None:
    url, tokens = keyed_api
    everything = search(url, tokens["root"], CONTRACT_QUESTION)["results"]
    assert everything[0]["path"].endswith("legal/contract.md")  # the question is about a legal document
    assert folders(everything) >= {"legal", "misc"}

    policy = search(url, tokens["policy-reader"], CONTRACT_QUESTION)["results"]
    assert policy and folders(policy) == {"policy"} and all("policy" in hit["tags"] for hit in policy)
    legal = search(url, tokens["legal-reader"], CONTRACT_QUESTION)["results"]
    assert legal[0]["path"].endswith("legal/contract.md") and folders(legal) == {"legal"}
    # the request's own filters narrow the scope, never widen it
    assert search(url, tokens["policy-reader"], CONTRACT_QUESTION, filters={"tags": "legal"})["results"] == []
    assert search(url, tokens["policy-reader"], CONTRACT_QUESTION, filters={"doc_type": "md"})["results"] == policy
    assert search(url, tokens["wiki-reader"], CONTRACT_QUESTION)["results"] == []  # no chunk has `sources` yet

    for name, folder in (("policy-reader", "policy"), ("legal-reader", "legal")):
        answer = ask(url, tokens[name], CONTRACT_QUESTION)
        assert answer["sources"] and {Path(source["path"]).parent.name for source in answer["sources"]} == {folder}
        numbered = {source["number"]: source["path"] for source in answer["sources"]}
        cited = {Path(numbered[number]).parent.name for number in answer["citations"]}
        assert cited <= {folder}
    legal_answer = ask(url, tokens["legal-reader"], CONTRACT_QUESTION)
    assert "90 days" in legal_answer["answer"] and legal_answer["citations"]
    assert "90 days" not in ask(url, tokens["policy-reader"], CONTRACT_QUESTION)["answer"]


def test_the_semantic_cache_does_not_cross_scopes(keyed_api: tuple[str, dict[str, str]]) -> None:
    url, tokens = keyed_api
    question = "Which notice period ends the supplier agreement?"
    legal = search(url, tokens["legal-reader"], question)
    assert not legal["cache_hit"] and folders(legal["results"]) == {"legal"}
    assert search(url, tokens["legal-reader"], question)["cache_hit"]  # cached for this scope ...
    policy = search(url, tokens["policy-reader"], question)
    assert not policy["cache_hit"] and folders(policy["results"]) == {"policy"}  # ... and not served to another
    again = search(url, tokens["policy-reader"], question)
    assert again["cache_hit"] and again["results"] == policy["results"]
    assert folders(search(url, tokens["legal-reader"], question)["results"]) == {"legal"}
    unscoped = search(url, tokens["root"], question)
    assert not unscoped["cache_hit"] and "misc" in folders(unscoped["results"])
    answer = ask(url, tokens["policy-reader"], question)  # the answer's retrieval is a cache hit of this scope
    assert {Path(source["path"]).parent.name for source in answer["sources"]} == {"policy"}


def test_keys_take_effect_on_a_running_server(keyed_api: tuple[str, dict[str, str]], tagged_index: Path,
                                              capsys: pytest.CaptureFixture) -> None:
    url, _ = keyed_api
    code, created = run_cli(capsys, "keys", "create", "temp", "--tag", "legal", "--data-dir", str(tagged_index))
    assert code == 0
    assert folders(search(url, created["token"], CONTRACT_QUESTION)["results"]) == {"legal"}
    assert run_cli(capsys, "keys", "revoke", "temp", "--data-dir", str(tagged_index))[0] == 0
    response = httpx.post(f"{url}/search", json={"query": "leave"}, headers=bearer(created["token"]))
    assert response.status_code == 401 and response.json()["error"]["code"] == "invalid_api_key"


def test_access_log_names_the_key_and_leaves_out_the_query(keyed_api: tuple[str, dict[str, str]],
                                                           caplog: pytest.LogCaptureFixture) -> None:
    url, tokens = keyed_api
    caplog.set_level(logging.INFO, logger="rag_pipeline.access")
    search(url, tokens["legal-reader"], "confidential information secret-words")
    httpx.post(f"{url}/search", json={"query": "confidential information secret-words"})
    httpx.get(f"{url}/nowhere")
    lines = [json.loads(record.getMessage()) for record in caplog.records if record.name == "rag_pipeline.access"]
    assert [(line["key"], line["method"], line["endpoint"], line["status"]) for line in lines] == [
        ("legal-reader", "POST", "/search", 200), ("-", "POST", "/search", 401), ("-", "GET", "/nowhere", 404)]
    for line in lines:
        assert set(line) == {"time", "key", "method", "endpoint", "status", "latency_ms"}
        assert line["latency_ms"] > 0 and line["time"].endswith("+00:00")
    assert "secret-words" not in caplog.text


def non_loopback_address() -> str:
    """An IPv4 address of this machine that is not loopback (the route a packet to a documentation address would
    take; nothing is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))
        except OSError:
            pytest.skip("this machine has no non-loopback IPv4 address")
        address = probe.getsockname()[0]
    if is_loopback(address):
        pytest.skip("this machine has no non-loopback IPv4 address")
    return address


def test_without_keys_only_loopback_is_served(tagged_index: Path, tmp_path: Path,
                                              caplog: pytest.LogCaptureFixture) -> None:
    """A server with no key (however it was bound) answers loopback requests and refuses the others; with
    RAG_API_LOG_QUERIES the access log records the query."""
    caplog.set_level(logging.INFO, logger="rag_pipeline.access")
    address = non_loopback_address()
    # the machine's address is an allowed Host, so the request passes the Host screening and reaches the key check
    settings = load_settings(data_dir=tagged_index, api_keys_file=tmp_path / "no_keys.yaml", api_log_queries=True,
                        api_allowed_hosts=[address])
    with running_api(settings, host="0.0.0.0") as url:
        local = search(url, "", CONTRACT_QUESTION)  # no key needed on loopback; no scope
        assert "legal" in folders(local["results"])
        remote = url.replace("127.0.0.1", address)
        refused = httpx.post(f"{remote}/search", json={"query": CONTRACT_QUESTION})
        assert refused.status_code == 403 and "rag-pipeline keys create" in refused.json()["error"]["message"]
        assert httpx.get(f"{remote}/healthz").status_code == 200
    lines = [json.loads(record.getMessage()) for record in caplog.records if record.name == "rag_pipeline.access"]
    assert [(line["key"], line["status"], line.get("query")) for line in lines if line["endpoint"] == "/search"] == [
        ("-", 200, CONTRACT_QUESTION), ("-", 403, CONTRACT_QUESTION)]


# --- failing closed: keyless loopback mode is chosen at start; a server that lost its keys is locked ---------------


def test_serve_without_a_key_refuses_to_start_unless_keyless_loopback_is_chosen(tmp_path: Path) -> None:
    process = subprocess.run([sys.executable, "-m", "rag_pipeline", "serve", "--data-dir", str(tmp_path)], cwd=REPO,
                             env={**os.environ, "HF_HUB_OFFLINE": "1"}, capture_output=True, text=True, timeout=120,
                             check=False)
    assert process.returncode == 2 and process.stdout == ""
    [line] = process.stderr.strip().splitlines()
    assert line.startswith("rag-pipeline: refusing to serve without an API key: create one with `rag-pipeline keys "
                           "create NAME --role admin`")
    assert "serve --keyless-loopback" in line and "RAG_API_KEYLESS_LOOPBACK=true" in line


def status_and_code(url: str, token: str = "", headers: dict[str, str] | None = None) -> tuple[int, str | None]:
    response = httpx.post(f"{url}/search", json={"query": "leave"}, headers={**bearer(token), **(headers or {})},
                          timeout=60)
    return response.status_code, response.json().get("error", {}).get("code")


def test_a_server_that_lost_its_keys_is_locked_not_open(tagged_index: Path, tmp_path: Path) -> None:
    """Keys moved away, emptied, unreadable or the last one revoked: every request gets 503 until a key exists
    again, even in keyless loopback mode and on loopback; the error names no file."""
    path = tmp_path / "keys" / "api_keys.yaml"
    path.parent.mkdir()
    _, token = create_key(path, "ops", "admin")
    settings = load_settings(data_dir=tagged_index, api_keys_file=path)
    with running_api(settings, keyless_loopback=True) as url:
        assert status_and_code(url, token) == (200, None)
        assert status_and_code(url) == (401, "not_authenticated")
        path.rename(path.with_name("moved.yaml"))
        assert status_and_code(url) == status_and_code(url, token) == (503, "api_keys_missing")
        assert httpx.get(f"{url}/metrics").status_code == 503 and httpx.get(f"{url}/healthz").status_code == 200
        path.with_name("moved.yaml").rename(path)
        assert status_and_code(url, token) == (200, None) and status_and_code(url)[0] == 401

        path.write_text("keys: [")  # unreadable: refused, the details only in the server's log
        response = httpx.post(f"{url}/search", json={"query": "leave"}, headers=bearer(token))
        assert response.status_code == 503 and response.json()["error"]["code"] == "api_keys_unreadable"
        assert str(tmp_path) not in response.text
        path.unlink()
        _, token = create_key(path, "ops", "admin")
        assert status_and_code(url, token) == (200, None)

        revoke_key(path, "ops")  # the last key
        assert status_and_code(url) == status_and_code(url, token) == (503, "api_keys_missing")


def test_without_keys_nothing_is_served_unless_keyless_loopback_was_chosen(tagged_index: Path,
                                                                           tmp_path: Path) -> None:
    settings = load_settings(data_dir=tagged_index, api_keys_file=tmp_path / "no_keys.yaml")
    with running_api(settings, keyless_loopback=False) as url:
        assert status_and_code(url) == (503, "no_api_keys")
        assert httpx.get(f"{url}/healthz").status_code == 200
    with running_api(settings, keyless_loopback=True) as url:
        assert status_and_code(url) == (200, None)
        for header in ({"X-Forwarded-For": "203.0.113.9"}, {"Forwarded": "for=203.0.113.9"},
                       {"X-Real-IP": "203.0.113.9"}):  # through a reverse proxy every request is loopback
            assert status_and_code(url, headers=header) == (403, "forbidden")


# --- the admin routes: API keys over HTTP --------------------------------------------------------------------------


def test_admin_routes_list_create_and_revoke_keys(tagged_index: Path, tmp_path: Path) -> None:
    path = tmp_path / "api_keys.yaml"
    _, root = create_key(path, "root", "admin")
    _, scoped_admin = create_key(path, "scoped-admin", "admin", ("policy",))
    _, loader = create_key(path, "loader", "ingester")
    with running_api(load_settings(data_dir=tagged_index, api_keys_file=path)) as url:
        for token, status in (("", 401), (loader, 403), (scoped_admin, 403)):
            for method, route, body in (("GET", "/keys", None), ("POST", "/keys", {"name": "x"}),
                                        ("DELETE", "/keys/loader", None)):
                response = httpx.request(method, f"{url}{route}", json=body, headers=bearer(token))
                assert response.status_code == status, (token, route, response.text)
        listed = httpx.get(f"{url}/keys", headers=bearer(root)).json()["keys"]
        assert [key["name"] for key in listed] == ["root", "scoped-admin", "loader"]
        assert "sha256" not in json.dumps(listed) and root not in json.dumps(listed)

        created = httpx.post(f"{url}/keys", json={"name": "alice", "role": "reader", "tags": ["legal"]},
                             headers=bearer(root))
        assert created.status_code == 201 and created.headers["cache-control"] == "no-store"
        alice = created.json()
        assert alice | {"token": "", "created_at": ""} == {"name": "alice", "role": "reader", "tags": ["legal"],
                                                          "sources": [], "created_at": "", "token": ""}
        assert alice["token"].startswith("rag_") and alice["token"] not in path.read_text()
        assert folders(search(url, alice["token"], CONTRACT_QUESTION)["results"]) == {"legal"}
        assert alice["token"] not in httpx.get(f"{url}/keys", headers=bearer(root)).text  # shown once
        for body, code in (({"name": "alice"}, "duplicate_key"), ({"name": "bad name"}, "invalid_key"),
                           ({"name": "env"}, "invalid_key"), ({"name": "x", "role": "root"}, "invalid_key"),
                           ({"name": "x", "tags": [" "]}, "invalid_key"), ({"name": "x", "token": "t"},
                                                                          "unknown_field")):
            refused = httpx.post(f"{url}/keys", json=body, headers=bearer(root))
            assert refused.status_code == 400 and refused.json()["error"]["code"] == code, (body, refused.text)

        revoked = httpx.delete(f"{url}/keys/alice", headers=bearer(root))
        assert revoked.status_code == 200 and revoked.json() == {"revoked": "alice"}
        assert status_and_code(url, alice["token"]) == (401, "invalid_api_key")
        missing = httpx.delete(f"{url}/keys/alice", headers=bearer(root))
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "unknown_key"
        assert str(tmp_path) not in missing.text
