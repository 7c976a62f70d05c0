"""Benchmark of the broker's token check (not a test): a real mosquitto with the flare_auth plugin on a free
loopback port, fed by raw MQTT 3.1.1 CONNECTs from a few worker processes.

Measures
  1. connect-with-token rate: CONNECT with a valid device token, CONNACK, DISCONNECT (each a distinct share)
  2. refusal rate: the same with a bad signature (what an attacker guessing tokens costs the broker)
  3. broker memory (VmRSS) with --hold clients connected at once, and after they all left

Usage: /usr/bin/python3 -m scripts.bench.broker_auth [--connects 20000] [--hold 10000] [--workers 2] [--baseline]
(from the repository root). Needs `make plugin`. Everything stays on 127.0.0.1 and the broker is stopped at the end.
"""
import argparse
import base64
import hashlib
import hmac
import json
import multiprocessing
import os
import resource
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time

from scripts.flarestack import HOST, ROOT, free_port, port_open, stop_processes, wait_until

PLUGIN = os.environ.get("FLARE_BROKER_PLUGIN", os.path.join(ROOT, ".build/broker/flare_auth.so"))


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def token(key, share, exp):
    header = b64url(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())
    claims = {"sub": share, "role": "device", "iat": int(time.time()), "exp": exp, "acl": [
        {"permission": "allow", "action": "publish", "topic": f"flare/v1/shares/{share}/location/#"},
        {"permission": "allow", "action": "subscribe", "topic": f"flare/v1/shares/{share}/status"}]}
    body = b64url(json.dumps(claims, separators=(",", ":")).encode())
    signature = b64url(hmac.new(key, f"{header}.{body}".encode(), hashlib.sha256).digest())
    return f"{header}.{body}.{signature}"


def mqtt_string(text):
    data = text.encode()
    return struct.pack("!H", len(data)) + data


def connect_packet(client_id, username, password):
    variable = b"\x00\x04MQTT\x04\xc2" + struct.pack("!H", 60)  # v3.1.1, username + password + clean session
    rest = variable + mqtt_string(client_id) + mqtt_string(username) + mqtt_string(password)
    length, encoded = len(rest), b""
    while True:
        byte, length = length % 128, length // 128
        encoded += bytes([byte | (0x80 if length else 0)])
        if not length:
            break
    return b"\x10" + encoded + rest


def read_connack(sock):
    data = b""
    while len(data) < 4:
        chunk = sock.recv(4 - len(data))
        if not chunk:
            return None
        data += chunk
    return data[3]


def open_client(port, credentials, index):
    sock = socket.create_connection((HOST, port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(connect_packet(f"bench-{os.getpid()}-{index}", *credentials))
    return sock, read_connack(sock)


def connect_many(args):
    port, credentials = args
    codes = {}
    for index, pair in enumerate(credentials):
        sock, code = open_client(port, pair, index)
        codes[code] = codes.get(code, 0) + 1
        if code == 0:
            sock.sendall(b"\xe0\x00")
        sock.close()
    return codes


def timed(label, port, credentials, workers):
    slices = [credentials[i::workers] for i in range(workers)]
    start = time.monotonic()
    with multiprocessing.Pool(workers) as pool:
        results = pool.map(connect_many, [(port, s) for s in slices])
    elapsed = time.monotonic() - start
    codes = {}
    for result in results:
        for code, count in result.items():
            codes[code] = codes.get(code, 0) + count
    print(f"{label}: {len(credentials)} in {elapsed:.2f} s = {len(credentials) / elapsed:,.0f}/s (CONNACK codes {codes})")


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def main():
    parser = argparse.ArgumentParser(prog="python3 -m scripts.bench.broker_auth", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--connects", type=int, default=20000)
    parser.add_argument("--hold", type=int, default=10000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--baseline", action="store_true",
                        help="the same broker without the plugin (allow_anonymous true): what the token check adds")
    args = parser.parse_args()
    if not os.path.exists(PLUGIN):
        sys.exit(f"{PLUGIN} is not built; run `make plugin`")

    fds = args.hold + 1024
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < fds:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (fds, fds))
        except (ValueError, OSError):
            sys.exit(f"need {fds} file descriptors (ulimit -n); hard limit is {hard}")
    else:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, fds), hard))

    work = tempfile.mkdtemp(prefix="flare-bench-auth.")
    key = os.urandom(32)
    key_path = os.path.join(work, "token.key")
    with open(key_path, "w") as f:
        f.write(b64url(key) + "\n")
    port = free_port()
    config = os.path.join(work, "mosquitto.conf")
    user = subprocess.run(["id", "-un"], capture_output=True, text=True).stdout.strip()
    with open(config, "w") as f:
        f.write(f"listener {port} {HOST}\nuser {user}\npersistence false\nmax_keepalive 300\nlog_dest none\n")
        if args.baseline:
            f.write("allow_anonymous true\n")
        else:
            f.write(f"allow_anonymous false\nplugin {PLUGIN}\nplugin_opt_token_key_file {key_path}\n"
                    f"plugin_opt_revocations_file {work}/revocations\n")
    broker = subprocess.Popen([shutil.which("mosquitto") or "/usr/sbin/mosquitto", "-c", config],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: port_open(port), 10, "mosquitto listening",
                   gone=lambda: f"mosquitto exited ({broker.returncode})" if broker.poll() is not None else None)

        exp = int(time.time()) + 3600
        shares = [b64url(os.urandom(16)) for _ in range(max(args.connects, args.hold))]
        print(f"mosquitto {'WITHOUT the plugin (baseline)' if args.baseline else 'with flare_auth'} on {HOST}:{port}; "
              f"{os.cpu_count()} cores, {args.workers} client processes")
        print(f"broker RSS at start: {rss_kib(broker.pid) / 1024:.1f} MiB")
        valid = [(s, token(key, s, exp)) for s in shares[:args.connects]]
        timed("connect with a valid token", port, valid, args.workers)
        forged = [(s, t[:-4] + ("AAAA" if not t.endswith("AAAA") else "BBBB")) for s, t in valid[: args.connects // 4]]
        if not args.baseline:
            timed("connect with a forged token (refused)", port, forged, args.workers)
        print(f"broker RSS after {args.connects} distinct tokens seen: {rss_kib(broker.pid) / 1024:.1f} MiB")

        before = rss_kib(broker.pid)
        held = []
        for index, share in enumerate(shares[:args.hold]):
            sock, code = open_client(port, (share, token(key, share, exp)), index)
            if code != 0:
                sys.exit(f"held client {index} refused ({code})")
            held.append(sock)
        during = rss_kib(broker.pid)
        print(f"broker RSS with {len(held)} token clients connected: {during / 1024:.1f} MiB "
              f"(+{(during - before) * 1024 / max(1, len(held)):,.0f} bytes per client, mosquitto's own context included)")
        for sock in held:
            sock.close()
        time.sleep(1)
        print(f"broker RSS after they left: {rss_kib(broker.pid) / 1024:.1f} MiB")
    finally:
        stop_processes(broker)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
