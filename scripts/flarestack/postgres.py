"""A throwaway PostgreSQL (scripts/postgres.sh) for the tests, the fault tests and the benchmarks."""

from __future__ import annotations

import os
import signal
import subprocess

from .ports import free_port
from .root import ROOT


class Postgres:
    """A throwaway PostgreSQL (scripts/postgres.sh) in `directory`, on a free port; `url` names its database."""

    def __init__(self, directory: str, durable: bool = False) -> None:
        self.env = dict(os.environ, FLARE_DATA_DIR=directory, FLARE_PG_PORT=str(free_port()))
        os.makedirs(directory, exist_ok=True)
        # As root the server runs as `postgres`, which must pass through the (private) temp directory above it.
        parent = os.path.dirname(os.path.abspath(directory))
        os.chmod(parent, os.stat(parent).st_mode | 0o001)
        self.url = self._script("start").strip()
        if not durable:
            # Fault tests quote no durability: no fsync. Benchmarks pass durable=True.
            self.sql("ALTER SYSTEM SET fsync = off")
            self.sql("SELECT pg_reload_conf()")

    def _script(self, command: str) -> str:
        result = subprocess.run([os.path.join(ROOT, "scripts", "postgres.sh"), command], env=self.env,
                                capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise RuntimeError(f"postgres.sh {command} failed: {result.stderr.strip()}")
        return result.stdout

    def start(self) -> None:
        self._script("start")

    def stop(self) -> None:
        self._script("stop")

    def pids(self) -> list[int]:
        """The server's processes: the postmaster (first line of postmaster.pid) and its children."""
        with open(os.path.join(self.env["FLARE_DATA_DIR"], "postgres", "data", "postmaster.pid")) as f:
            postmaster = int(f.readline())
        children = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as stat:
                        if int(stat.read().rsplit(")", 1)[1].split()[1]) == postmaster:
                            children.append(int(entry))
                except (OSError, ValueError, IndexError):
                    pass
        return [postmaster] + children

    def pause(self) -> None:
        """SIGSTOP to every server process: its sockets stay open and nothing answers, as with a frozen host."""
        for pid in self.pids():
            os.kill(pid, signal.SIGSTOP)

    def resume(self) -> None:
        for pid in self.pids():
            os.kill(pid, signal.SIGCONT)

    def program(self, name: str) -> str:
        """The path of one of the server's programs (pgbench, pg_ctl), from where postgres.sh finds them."""
        return os.path.join(self._script("bin").strip(), name)

    def sql(self, statement: str) -> str:
        result = subprocess.run(["psql", self.url, "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", statement],
                                capture_output=True, text=True, timeout=60)
        if result.returncode != 0:
            raise RuntimeError(f"psql: {result.stderr.strip()}")
        return result.stdout.strip()
