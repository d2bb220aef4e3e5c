"""A throwaway PostgreSQL server for the tests: a fresh cluster in a temp dir, on a free port.

`PostgresServer.start()` runs `initdb` and `pg_ctl start` from the server binaries (Debian's
`/usr/lib/postgresql/<version>/bin`, or `initdb` on PATH); as root it runs them as the `postgres` user
(initdb refuses root) in a temp dir that user owns. The server listens only on a unix socket in that
dir, with trust authentication and fsync off. `new_database()` creates an empty database and returns
its SQLAlchemy URL; `stop()` stops the server and removes the dir.
"""

from __future__ import annotations

import glob
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import psycopg


def server_bin_dir() -> Path | None:
    """The folder of `initdb`/`pg_ctl` (newest Debian version first), or None if there is none."""
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]),
                        reverse=True)
    if candidates:
        return Path(candidates[0]).parent
    on_path = shutil.which("initdb")
    return Path(on_path).parent if on_path else None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class PostgresServer:
    def __init__(self, bin_dir: Path) -> None:
        self.bin_dir = bin_dir
        self.root = Path(tempfile.mkdtemp(prefix="sb-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self.as_postgres = os.geteuid() == 0
        self._names = itertools.count()
        if self.as_postgres:
            account = pwd.getpwnam("postgres")
            os.chown(self.root, account.pw_uid, account.pw_gid)

    def _run(self, *args: str) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if self.as_postgres else []
        result = subprocess.run(prefix + list(args), capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(args[:2])} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")

    def start(self) -> PostgresServer:
        self._run(str(self.bin_dir / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust",
                  "-E", "UTF8", "--locale=C", "--no-sync")
        options = f"-p {self.port} -k {self.root} -c listen_addresses='' -c fsync=off -c full_page_writes=off"
        self._run(str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-o", options, "-l", str(self.root / "log"),
                  "-w", "-t", "60", "start")
        return self

    def stop(self) -> None:
        try:
            self._run(str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def new_database(self) -> str:
        """Create an empty database; return its URL (`postgresql+psycopg://postgres@/<name>?host=...`)."""
        name = f"store_{next(self._names)}"
        with psycopg.connect(host=str(self.root), port=self.port, user="postgres", dbname="postgres",
                             autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql+psycopg://postgres@/{name}?host={self.root}&port={self.port}"
