"""A throwaway PostgreSQL server from Debian's binaries, for the Postgres instance-storage test and benchmark.

`running_postgres()` runs `initdb` in a fresh temporary directory, starts `postgres` on 127.0.0.1 on a free port
(unix sockets in the same directory), waits until it accepts connections, creates a database and yields a
`PostgresServer` with the connection parameters. On exit it stops the server by its PID (`pg_ctl stop -m fast`,
then SIGKILL to that PID if it is still alive) and removes the directory.

PostgreSQL refuses to run as root: as root the server runs as the `postgres` system user (created by Debian's
`postgresql` package; created here with `useradd --system` if missing).

The binaries come from `$RAG_PG_BINDIR`, else the newest `/usr/lib/postgresql/<version>/bin`, else `PATH`.
Missing binaries are an error (never a skip): `apt-get install postgresql`.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

INSTALL_HINT = (
    "PostgreSQL server binaries (initdb, postgres, pg_ctl, pg_isready, createdb) not found: install them with "
    "`apt-get install -y postgresql` (Debian puts them in /usr/lib/postgresql/<version>/bin) "
    "or point $RAG_PG_BINDIR at their directory"
)
REQUIRED = ("initdb", "postgres", "pg_ctl", "pg_isready", "createdb")
RUN_AS = "postgres"
# Fast, throwaway settings for tests (durability does not matter for a server deleted afterwards).
FAST_SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}


class PostgresNotInstalled(RuntimeError):
    pass


@dataclass(frozen=True)
class PostgresServer:
    host: str
    port: int
    user: str
    password: str
    dbname: str
    socket_dir: Path
    pid: int
    settings: Mapping[str, str] = field(default_factory=dict)

    def dagster_env(self) -> dict[str, str]:
        """The environment `deploy/dagster-postgres.yaml` reads."""
        return {
            "DAGSTER_PG_USERNAME": self.user,
            "DAGSTER_PG_PASSWORD": self.password,
            "DAGSTER_PG_HOST": self.host,
            "DAGSTER_PG_PORT": str(self.port),
            "DAGSTER_PG_DB": self.dbname,
        }

    def connect_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for psycopg2.connect (over TCP, with the password)."""
        return {"host": self.host, "port": self.port, "user": self.user, "password": self.password,
                "dbname": self.dbname}

    def url(self) -> str:
        return f"postgresql://{self.user}:{self.password}@{self.host}:{self.port}/{self.dbname}"


def find_bindir() -> Path:
    """The directory holding initdb/postgres/pg_ctl/pg_isready; raises PostgresNotInstalled with the fix."""
    candidates: list[Path] = []
    if os.environ.get("RAG_PG_BINDIR"):
        candidates.append(Path(os.environ["RAG_PG_BINDIR"]))
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"),
                      key=lambda path: [int(p) if p.isdigit() else 0 for p in path.parent.name.split(".")],
                      reverse=True)
    candidates += versions
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(Path(on_path).resolve().parent)
    for directory in candidates:
        if all(os.access(directory / name, os.X_OK) for name in REQUIRED):
            return directory
    raise PostgresNotInstalled(INSTALL_HINT)


def server_user() -> pwd.struct_passwd | None:
    """None when not root (the server runs as us); as root the `postgres` system user (created if missing)."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(RUN_AS)
    except KeyError:
        subprocess.run(["useradd", "--system", "--user-group", "--no-create-home", "--shell", "/usr/sbin/nologin",
                        RUN_AS], check=True, capture_output=True)
        return pwd.getpwnam(RUN_AS)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def make_base_dir(user: pwd.struct_passwd | None) -> Path:
    """A fresh directory the server user owns, short enough for unix socket paths (< 108 bytes)."""
    base = Path(tempfile.gettempdir())
    others_can_enter = all(parent.stat().st_mode & 0o001 for parent in [base, *base.parents])
    if (user is not None and not others_can_enter) or len(str(base)) > 60:
        base = Path("/tmp")
    directory = Path(tempfile.mkdtemp(prefix="rag_pg_", dir=base))
    if user is not None:
        os.chown(directory, user.pw_uid, user.pw_gid)
    directory.chmod(0o700)
    return directory


@contextmanager
def running_postgres(dbname: str = "dagster", *, settings: Mapping[str, str] | None = None,
                     start_timeout: float = 60.0) -> Iterator[PostgresServer]:
    """Start a temporary PostgreSQL server; yields its connection parameters; stops it by PID and cleans up.

    `settings` are extra server settings (`-c name=value`), e.g. FAST_SETTINGS for tests.
    """
    bindir = find_bindir()
    user = server_user()
    as_user: dict[str, Any] = ({"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}
                               if user is not None else {})
    env = {key: value for key, value in os.environ.items() if not key.startswith("PG")}
    env.update(LC_ALL="C.UTF-8", LANG="C.UTF-8", HOME=user.pw_dir if user is not None else env.get("HOME", "/"))
    superuser, password = "rag", secrets.token_hex(12)
    settings = dict(settings or {})

    base = make_base_dir(user)
    data, sockets, log_path = base / "data", base / "sockets", base / "postgres.log"
    process: subprocess.Popen[bytes] | None = None
    try:
        sockets.mkdir()
        pwfile = base / "pwfile"
        pwfile.write_text(password + "\n")
        if user is not None:
            for path in (sockets, pwfile):
                os.chown(path, user.pw_uid, user.pw_gid)
        subprocess.run(
            [str(bindir / "initdb"), "-D", str(data), "-U", superuser, f"--pwfile={pwfile}", "--auth-local=trust",
             "--auth-host=scram-sha-256", "--encoding=UTF8", "--no-instructions"],
            check=True, capture_output=True, cwd=base, env=env, **as_user,
        )
        pwfile.unlink()

        for _attempt in range(3):  # a free port can be taken between the probe and the bind: retry
            port = free_port()
            log = log_path.open("ab")
            command = [str(bindir / "postgres"), "-D", str(data), "-h", "127.0.0.1", "-p", str(port),
                       "-k", str(sockets)]
            for name, value in settings.items():
                command += ["-c", f"{name}={value}"]
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=base, env=env,
                                       start_new_session=True, **as_user)
            log.close()
            if wait_ready(bindir, process, sockets, port, superuser, env, start_timeout):
                break
            stop(bindir, process, data, env, as_user)
            process = None
        else:
            raise RuntimeError(f"PostgreSQL did not start; log:\n{tail(log_path)}")

        created = subprocess.run(
            [str(bindir / "createdb"), "-h", str(sockets), "-p", str(port), "-U", superuser, dbname],
            capture_output=True, text=True, cwd=base, env=env, **as_user,
        )
        if created.returncode != 0:
            raise RuntimeError(f"createdb {dbname} failed: {created.stderr.strip()}")
        yield PostgresServer(host="127.0.0.1", port=port, user=superuser, password=password, dbname=dbname,
                             socket_dir=sockets, pid=process.pid, settings=settings)
    finally:
        if process is not None:
            stop(bindir, process, data, env, as_user)
        shutil.rmtree(base, ignore_errors=True)


def wait_ready(bindir: Path, process: subprocess.Popen[bytes], sockets: Path, port: int, superuser: str,
               env: dict[str, str], timeout: float) -> bool:
    """True once the server accepts connections on both the unix socket and TCP; False if it exited."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        ready = all(
            subprocess.run([str(bindir / "pg_isready"), "-q", "-h", host, "-p", str(port), "-U", superuser],
                           env=env, capture_output=True).returncode == 0
            for host in (str(sockets), "127.0.0.1")
        )
        if ready:
            return True
        time.sleep(0.1)
    return False


def stop(bindir: Path, process: subprocess.Popen[bytes], data: Path, env: dict[str, str],
         as_user: dict[str, Any]) -> None:
    """Stop the postmaster we started, by its PID: `pg_ctl stop -m fast`, then SIGKILL if still alive."""
    if process.poll() is None and (data / "postmaster.pid").exists():
        subprocess.run([str(bindir / "pg_ctl"), "stop", "-D", str(data), "-m", "fast", "-w", "-t", "30"],
                       capture_output=True, env=env, **as_user)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@pytest.fixture(scope="module")
def postgres_server() -> Iterator[PostgresServer]:
    """A PostgreSQL server for the module's tests. Fails (does not skip) when PostgreSQL is not installed."""
    missing = None
    try:
        find_bindir()
    except PostgresNotInstalled as error:
        missing = str(error)
    if missing:
        pytest.fail(missing, pytrace=False)
    with running_postgres(settings=FAST_SETTINGS) as server:
        yield server
