"""Share creations in bursts of given sizes, with a given number of live shares: rate, p50 and p99 of each burst.

Starts mosquitto and a release-built flared on free loopback ports in a temp directory, as scripts/bench/bench.py
does, creates the live shares, then sends each burst with wrk (8 keep-alive connections, as bench.py's scale rows)
and prints its figures and how large SQLite's WAL file has grown so far. `--release-dir` runs another build's
flared and flare (copied out of .build/release), so that two builds can be measured in turn on the same day:

    /usr/bin/python3 -m scripts.bench.bursts --live 1000 --bursts 500,5000,5000,20000
    /usr/bin/python3 -m scripts.bench.bursts --live 100000 --bursts 5000 --release-dir /tmp/flare-before

Every process it starts is stopped before it exits; everything talks to 127.0.0.1 only.
"""
import argparse
import os
import shutil
import sys
import tempfile
import time

from scripts.bench import bench


def main():
    parser = argparse.ArgumentParser(prog="python3 -m scripts.bench.bursts", description=__doc__.splitlines()[0])
    parser.add_argument("--live", type=int, default=1000, help="live shares before the first burst (default 1000)")
    parser.add_argument("--bursts", default="500,5000,5000", help="comma-separated burst sizes (default 500,5000,5000)")
    parser.add_argument("--release-dir", help="a directory with the flared and flare to run (default .build/release)")
    parser.add_argument("--pause", type=float, default=2.0, help="seconds of quiet before each burst (default 2)")
    args = parser.parse_args()
    try:
        sizes = [int(size) for size in args.bursts.split(",")]
    except ValueError:
        parser.error(f"--bursts takes whole numbers separated by commas, not {args.bursts!r}")
    if args.live < 0 or any(size < 1 or size > 1_000_000 for size in sizes):
        parser.error("--live must be 0 or more, and each burst between 1 and 1,000,000")
    if args.release_dir:
        bench.RELEASE = os.path.abspath(args.release_dir)
    if not os.path.exists(os.path.join(bench.RELEASE, "flared")):
        raise SystemExit(f"bursts: no flared in {bench.RELEASE} (make bench, or swift build -c release, builds it)")
    if not shutil.which("wrk"):
        raise SystemExit("bursts: wrk is missing (scripts/deps.sh --bench installs it)")
    work = tempfile.mkdtemp(prefix="flare-bursts-")
    stack = None
    try:
        stack = bench.bench_stack(work)
        if args.live:
            print(f"bursts: creating {args.live:,} live shares", flush=True)
            bench.create_shares(stack, args.live)
        for size in sizes:
            time.sleep(args.pause)
            rate, p50, p99 = bench.create_burst(stack, size)
            print(f"burst of {size:,} with {args.live:,} live: {rate:,.0f}/s, p50 {p50:.2f} ms, p99 {p99:.2f} ms, "
                  f"WAL file {bench.wal_file_mb(stack) or 0.0:.1f} MB", flush=True)
    finally:
        if stack:
            stack.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
