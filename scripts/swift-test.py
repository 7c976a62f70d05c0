#!/usr/bin/env python3
"""Runs `swift test` with a deadline, so that a test that hangs fails the run in minutes instead of holding CI.

Everything `swift test` prints passes through. When the deadline passes, this prints which tests started and never
finished, the processes still running under the run (a flared, a broker, a tracker) and, where gdb is installed,
the stacks of the test process's threads that are in Flare's code; then it stops them all and fails.

    scripts/swift-test.py [--timeout SECONDS] [swift test arguments...]

The deadline covers the build of the tests as well (a clean checkout builds them first). Default 1500 s, or
FLARE_SWIFT_TEST_TIMEOUT_S.
"""
import argparse
import os
import pty
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections import Counter

# Swift Testing's progress lines (the cases of a parameterized test say when they start, never when they end).
STARTED = re.compile(r"^◇ Test (?!case |run started)(.+?) started\.$")
FINISHED = re.compile(r"^[✔✘] Test (?!case )(.+?) (?:passed|failed|skipped)\b")


def descendants(root: int) -> list[int]:
    """Every process below `root`, from /proc (no psutil here)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(entry))
        except (OSError, IndexError, ValueError):
            continue
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def command_line(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return cmdline.read().replace(b"\0", b" ").decode(errors="replace").strip()[:200]
    except OSError:
        return "?"


def flare_stacks(pid: int) -> str:
    """The threads of `pid` whose stack passes through Flare's own code, from gdb (empty without gdb)."""
    gdb = shutil.which("gdb")
    if not gdb:
        return "(gdb is not installed: no stacks)"
    try:
        out = subprocess.run([gdb, "-p", str(pid), "-batch", "-nx", "-ex", "set pagination off", "-ex", "thread apply all bt 25"],
                             capture_output=True, text=True, timeout=60).stdout
    except subprocess.TimeoutExpired:
        return "(gdb did not answer within 60 s)"
    threads = re.split(r"\n(?=Thread \d+ )", out)
    interesting = [t for t in threads
                   if t.startswith("Thread ") and any(line.startswith("#") and ("Flare" in line or "Tests" in line) for line in t.splitlines())]
    return "\n".join(interesting) or "(no thread is in Flare's code)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--timeout", type=float, default=float(os.environ.get("FLARE_SWIFT_TEST_TIMEOUT_S", "1500")))
    options, swift_arguments = parser.parse_known_args()

    swift = os.environ.get("SWIFT", "swift")
    # A terminal, not a pipe, so that the tests' output arrives line by line (through a pipe it comes in blocks,
    # and a hung run would not have said what it started). No colours: the lines are matched below.
    controller, terminal = pty.openpty()
    environment = dict(os.environ, NO_COLOR="1", TERM="dumb")
    process = subprocess.Popen([swift, "test", *swift_arguments], stdin=subprocess.DEVNULL, stdout=terminal, stderr=terminal,
                               start_new_session=True, env=environment)
    os.close(terminal)
    running: Counter[str] = Counter()

    def lines():
        with os.fdopen(controller, "r", errors="replace", newline=None) as output:
            try:
                yield from output
            except OSError:  # EIO: every writer has closed the terminal
                return

    def relay() -> None:
        for line in lines():
            sys.stdout.write(line)
            sys.stdout.flush()
            text = line.rstrip("\n")
            if (match := STARTED.match(text)):
                running[match.group(1)] += 1
            elif (match := FINISHED.match(text)) and running[match.group(1)] > 0:
                running[match.group(1)] -= 1

    reader = threading.Thread(target=relay, daemon=True)
    reader.start()
    try:
        status = process.wait(timeout=options.timeout)
        reader.join(timeout=10)
        return status
    except subprocess.TimeoutExpired:
        pass
    except KeyboardInterrupt:
        os.killpg(process.pid, signal.SIGKILL)
        return 130

    unfinished = sorted(name for name, count in running.items() if count > 0)
    print(f"\nswift test did not finish within {options.timeout:.0f} s.", flush=True)
    print(f"Tests started and not finished ({len(unfinished)}):")
    for name in unfinished:
        print(f"  {name}")
    below = descendants(process.pid)
    print("Processes still running under the run:")
    for pid in below:
        print(f"  {pid}: {command_line(pid)}")
    for pid in below:
        program = command_line(pid).split(" ")[0]
        if "PackageTests" in program or program.endswith(("/flared", "/flare")):
            print(f"Stacks of {pid} in Flare's code:\n{flare_stacks(pid)}", flush=True)
    os.killpg(process.pid, signal.SIGKILL)
    for pid in below:
        try:
            os.kill(pid, signal.SIGKILL)  # children that left the process group (a broker in its own session)
        except ProcessLookupError:
            pass
    process.wait()
    return 1


if __name__ == "__main__":
    sys.exit(main())
