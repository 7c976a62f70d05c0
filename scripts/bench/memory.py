"""Where flared's memory goes: its RSS split by kind of mapping, read from /proc/<pid>/smaps.

Starts mosquitto and a release-built flared (SQLite, or PostgreSQL with --postgres) on free loopback ports in a
temp directory, as scripts/bench/bench.py does, creates live shares through the HTTP API (each given a last
position, as bench.py's scale rows do), and at each level prints flared's RSS split into: the heap and the
anonymous mappings (glibc's per-thread malloc arenas counted apart), thread stacks, and file-backed mappings
(the binary, the Swift runtime, Foundation, other libraries). SQLite's page cache lives inside the heap: it is
estimated apart, as a bound (PRAGMA cache_size=-65536, 64 MiB, and never more than the pages the database has).

    /usr/bin/python3 -m scripts.bench.memory --shares 10000
    /usr/bin/python3 -m scripts.bench.memory --shares 1000,10000,100000
    /usr/bin/python3 -m scripts.bench.memory --shares 1000 --burst     # then 200,000 QoS 1 fixes, and 60 s after
    /usr/bin/python3 -m scripts.bench.memory --shares 10000 --postgres
    /usr/bin/python3 -m scripts.bench.memory --shares 10000 --heaptrack /tmp/flared.heaptrack   # flared under heaptrack
    /usr/bin/python3 -m scripts.bench.memory --heaptrack-report /tmp/flared.heaptrack.zst      # its allocations, grouped

Every process it starts is stopped before it exits; everything talks to 127.0.0.1 only.
"""
import argparse
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time

from scripts.bench import bench
from scripts.flarestack import wait_until

KB = 1024
ARENA = 64 * 1024 * 1024  # glibc's HEAP_MAX_SIZE on 64-bit: each thread arena's heap is one such aligned region
PAGE_CACHE_BOUND = 65536 * KB  # PRAGMA cache_size=-65536 (SQLiteShareStore)


def read_smaps(pid):
    """[(start, end, perms, path, {field: kB})] in address order."""
    maps = []
    header = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) (\S+) \S+ \S+ \S+\s*(.*)$")
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            m = header.match(line)
            if m:
                maps.append([int(m.group(1), 16), int(m.group(2), 16), m.group(3), m.group(4).strip(), {}])
            elif maps and line.split(":")[0] in ("Rss", "Size", "Pss", "Anonymous", "Private_Dirty"):
                key, value = line.split(":", 1)
                maps[-1][4][key] = int(value.split()[0])
    return maps


def status(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem", "VmSize", "Threads"):
                out[key] = int(value.split()[0])
    return out


def thread_stack_pointers(pid):
    """The stack pointer of each blocked thread (from /proc/<pid>/task/<tid>/syscall), and each thread's name."""
    sps, names = [], []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                names.append(f.read().strip())
            with open(f"/proc/{pid}/task/{tid}/syscall") as f:
                fields = f.read().split()
            if len(fields) >= 8:
                sps.append(int(fields[-2], 16))
        except OSError:
            pass
    return sps, names


def file_kind(path):
    name = os.path.basename(path)
    if name == "flared":
        return "file: flared binary"
    if name.startswith(("libFoundation", "lib_FoundationICU", "libFoundationNetworking")):
        return "file: Foundation (" + name.split(".so")[0] + ")"
    if "/swift/" in path or name.startswith(("libswift", "libdispatch", "libBlocksRuntime")):
        return "file: Swift runtime (libswift*, dispatch)"
    if name.startswith(("flare.db", "sqlite")) or ".db" in name:
        return "file: database (-shm, mapped)"
    return "file: other libraries (libc, sqlite3, microhttpd, mosquitto, ssl, curl, pq, …)"


def breakdown(pid):
    """flared's RSS by kind of mapping, in kB, and the counts that go with it."""
    maps = read_smaps(pid)
    sps, names = thread_stack_pointers(pid)
    kinds = {}
    detail = {}
    arenas = 0
    arena_reserved = 0
    stacks = []  # (reserved kB, resident kB)

    def add(kind, kb, path=None):
        kinds[kind] = kinds.get(kind, 0) + kb
        if path:
            detail[path] = detail.get(path, 0) + kb

    for i, (start, end, perms, path, fields) in enumerate(maps):
        rss = fields.get("Rss", 0)
        size = (end - start) // KB
        prev = maps[i - 1] if i else None
        nxt = maps[i + 1] if i + 1 < len(maps) else None
        if path == "[heap]":
            add("heap: [heap] (main arena)", rss)
        elif path == "[stack]":
            add("thread stacks", rss)
            stacks.append((size, rss))
        elif path.startswith("["):  # [vvar], [vdso], [vsyscall]
            add("other: kernel ([vdso], [vvar])", rss)
        elif path and not path.startswith("/SYSV"):
            add(file_kind(path), rss, path)
        elif perms.startswith("---"):
            continue  # guard pages and the reserved tail of arenas: never resident
        else:
            # A thread arena: a region starting on a 64 MiB boundary whose reserved (---p) tail ends on the next one.
            arena_end = start + ARENA
            if start % ARENA == 0 and (end == arena_end or (nxt and nxt[3] == "" and nxt[2].startswith("---") and nxt[0] == end and nxt[1] == arena_end)):
                arenas += 1
                arena_reserved += ARENA // KB
                add("heap: thread malloc arenas", rss)
            # A thread stack: a guard page (---p) just below, or a blocked thread's stack pointer inside.
            elif (prev and prev[3] == "" and prev[2].startswith("---") and prev[1] == start and (prev[1] - prev[0]) <= 1024 * KB
                  and not (prev[0] % ARENA == 0)) or any(start <= sp < end for sp in sps):
                add("thread stacks", rss)
                stacks.append((size, rss))
            else:
                add("heap: other anonymous (large malloc blocks, runtime)", rss)
    st = status(pid)
    return {"status": st, "kinds": kinds, "arenas": arenas, "arena_reserved_kb": arena_reserved,
            "threads": len(os.listdir(f"/proc/{pid}/task")), "thread_names": sorted(names), "stacks": stacks,
            "files": dict(sorted(detail.items(), key=lambda kv: -kv[1])), "rollup": rollup(pid)}


def rollup(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            return {line.split(":")[0]: int(line.split(":")[1].split()[0]) for line in f if line.strip().endswith("kB")}
    except OSError:
        return {}


def database_kb(stack):
    """The database's own size, WAL included (page_count x page_size, read-only): the page cache never holds more
    distinct pages than the database has (the WAL file on disk is larger: it keeps frames already checkpointed)."""
    db = sqlite3.connect(f"file:{stack.data}/flare.db?mode=ro", uri=True, timeout=30)
    try:
        pages = db.execute("PRAGMA page_count").fetchone()[0]
        size = db.execute("PRAGMA page_size").fetchone()[0]
    finally:
        db.close()
    return pages * size // KB


def flared_pid(stack):
    """flared's own pid: the child process itself, or under --heaptrack the flared below heaptrack's script."""
    top = stack.flared.pid
    todo, seen = [top], []
    while todo:
        pid = todo.pop()
        seen.append(pid)
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                todo.extend(int(x) for x in f.read().split())
        except OSError:
            pass
    for pid in seen:
        try:
            if os.path.basename(os.readlink(f"/proc/{pid}/exe")) == "flared":
                return pid
        except OSError:
            pass
    return top


def report(label, stack, shares):
    pid = flared_pid(stack)
    b = breakdown(pid)
    rss = b["status"]["VmRSS"]
    heap = sum(v for k, v in b["kinds"].items() if k.startswith("heap:"))
    db = None if stack.postgres else database_kb(stack)
    # Never more than the heap and anonymous mappings themselves hold (it lives in them).
    page_cache = None if db is None else min(PAGE_CACHE_BOUND, db, heap)
    stacks = b["kinds"].get("thread stacks", 0)
    files = sum(v for k, v in b["kinds"].items() if k.startswith("file:"))
    rest = rss - (page_cache or 0) - files - stacks
    print(f"\n== {label}: {shares:,} live shares, flared pid {pid}")
    print(f"   VmRSS {rss / KB:.1f} MiB  VmHWM {b['status']['VmHWM'] / KB:.1f}  RssAnon {b['status']['RssAnon'] / KB:.1f}  "
          f"RssFile {b['status']['RssFile'] / KB:.1f}"
          f"  RssShmem {b['status'].get('RssShmem', 0) / KB:.1f}  (smaps_rollup Rss {b['rollup'].get('Rss', 0) / KB:.1f},"
          f" Anonymous {b['rollup'].get('Anonymous', 0) / KB:.1f})")
    print(f"   {'part':64} {'MiB':>8}")
    for kind, kb in sorted(b["kinds"].items()):
        print(f"   {kind:64} {kb / KB:8.1f}")
    if page_cache is not None:
        print(f"   {'SQLite page cache, bound: min(64 MiB, database ' + f'{db / KB:.1f} MiB, heap)':64} {page_cache / KB:8.1f}  (inside the heap)")
    print(f"   {'heap and anonymous, all':64} {heap / KB:8.1f}")
    print(f"   malloc thread arenas: {b['arenas']} ({b['arena_reserved_kb'] / KB:.0f} MiB reserved)")
    reserved = sum(s for s, _ in b["stacks"])
    print(f"   threads: {b['threads']}; stacks found {len(b['stacks'])}, reserved {reserved / KB:.1f} MiB,"
          f" resident {stacks / KB:.2f} MiB; names: {', '.join(sorted(set(b['thread_names'])))}")
    print("   file-backed, largest: " + ", ".join(f"{os.path.basename(p)} {kb / KB:.1f}" for p, kb in list(b["files"].items())[:6]))
    per_share = rest * KB / max(1, shares)
    print(f"   rest (RSS - page cache bound - stacks - files): {rest / KB:.1f} MiB = {per_share:,.0f} B per live share")
    return {"label": label, "shares": shares, "rss_kb": rss, "page_cache_kb": page_cache, "database_kb": db,
            "heap_kb": heap, "stacks_kb": stacks, "files_kb": files, "rest_kb": rest, "per_share_b": round(per_share), **b}


# heaptrack's backtraces, grouped by what holds the memory. The first rule that matches a backtrace wins. SQLite's page
# cache is allocated by static functions (pcache1Alloc) that have no symbol in Debian's library: its pages are what a
# B-tree call (insert, seek, a transaction's first page) allocates below it.
PAGE_FETCHERS = ("sqlite3BtreeInsert", "sqlite3BtreeBeginTrans", "sqlite3PagerGet", "sqlite3BtreeIndexMoveto",
                 "sqlite3BtreeTableMoveto", "sqlite3BtreeNext", "sqlite3BtreeFirst", "sqlite3BtreeLast", "sqlite3BtreePrevious",
                 "sqlite3BtreeCreateTable", "sqlite3BtreeDelete", "sqlite3BtreeCursor", "sqlite3BtreeCount",
                 "sqlite3BtreeUpdateMeta", "sqlite3BtreeGetMeta")


def allocation_group(frames):
    joined = ";".join(frames)
    named = [f.split(" (")[0] for f in frames if f.startswith("sqlite3")]
    if "libsqlite3" in joined or named:
        if any(n in PAGE_FETCHERS for n in named):
            return "SQLite: page cache"
        return "events deliverer" if "FlareEvents" in joined else "SQLite: statements, schema, connections"
    rules = (("FlareEvents", "events deliverer"),
             ("ShareRegistry", "share registry (entries, trails, view cache, indexes)"),
             ("17DeadlineScheduler", "deadline scheduler (expiry queue)"),
             ("12ShareServiceC6create", "share ids and token hashes made at creation (held by the registry)"),
             ("FlareBridge", "ingest queue, batches (FlareBridge)"),
             ("FlareMQTT", "MQTT (libmosquitto, FlareMQTT)"), ("libmosquitto", "MQTT (libmosquitto, FlareMQTT)"),
             ("FlareHTTP", "HTTP server (libmicrohttpd, FlareHTTP, gateway)"),
             ("libmicrohttpd", "HTTP server (libmicrohttpd, FlareHTTP, gateway)"),
             ("FlareGateway", "HTTP server (libmicrohttpd, FlareHTTP, gateway)"),
             ("libFoundation", "Foundation"))
    for needle, group in rules:
        if needle in joined:
            return group
    return "other (OpenSSL and GnuTLS tables, Swift runtime metadata, start-up)"


def heaptrack_report(path, top=12):
    """Groups a heaptrack file's allocations: at the heap's peak, and still held when flared stopped."""
    for cost in ("peak", "leaked"):
        stacks = os.path.join(tempfile.mkdtemp(prefix="flare-heaptrack-"), "stacks.txt")
        subprocess.run(["heaptrack_print", "-f", path, "--print-peaks", "0", "--print-allocators", "0", "--print-temporary", "0",
                        "--flamegraph-cost-type", cost, "-F", stacks], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       check=True, timeout=600)
        groups, sites = {}, {}
        with open(stacks) as f:
            for line in f:
                trace, _, count = line.rstrip().rpartition(" ")
                frames = trace.split(";")
                group = allocation_group(frames)
                groups[group] = groups.get(group, 0) + int(count)
                own = tuple(x.split(" (")[0] for x in frames if x.startswith("$s") and ("Flare" in x or "flared" in x))[-5:]
                sites[own] = sites.get(own, 0) + int(count)
        shutil.rmtree(os.path.dirname(stacks), ignore_errors=True)
        total = sum(groups.values())
        print(f"\n== {'at the heap peak' if cost == 'peak' else 'still held when flared stopped'}: {total / 1048576:.2f} MiB")
        for group, size in sorted(groups.items(), key=lambda kv: -kv[1]):
            print(f"   {size / 1048576:8.2f} MiB {100 * size / max(1, total):5.1f} %  {group}")
        ranked = sorted(sites.items(), key=lambda kv: -kv[1])[:top]
        names = sorted({n for site, _ in ranked for n in site})
        demangled = subprocess.run([shutil.which("swift-demangle"), "--simplified"], input="\n".join(names),
                                   capture_output=True, text=True).stdout.splitlines() \
            if shutil.which("swift-demangle") else names
        readable = dict(zip(names, demangled)) if len(demangled) == len(names) else {n: n for n in names}
        print("   largest sites (Flare's innermost frames, the standard library's own left out):")
        library = ("specialized _", "specialized Array", "specialized static Array", "Array.", "_Native", "protocol witness",
                   "SQLiteStatement.", "partial apply")
        for site, size in ranked:
            own = [readable[n] for n in reversed(site) if not readable[n].startswith(library)][:2]
            print(f"   {size / 1048576:8.2f} MiB  " + " <- ".join(n[:80] for n in own))


def grow(stack, shares, level):
    """Creates shares through the HTTP API up to `level` live ones, each given a last position (QoS 1)."""
    missing = level - int(stack.metric("flare_shares_active"))
    if missing <= 0:
        return
    new, took = bench.create_shares_with_positions(stack, missing, offset=7)
    shares.extend(new)
    print(f"memory: created {missing:,} shares in {took:.1f} s", flush=True)


def main():
    parser = argparse.ArgumentParser(prog="python3 -m scripts.bench.memory", description=__doc__.splitlines()[0])
    parser.add_argument("--shares", default="10000", help="comma-separated levels of live shares (default 10000)")
    parser.add_argument("--burst", action="store_true",
                        help="after the last level: 200,000 QoS 1 fixes over 1,000 shares (bench.py's ingest row), "
                             "then measure again right after and --after seconds later")
    parser.add_argument("--after", type=int, default=60, help="seconds after the burst for the last reading")
    parser.add_argument("--settle", type=float, default=2.0, help="seconds of quiet before each reading")
    parser.add_argument("--postgres", action="store_true", help="the PostgreSQL store (a throwaway server)")
    parser.add_argument("--heaptrack", metavar="FILE",
                        help="run flared under heaptrack, writing FILE (heaptrack's own memory then counts in the readings)")
    parser.add_argument("--heaptrack-report", metavar="FILE", help="only group the allocations of a heaptrack file (.zst)")
    parser.add_argument("--viewers", type=int, default=0,
                        help="after the last level: this many live viewers (SSE), one a share, then measure again")
    parser.add_argument("--json", help="also write the readings to this file")
    parser.add_argument("--keep", action="store_true", help="keep the temp directory")
    args = parser.parse_args()
    if args.heaptrack_report:
        heaptrack_report(args.heaptrack_report)
        return 0
    levels = [int(x) for x in args.shares.split(",")]
    work = tempfile.mkdtemp(prefix="flare-memory-")
    stack = None
    readings = []
    try:
        if args.heaptrack:
            wrapped = os.path.join(work, "bin")
            os.makedirs(wrapped)
            os.symlink(os.path.join(bench.RELEASE, "flare"), os.path.join(wrapped, "flare"))
            with open(os.path.join(wrapped, "flared"), "w") as f:
                f.write(f"#!/bin/sh\nexec heaptrack -o {os.path.abspath(args.heaptrack)} {os.path.join(bench.RELEASE, 'flared')}\n")
            os.chmod(os.path.join(wrapped, "flared"), 0o755)
            bench.RELEASE = wrapped
        stack = bench.bench_stack(os.path.join(work, "stack"), store="postgres" if args.postgres else "sqlite", durable=True)
        shares = []
        for level in levels:
            grow(stack, shares, level)
            time.sleep(args.settle)
            readings.append(report(f"{level:,} shares", stack, int(stack.metric("flare_shares_active"))))
        if args.viewers:
            before = readings[-1]
            viewers = bench.SSEViewers(stack, [s[1] for s in shares[:args.viewers]])
            wait_until(lambda: viewers.open + viewers.errors >= args.viewers, 120, f"{args.viewers} SSE viewers")
            time.sleep(args.settle)
            live = int(stack.metric("flare_shares_active"))
            readings.append(report(f"{viewers.open:,} viewers", stack, live))
            print(f"memory: {viewers.open:,} viewers open ({viewers.errors} refused): RSS"
                  f" {(readings[-1]['rss_kb'] - before['rss_kb']) * KB / max(1, viewers.open):,.0f} B a viewer", flush=True)
            viewers.close()
        if args.burst:
            ingest = shares[:1000]
            path = bench.shares_file(stack, ingest, "memory-ingest.txt")
            accepted, rows, rate = bench.flare_ingest(stack, path, 200_000, 1, 40_000, offset=2_000_000)
            print(f"memory: burst of 200,000 QoS 1 fixes over {len(ingest):,} shares: {accepted:,} accepted,"
                  f" {rows:,} rows, {rate:,.0f}/s", flush=True)
            live = int(stack.metric("flare_shares_active"))
            readings.append(report("right after the burst", stack, live))
            time.sleep(args.after)
            readings.append(report(f"{args.after} s after the burst", stack, live))
    finally:
        if stack and args.heaptrack and stack.flared and stack.flared.poll() is None:
            pid = flared_pid(stack)
            if pid != stack.flared.pid:
                os.kill(pid, 15)  # flared itself, so that heaptrack's script sees it exit and writes its file
                try:
                    stack.flared.wait(120)
                except subprocess.TimeoutExpired:
                    pass
        if stack:
            try:
                stack.stop()
            except RuntimeError as error:  # postgres.sh stop
                print(f"memory: {error}", file=sys.stderr)
        if args.keep:
            print(f"memory: kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(f"\n{'reading':26} {'RSS':>7} {'page cache':>11} {'other heap':>11} {'arenas':>6} {'stacks':>7} {'threads':>7} {'files':>7} {'rest/share':>10}")
    for r in readings:
        pc = r["page_cache_kb"]
        other = r["heap_kb"] - (pc or 0)
        print(f"{r['label']:26} {r['rss_kb'] / KB:7.1f} {'-' if pc is None else f'{pc / KB:.1f}':>11} {other / KB:11.1f}"
              f" {r['arenas']:6d} {r['stacks_kb'] / KB:7.2f} {r['threads']:7d} {r['files_kb'] / KB:7.1f} {r['per_share_b']:8,d} B")
    print("MiB; page cache = min(64 MiB, the database's page_count x page_size, the heap), a bound inside the heap; "
          "rest/share = (RSS - page cache - stacks - files) / live shares")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(readings, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
