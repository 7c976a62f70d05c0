"""Child processes: stopping them, and what /proc says of one."""

from __future__ import annotations

import os
import subprocess


def stop_processes(*procs: subprocess.Popen | None) -> None:
    """SIGTERM each process still running (None is skipped), SIGKILL after 20 s without an exit."""
    for proc in procs:
        if proc and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def exited(proc: subprocess.Popen | None, name: str) -> str | None:
    """For wait_until's `gone`: why waiting on `proc` is pointless (it exited), or None."""
    if proc is not None and proc.poll() is not None:
        return f"{name} exited with status {proc.returncode}"
    return None


def rss_mb(pid: int) -> float:
    """The process's resident memory in MiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
