"""The attack group of `make chaos`: what someone holding one share's token, or one link, tries against everyone else.

Each case runs a real plugin broker and flared (a flarestack.Stack), attacks them the way the attack was found, and checks
that nothing acknowledged is lost and that other shares are not affected. `--quick` runs the same cases with shorter
streams. Traffic stays on 127.0.0.1, every loop is bounded, and everything started is stopped.
"""
import base64
import hashlib
import hmac
import json
import os
import secrets
import subprocess
import threading
import time

from scripts.flarestack import HOST, free_port, stop_processes, wait_until


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def token_key(stack):
    with open(os.path.join(stack.data, "token.key")) as f:
        text = f.read().strip()
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def legacy_device_token(stack, share_id, expires_at):
    """A device token as the release before exact topics signed it: it may publish `…/location/#` until it expires."""
    base = f"flare/v1/shares/{share_id}"
    claims = {"sub": share_id, "role": "device", "iat": int(time.time()), "exp": expires_at, "acl": [
        {"permission": "deny", "action": "publish", "topic": f"{base}/location/cmd"},
        {"permission": "allow", "action": "publish", "topic": f"{base}/location/#"},
        {"permission": "allow", "action": "subscribe", "topic": f"{base}/status"}]}
    signing_input = b64url(b'{"alg":"HS256","typ":"JWT"}') + "." + b64url(json.dumps(claims, separators=(",", ":")).encode())
    signature = hmac.new(token_key(stack), signing_input.encode(), hashlib.sha256).digest()
    return signing_input + "." + b64url(signature)


def admin_password(stack):
    with open(os.path.join(stack.broker_dir, "admin.password")) as f:
        return f.read().strip()


def make_admin_account(work):
    """The broker's read-only `admin` account (scripts/broker.sh adds it when this file exists), made before it starts."""
    broker_dir = os.path.join(work, "broker-data", "broker")
    os.makedirs(broker_dir, exist_ok=True)
    with open(os.path.join(broker_dir, "admin.password"), "w") as f:
        f.write(secrets.token_urlsafe(24) + "\n")


def retained_below(stack, topic_filter):
    """{topic: payload size} of what the broker retains under `topic_filter`, as a new subscriber receives it."""
    out = subprocess.run(["mosquitto_sub", "-h", HOST, "-p", str(stack.mqtt_port), "-u", "admin", "-P", admin_password(stack),
                          "-i", f"chaos-admin-{secrets.token_hex(4)}", "-t", topic_filter, "--retained-only", "-W", "2", "-v"],
                         capture_output=True, text=True).stdout
    found = {}
    for line in out.splitlines():
        topic, _, payload = line.partition(" ")
        found[topic] = len(payload)
    return found


def try_connect(stack, username, password, client_id, persistent=True):
    """One MQTT connection attempt (Debian's mosquitto_sub, v3.1.1, a persistent session as the attack used); returns
    (connected, stderr)."""
    arguments = ["mosquitto_sub", "-h", HOST, "-p", str(stack.mqtt_port), "-V", "mqttv311", "-u", username, "-P", password,
                 "-i", client_id, "-t", f"flare/v1/shares/{username}/status", "-W", "1"]
    if persistent:
        arguments.append("-c")
    result = subprocess.run(arguments, capture_output=True, text=True, timeout=20)
    # Connected, it waits out -W and exits 27 (timed out); refused, it exits at once with "Connection Refused".
    return "refused" not in result.stderr.lower() and "not authori" not in result.stderr.lower(), result.stderr.strip()


def stored_for(stack, share):
    row = f"(SELECT id FROM shares WHERE share_id = '{share['share_id']}')"
    return stack.rows(f"SELECT count(*) FROM fixes WHERE share = {row}")[0][0]


def track(stack, work, share, name, count, interval, confirm):
    """`flare track` into a share: confirming (each fix kept and sent again until Flare says it is stored) or done at
    the broker's PUBACK, as the OwnTracks apps are."""
    share_file = os.path.join(work, f"{name}.json")
    with open(share_file, "w") as f:
        json.dump(share, f)
    return subprocess.Popen([os.path.join(stack.bin, "flare"), "track", "--share-file", share_file, "--interval", str(interval),
                             "--speed", "100", "--count", str(count), "--quiet", "--status-every", "1"]
                            + ([] if confirm else ["--no-confirm"]),
                            stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, f"{name}.log"), "w"), env=stack.env)


def case_session_takeover(new_stack, work, quick):
    """A token of one share connecting with the bridge's client id (and a persistent session) would take the bridge's
    session and drop what the broker queued for it; with another share's phone's id, that phone's. While another share
    streams QoS 1 fixes from a publisher that is done at the broker's PUBACK, every such attempt is refused at CONNACK:
    every fix the broker acknowledged is stored, and neither the bridge nor the phone is disconnected."""
    stack = new_stack(work)
    tracker = None
    try:
        victim, attacker = stack.create_share(), stack.create_share()
        status, _, body = stack.request("POST", f"/api/v1/shares/{attacker['share_id']}/watch-tokens",
                                        headers={"Authorization": f"Bearer {stack.owner_key}"})
        assert status == 201, (status, body[:200])
        attacker_watch = json.loads(body)["watch_token"]
        count = 150 if quick else 600
        tracker = track(stack, work, victim, "victim", count, 0.02, confirm=False)
        stolen = ["flared", "flared-a", "flared-epoch", "flared-sweep", f"flare-{victim['share_id']}",
                  f"flare-{victim['share_id']}-watch-x", "auto-5D3C2A10-0B1E-4F6A-8C7D-9E0F1A2B3C4D"]
        attempts = refused = 0
        while tracker.poll() is None and attempts < 200:
            for token in (attacker["device_token"], attacker_watch):
                connected, said = try_connect(stack, attacker["share_id"], token, stolen[attempts % len(stolen)])
                attempts += 1
                refused += 0 if connected else 1
                assert not connected, f"client id {stolen[(attempts - 1) % len(stolen)]} was taken with another share's token"
        assert tracker.wait(120) == 0, "the victim's tracker failed"
        wait_until(lambda: stored_for(stack, victim) >= count, 30, "every fix the broker acknowledged stored")
        time.sleep(0.5)
        stored = stored_for(stack, victim)
        assert stored == count, f"{count} fixes acknowledged by the broker, {stored} stored"
        with open(os.path.join(work, "broker.log")) as f:
            broker_log = f.read()
        with open(os.path.join(work, "flared.log")) as f:
            flared_log = f.read()
        assert "already connected, closing old connection" not in broker_log, "a session was taken over"
        assert "lost the broker" not in flared_log, "the bridge was disconnected"
        return (f"{attempts} connections with another share's tokens as the bridge's, the probe's, the sweeper's, the "
                f"victim phone's and watcher's and a broker-assigned id: all {refused} refused at CONNACK while the victim "
                f"streamed {count} QoS 1 fixes (done at PUBACK): {stored}/{count} stored, no session taken over"), {
                    "attempts": attempts, "refused": refused, "fixes": count, "stored": stored}
    finally:
        stop_processes(tracker)
        stack.stop()


def case_retained_junk(new_stack, work, quick):
    """A device token writes only its share's location topic: nothing below it is taken. A token of the earlier rules
    (`…/location/#`) that left retained messages there sees them cleared when the share ends; another share's retained
    position stays."""
    make_admin_account(work)
    stack = new_stack(work)
    try:
        share, other = stack.create_share(), stack.create_share()
        base = f"flare/v1/shares/{share['share_id']}/location"

        def publish(token, client_id, topic, payload, retain=True):
            return subprocess.run(["mosquitto_pub", "-h", HOST, "-p", str(stack.mqtt_port), "-V", "mqttv5", "-u", share["share_id"],
                                   "-P", token, "-i", client_id, "-t", topic, "-q", "1"] + (["-r"] if retain else []) + ["-m", payload],
                                  capture_output=True, text=True, timeout=20)
        junk = "j" * 12000
        for n in range(3):
            publish(share["device_token"], f"flare-{share['share_id']}-junk", f"{base}/junk/{n}", junk)
        assert retained_below(stack, f"{base}/#") == {}, "today's device token left messages below its location topic"
        legacy = legacy_device_token(stack, share["share_id"], int(time.time()) + 600)
        for n in range(3):
            result = publish(legacy, f"flare-{share['share_id']}-legacy", f"{base}/junk/{n}", junk)
            assert result.returncode == 0, result.stderr
        now = int(time.time())
        for target in (share, other):
            status, _, body = stack.request("POST", f"/api/v1/shares/{target['share_id']}/locations",
                                            json.dumps({"lat": 48.1, "lon": 11.5, "tst": now - 5}),
                                            {"Authorization": f"Bearer {target['device_token']}", "Content-Type": "application/json"})
            assert status == 202, (status, body[:200])
        wait_until(lambda: len(retained_below(stack, f"{base}/#")) == 4, 10, "the junk and the position retained")
        status, _, _ = stack.request("POST", f"/api/v1/shares/{share['share_id']}/stop", headers={"Authorization": f"Bearer {stack.owner_key}"})
        assert status == 200, status
        wait_until(lambda: retained_below(stack, f"{base}/#") == {}, 15,
                   lambda: f"nothing retained below the stopped share's location (have {retained_below(stack, base + '/#')})")
        other_retained = retained_below(stack, f"flare/v1/shares/{other['share_id']}/location")
        assert len(other_retained) == 1, f"the other share's retained position went: {other_retained}"
        return ("today's device token: 3 × 12 KB below its location refused; a token of the earlier rules left 3 × 12 KB "
                "retained there, all cleared with the location at the stop; the other share's position kept"), {
                    "junk_messages": 3, "cleared": 3}
    finally:
        stack.stop()


def case_fix_flood(new_stack, work, quick):
    """One share's device token sending as fast as it can: over HTTP, answered 202 within the share's budget and 429
    with Retry-After beyond it, every 202 stored; over MQTT, disconnected beyond the budget before its message is
    acknowledged, so a tracker that keeps each fix until Flare confirms it gets every one stored; another share's fixes
    are taken throughout."""
    stack = new_stack(work, env={"FLARE_FIX_RATE_PER_SHARE": "20/100"})
    tracker = None
    try:
        flood, bystander, mqtt_share = stack.create_share(), stack.create_share(), stack.create_share()
        now = int(time.time())
        answers = {}
        total = 400 if quick else 1500
        bystander_ok = 0
        for n in range(total):
            status, headers, _ = stack.request("POST", f"/api/v1/shares/{flood['share_id']}/locations",
                                               json.dumps({"lat": 48 + n / 100000, "lon": 11.5, "tst": now - 60 + n % 60}),
                                               {"Authorization": f"Bearer {flood['device_token']}", "Content-Type": "application/json"})
            answers[status] = answers.get(status, 0) + 1
            if status == 429:
                assert "Retry-After" in headers, "a 429 without Retry-After"
            if n % 50 == 0:
                status, _, _ = stack.request("POST", f"/api/v1/shares/{bystander['share_id']}/locations",
                                             json.dumps({"lat": 47 + n / 100000, "lon": 11.5, "tst": now - 60 + n // 50}),
                                             {"Authorization": f"Bearer {bystander['device_token']}", "Content-Type": "application/json"})
                bystander_ok += status == 202
        assert set(answers) <= {202, 429}, f"answers {answers}"
        assert answers.get(429, 0) > 0, f"no 429 for {total} fixes in a few seconds: {answers}"
        stored = stored_for(stack, flood)
        assert stored == answers[202], f"{answers[202]} answered 202, {stored} stored"
        assert bystander_ok == (total + 49) // 50, "the other share's fixes were refused"

        count = 200 if quick else 600
        tracker = track(stack, work, mqtt_share, "flooder", count, 0.01, confirm=True)
        assert tracker.wait(180) == 0, "the confirming tracker did not have every fix confirmed"
        with open(os.path.join(work, "flooder.log")) as f:
            log = f.read()
        assert f"sent {count} fixes, all confirmed stored by Flare" in log, log[-2000:]
        mqtt_stored = stored_for(stack, mqtt_share)
        assert mqtt_stored == count, f"{count} confirmed, {mqtt_stored} stored"
        with open(os.path.join(work, "broker.log")) as f:
            disconnects = f.read().count(f"share {mqtt_share['share_id']} over its publish rate")
        assert disconnects > 0, "the MQTT flood was never over its budget"
        # The broker's count reaches flared's /metrics (flare/v1/broker/stats, at most every 5 s).
        wait_until(lambda: stack.metric("flare_broker_rate_disconnects") >= disconnects, 20,
                   lambda: f"flare_broker_rate_disconnects at {stack.metric('flare_broker_rate_disconnects')}, the broker said {disconnects}")
        return (f"HTTP: {total} fixes at full speed into one share: {answers[202]} answered 202 (all stored), "
                f"{answers.get(429, 0)} answered 429; the other share's {bystander_ok} all taken. MQTT: {count} fixes at "
                f"100/s against 20/s: disconnected {disconnects} times, all {count} confirmed and stored once"), {
                    "http_sent": total, "http_202": answers[202], "http_429": answers.get(429, 0), "mqtt_fixes": count,
                    "mqtt_disconnects": disconnects, "mqtt_stored": mqtt_stored}
    finally:
        stop_processes(tracker)
        stack.stop()


def case_public_surface(new_stack, work, quick):
    """What a link holder or a stranger can reach: /metrics not on the public listener, /healthz says up or down and
    nothing more, one link cannot hold more live streams than its bound, a name of thousands of combining marks is
    refused."""
    stack = new_stack(work)
    streams = []
    try:
        share = stack.create_share()
        token = share["share_url"].rsplit("/", 1)[1]
        assert stack.status("/metrics") == 404, "/metrics on the public listener"
        assert stack.request("GET", "/metrics", port=stack.metrics_port)[0] == 200, "/metrics not on its own listener"
        health = json.loads(stack.request("GET", "/healthz")[2])
        assert set(health) <= {"status", "mqtt", "store"}, f"/healthz says more: {sorted(health)}"
        import http.client
        refused = None
        for n in range(25):
            connection = http.client.HTTPConnection(HOST, stack.http_port, timeout=10,
                                                    source_address=(f"127.0.0.{2 + n % 3}", 0))
            connection.request("GET", f"/api/v1/view/{token}/events")
            response = connection.getresponse()
            if response.status == 200:
                streams.append(connection)
            else:
                refused = (n, response.status, response.getheader("Retry-After"))
                connection.close()
                break
        assert refused and refused[1] == 429 and refused[2], f"no 429 after {len(streams)} streams on one link: {refused}"
        other = stack.create_share()
        connection = http.client.HTTPConnection(HOST, stack.http_port, timeout=10)
        connection.request("GET", f"/api/v1/view/{other['share_url'].rsplit('/', 1)[1]}/events")
        assert connection.getresponse().status == 200, "another link's stream was refused"
        streams.append(connection)
        name = "Mom" + "\u0301" * 3000
        status, _, body = stack.request("POST", f"/api/v1/view/{token}/answers",
                                        json.dumps({"kind": "on_my_way", "name": name}, ensure_ascii=False).encode(),
                                        {"Content-Type": "application/json"}, source="127.0.0.9")
        assert status == 400 and b"invalid_name" in body, (status, body[:200])
        return (f"/metrics 404 on the public listener and served on its own; /healthz {sorted(health)}; live streams on one "
                f"link: {len(streams) - 1} open, the next 429 with Retry-After, another link's taken; a name of 3,000 "
                f"combining marks 400 invalid_name"), {"streams_per_link": len(streams) - 1}
    finally:
        for connection in streams:
            connection.close()
        stack.stop()


def case_key_rotation(new_stack, work, quick):
    """`flare token-key rotate`, flared restarted, the broker reloaded: the phone connected with a token of the old key
    is disconnected and refused, a share made after it works, and the key's webhook secret is still the one its
    receiver knows (it opens with the new key)."""
    stack = new_stack(work)
    phone = None
    try:
        share = stack.create_share()
        phone = subprocess.Popen(["mosquitto_sub", "-h", HOST, "-p", str(stack.mqtt_port), "-V", "mqttv311", "-u", share["share_id"],
                                  "-P", share["device_token"], "-i", f"flare-{share['share_id']}", "-t",
                                  f"flare/v1/shares/{share['share_id']}/status"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert phone.stdout.readline(), "the phone did not connect"
        status, _, body = stack.request("PUT", "/api/v1/keys/1/webhook", json.dumps({"url": "http://127.0.0.1:9/hook"}),
                                        {"Authorization": f"Bearer {stack.owner_key}", "Content-Type": "application/json"})
        assert status == 200, (status, body[:200])
        rotated = subprocess.run([os.path.join(stack.bin, "flare"), "token-key", "rotate", "--data-dir", stack.data],
                                 capture_output=True, text=True, env=stack.env, timeout=60)
        assert rotated.returncode == 0, rotated.stderr
        assert "1 keys' webhook secrets sealed with the new key" in rotated.stdout, rotated.stdout
        # The broker reads its own copy of the key (the stack keeps them apart, as two machines would).
        with open(os.path.join(stack.data, "token.key")) as f:
            new_key = f.read()
        with open(os.path.join(work, "broker-data", "token.key"), "w") as f:
            f.write(new_key)
        stack.broker.send_signal(1)  # SIGHUP
        wait_until(lambda: phone.poll() is not None, 10, "the phone of the old key disconnected")
        stop_processes(stack.flared)
        stack.start_flared()
        connected, said = try_connect(stack, share["share_id"], share["device_token"], f"flare-{share['share_id']}", persistent=False)
        assert not connected, "the old key's token is accepted after the rotation"
        fresh = stack.create_share()
        connected, said = try_connect(stack, fresh["share_id"], fresh["device_token"], f"flare-{fresh['share_id']}", persistent=False)
        assert connected, f"a share made after the rotation does not connect: {said}"
        with open(os.path.join(work, "broker.log")) as f:
            assert "token key changed; disconnected 1 clients verified with the old key" in f.read()
        return ("token key rotated: the connected phone of the old key disconnected and refused, a new share's device "
                "connects, the webhook secret sealed anew"), {}
    finally:
        stop_processes(phone)
        stack.stop()


class SlowRelay:
    """A real SMTP server (aiosmtpd) that takes `seconds` a mail, as a relay far away does, and notes when each mail
    arrived and for whom. Threaded: it runs beside the case, and `stop` ends it."""

    def __init__(self, seconds):
        import asyncio

        from aiosmtpd.controller import Controller
        self.received = []  # (monotonic time, recipients)
        self.lock = threading.Lock()
        relay = self

        class Handler:
            async def handle_DATA(self, server, session, envelope):
                await asyncio.sleep(seconds)
                with relay.lock:
                    relay.received.append((time.monotonic(), list(envelope.rcpt_tos)))
                return "250 Message accepted"

        self.port = free_port()
        self.controller = Controller(Handler(), hostname=HOST, port=self.port)
        self.controller.start()

    def to(self, address):
        with self.lock:
            return [at for at, recipients in self.received if address in recipients]

    def count(self):
        with self.lock:
            return len(self.received)

    def count_before(self, moment):
        with self.lock:
            return sum(1 for at, _ in self.received if at < moment)

    def stop(self):
        self.controller.stop()


def case_mail_cannon(new_stack, work, quick):
    """One key tries to use Flare as a mail cannon (trust, second round, 1): ten contacts with one stranger's address,
    named by ten shares, get one mail a share; its mail beyond its hourly budget is not sent, and the link says so; and
    with its backlog of hundreds of mails queued at a relay taking 50 ms a mail, another key's missed check-in is
    mailed within 5 s of its deadline."""
    shares_of_twenty = 10 if quick else 30
    budget = 10 + 20 * (shares_of_twenty - 1)  # the last share of twenty is over it
    relay = SlowRelay(0.05)
    stack = None
    try:
        stack = new_stack(work, env={"FLARE_SMTP_URL": f"smtp://{HOST}:{relay.port}", "FLARE_SMTP_FROM": "flare@example.org",
                                             "FLARE_MAIL_PER_KEY_PER_HOUR": str(budget)})

        def call(method, path, key, body=None):
            status, _, answer = stack.request(method, path, json.dumps(body) if body is not None else None,
                                              {"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
            return status, json.loads(answer) if answer else None

        def new_key(label):
            status, made = call("POST", "/api/v1/keys", stack.owner_key, {"label": label})
            assert status == 201, (status, made)
            return made["key"]

        def contact(key, name, email):
            status, made = call("POST", "/api/v1/contacts", key, {"name": name, "email": email})
            assert status == 201, (status, made)
            return made["id"]

        cannon, family = new_key("cannon"), new_key("family")
        victims = [contact(cannon, f"Account locked - call {n}", "victim@example.org") for n in range(10)]
        others = [contact(cannon, f"C{n}", f"c{n}@example.org") for n in range(20)]
        answers = []
        for _ in range(10):
            status, created = call("POST", "/api/v1/shares", cannon, {"duration_s": 600, "contacts": victims})
            assert status == 201, (status, created)
            answers += created["links"]
        for _ in range(shares_of_twenty):
            status, created = call("POST", "/api/v1/shares", cannon, {"duration_s": 600, "contacts": others})
            assert status == 201, (status, created)
            answers += created["links"]
        queued = sum(1 for link in answers if link.get("mailed") is True)
        same_address = sum(1 for link in answers if link.get("reason") == "same_address")
        over_budget = sum(1 for link in answers if link.get("reason") == "mail_budget")
        assert queued == budget and same_address == 90 and over_budget == 20, (queued, same_address, over_budget)

        # The backlog is at the relay now; the family's key arms a check-in due in two seconds and misses it.
        mum = contact(family, "Mum", "mum@example.org")
        status, armed = call("POST", "/api/v1/checkins", family, {"in_s": 2, "grace_s": 0, "contacts": [mum]})
        assert status == 201, (status, armed)
        due = time.monotonic() + 2
        wait_until(lambda: relay.to("mum@example.org"), 20, "the missed check-in's mail")
        mum_at = relay.to("mum@example.org")[0]
        late = mum_at - due
        backlog_left = budget - relay.count_before(mum_at)
        assert late < 5, f"the other key's mail came {late:.1f} s after its deadline"
        # Over-budget links were never queued: once the budget's mails are out, that is all there is.
        wait_until(lambda: relay.count() >= budget + 1, 10 + budget * 0.1, "the cannon's budget of mails sent")
        assert relay.count() == budget + 1, f"{relay.count()} mails went out, the budget is {budget} and one for Mum"
        assert len(relay.to("victim@example.org")) == 10, "one mail a share to the stranger"
        assert stack.metric('flare_mail_refused_total{reason="mail_budget"}') == 20
        return (f"ten contacts with one address on ten shares: 10 mails, not 100; {over_budget} links over the key's budget of {budget} "
                f"made and not mailed; another key's missed check-in mailed {late:.1f} s after its deadline with "
                f"{backlog_left} of the cannon's mails still queued at 50 ms each"), {"late_s": round(late, 2), "backlog_left": backlog_left}
    finally:
        if stack:
            stack.stop()
        relay.stop()


def case_clear_on_e2e(new_stack, work, quick):
    """A position in clear published, retained, to an end-to-end encrypted share (trust, second round, 2): refused,
    never stored, and gone from the broker's retained store at once; the share's OwnTracks configuration is refused
    (409 e2e_needs_key) in every form a phone could load."""
    make_admin_account(work)
    stack = new_stack(work)
    watcher = None
    try:
        status, _, body = stack.request("POST", "/api/v1/shares", json.dumps({"duration_s": 600, "e2e": True}),
                                        {"Authorization": f"Bearer {stack.owner_key}", "Content-Type": "application/json"})
        assert status == 201, (status, body[:200])
        share = json.loads(body)
        location = f"flare/v1/shares/{share['share_id']}/location"
        # An integrator's view of the topic, with the broker's own times: when the clear position went out, and when it
        # was replaced (a zero-length retained message).
        # Its first line is the share's retained status: from then on it is subscribed.
        watcher = subprocess.Popen(["mosquitto_sub", "-h", HOST, "-p", str(stack.mqtt_port), "-u", "admin", "-P", admin_password(stack),
                                    "-i", f"chaos-admin-{secrets.token_hex(4)}", "-t", f"flare/v1/shares/{share['share_id']}/status",
                                    "-t", location, "-F", "%U %l", "-C", "3", "-W", "20"], stdout=subprocess.PIPE, text=True)
        assert watcher.stdout.readline().strip(), "the watcher did not get the share's status"
        clear = json.dumps({"_type": "location", "lat": 47.3769, "lon": 8.5417, "tst": int(time.time())})
        result = subprocess.run(["mosquitto_pub", "-h", HOST, "-p", str(stack.mqtt_port), "-V", "mqttv5", "-u", share["share_id"],
                                 "-P", share["device_token"], "-i", f"flare-{share['share_id']}-phone", "-t", location, "-q", "1", "-r",
                                 "-m", clear], capture_output=True, text=True, timeout=20)
        assert result.returncode == 0, result.stderr
        wait_until(lambda: stack.metric("flare_e2e_clear_positions_cleared_total") == 1, 10, "the clear position refused")
        seen = (watcher.stdout.readline() + watcher.stdout.readline()).split()
        watcher.wait(timeout=20)
        assert len(seen) == 4 and int(seen[1]) > 0 and seen[3] == "0", f"the watcher saw {seen}"
        gone = float(seen[2]) - float(seen[0])
        assert gone < 1, f"the clear position stayed {gone:.2f} s"
        assert retained_below(stack, location) == {}, "something is still retained on the location topic"
        stored = stack.rows(f"SELECT count(*) FROM fixes WHERE share = (SELECT id FROM shares WHERE share_id = '{share['share_id']}')")[0][0]
        assert stored == 0, f"{stored} clear fixes stored"
        refused = []
        for path in ("owntracks", "owntracks.otrc", "owntracks/link", "owntracks/qr.png"):
            status, _, body = stack.request("GET", f"/api/v1/shares/{share['share_id']}/{path}", headers={"Authorization": f"Bearer {stack.owner_key}"})
            assert status == 409 and json.loads(body)["error"] == "e2e_needs_key", (path, status, body[:200])
            refused.append(path)
        return (f"a retained clear position on an e2e share: refused, not stored, replaced on the broker {gone * 1000:.0f} ms after "
                f"the broker handed it out; {len(refused)} OwnTracks configuration forms answered 409 e2e_needs_key"), {"gone_ms": round(gone * 1000)}
    finally:
        stop_processes(watcher)
        stack.stop()


def case_flared_mark(new_stack, work, quick):
    """A phone publishes a far-future position, retained, with flared's own mark `flare-origin: flared` (trust, second
    round, 4): the broker disconnects it before acknowledging, nothing of it is retained or stored, and flared's own
    retained position stands."""
    make_admin_account(work)
    stack = new_stack(work)
    try:
        share = stack.create_share()
        location = f"flare/v1/shares/{share['share_id']}/location"
        status, _, body = stack.request("POST", f"/api/v1/shares/{share['share_id']}/locations",
                                        json.dumps({"lat": 48.1, "lon": 11.5, "tst": int(time.time()) - 5}),
                                        {"Authorization": f"Bearer {share['device_token']}", "Content-Type": "application/json"})
        assert status == 202, (status, body[:200])
        wait_until(lambda: len(retained_below(stack, location)) == 1, 10, "flared's own position retained")
        before = retained_below(stack, location)
        forged = json.dumps({"_type": "location", "lat": 10.5, "lon": 10.5, "tst": int(time.time()) + 365 * 86400})
        result = subprocess.run(["mosquitto_pub", "-h", HOST, "-p", str(stack.mqtt_port), "-V", "mqttv5", "-u", share["share_id"],
                                 "-P", share["device_token"], "-i", f"flare-{share['share_id']}-forger", "-t", location, "-q", "1", "-r",
                                 "-D", "publish", "user-property", "flare-origin", "flared", "-m", forged],
                                capture_output=True, text=True, timeout=20)
        with open(os.path.join(work, "broker.log")) as f:
            logged = f"{share['share_id']} published with flared's mark" in f.read()
        assert logged, "the broker did not refuse the mark"
        after = retained_below(stack, location)
        assert after == before, f"the retained position changed: {before} -> {after}"
        stored = stack.rows(f"SELECT count(*) FROM fixes WHERE share = (SELECT id FROM shares WHERE share_id = '{share['share_id']}') AND lat = 10.5")[0][0]
        assert stored == 0, "the forged position was stored"
        return (f"a phone's publish carrying flared's mark: disconnected before its PUBACK (mosquitto_pub exit {result.returncode}), "
                "nothing of it retained or stored, flared's position kept"), {}
    finally:
        stack.stop()


CASES = [("attack: client id takeover", case_session_takeover), ("attack: retained junk", case_retained_junk),
         ("attack: fix flood", case_fix_flood), ("attack: public surface", case_public_surface),
         ("attack: token key rotation", case_key_rotation), ("attack: mail cannon", case_mail_cannon),
         ("attack: clear position on an e2e share", case_clear_on_e2e), ("attack: flared's mark", case_flared_mark)]
