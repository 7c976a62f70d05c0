"""Helpers shared by scripts/bench and scripts/chaos: loopback ports and the broker's `bench` service account."""
import os
import secrets
import signal
import socket
import subprocess

HOST = "127.0.0.1"
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def free_port():
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def port_open(port):
    try:
        socket.create_connection((HOST, port), timeout=0.2).close()
        return True
    except OSError:
        return False


def write_bench_password(broker_dir):
    """The broker admits no one anonymously: the load tools log in as the `bench` service account, which exists
    only where this file does (scripts/broker.sh adds it to the password file)."""
    os.makedirs(broker_dir, exist_ok=True)
    path = os.path.join(broker_dir, "bench.password")
    if not os.path.exists(path):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(32) + "\n")
    return path


def stop_processes(*procs):
    """SIGTERM each process still running (None is skipped), SIGKILL after 20 s without an exit."""
    for proc in procs:
        if proc and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


class Postgres:
    """A throwaway PostgreSQL (scripts/postgres.sh) in `directory`, on a free port; `url` names its database."""

    def __init__(self, directory, durable=False):
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

    def _script(self, command):
        result = subprocess.run([os.path.join(ROOT, "scripts", "postgres.sh"), command], env=self.env,
                                capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise RuntimeError(f"postgres.sh {command} failed: {result.stderr.strip()}")
        return result.stdout

    def start(self):
        self._script("start")

    def stop(self):
        self._script("stop")

    def pids(self):
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

    def pause(self):
        """SIGSTOP to every server process: its sockets stay open and nothing answers, as with a frozen host."""
        for pid in self.pids():
            os.kill(pid, signal.SIGSTOP)

    def resume(self):
        for pid in self.pids():
            os.kill(pid, signal.SIGCONT)

    def program(self, name):
        """The path of one of the server's programs (pgbench, pg_ctl), from where postgres.sh finds them."""
        return os.path.join(self._script("bin").strip(), name)

    def sql(self, statement):
        result = subprocess.run(["psql", self.url, "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", statement],
                                capture_output=True, text=True, timeout=60)
        if result.returncode != 0:
            raise RuntimeError(f"psql: {result.stderr.strip()}")
        return result.stdout.strip()
