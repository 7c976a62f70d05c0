"""docs/asyncapi.yaml, Flare's MQTT contract, held against the AsyncAPI 3.0.0 JSON Schema and against what a running
flared and `flare track` publish (`make scripts-test`; about 10 s).

- The document validates against the official AsyncAPI 3.0.0 JSON Schema (Tests/scripts/asyncapi/, where it came
  from is in its README) with jsonschema, offline, and a broken copy does not; every example in it matches its
  message's schemas.
- scripts/run.sh as `make run` starts it (flared, mosquitto with the auth plugin, the demo share and its `flare
  track`), mailing through a real SMTP server on loopback, with the history purged at a share's end and the tracker
  stale after 3 s, so that every message is made within seconds. Two recorders (paho-mqtt, MQTT 5, QoS 2, retain as
  published, so each message arrives with the QoS and retain flag it was published with): a watch token of the main
  share, as an integrator reads it, and flared's service account, the only kind that may read `flare/v1/epoch` and
  the one that hears a share's first event before any watch token of it exists (it reads every share).
- The main share: `flare track` publishes numbered fixes (Flare answers on `…/stored`); a personal link is made and
  mailed; both links are opened (audience, `share.opened`, `link.opened`); two answers; `flare track` is killed, so
  the broker sends its last will; "locate now"; a fix over HTTP with a low battery (flared publishes it itself);
  extend; stop (quiet mode, `share.ended`, the ended status, the position and then the history cleared). Beside it
  an end-to-end encrypted share (`flare track --e2e`, a sealed fix over HTTP), three check-ins (missed and escalated,
  done, arrived) and two SOS devices (pressed twice, five wrong PINs, the duress PIN).
- Every message: its topic is exactly one channel of the document, its payload (and its MQTT 5 user properties as
  headers) matches exactly one of that channel's messages, and its QoS, retain flag and message expiry are those of
  the operation that declares that message. Every channel, message and event type of the document was seen, except
  those in NOT_PRODUCED, each with its reason.
- Each token's subscriptions are granted exactly as its security scheme's `x-flare-subscribe` says, what it publishes
  beyond its `x-flare-publish` is acknowledged and dropped, and the broker takes exactly the client ids the scheme's
  `x-flare-client-id` rule allows.

Uses the built binaries in .build/debug and .build/broker (run `make build plugin` first).
"""

from __future__ import annotations

import base64
import copy
import json
import os
import re
import secrets
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

import jsonschema
import paho.mqtt.client as mqtt
import pytest
import yaml
from paho.mqtt.subscribeoptions import SubscribeOptions

from scripts.flarestack import HOST, ROOT, MailCatcher, free_span, request, wait_until

from runsh import Instance

DOCUMENT = os.path.join(ROOT, "docs", "asyncapi.yaml")
ASYNCAPI_SCHEMA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "asyncapi", "asyncapi-3.0.0.json")
FLARE = os.path.join(ROOT, ".build", "debug", "flare")

# What the document declares and this test does not make flared publish, and why. Keys: "<channel>/<message>", or
# "event <type>" for one type of the events channel's oneOf.
NOT_PRODUCED = {
    "event contact.notification_failed": "needs an SMTP server that refuses a mail for good (5xx) or a contact deleted between its link "
                                         "and its mail: the test's SMTP server (MailCatcher) takes every mail, and the deletion is a race",
}


def load_document() -> dict[str, Any]:
    with open(DOCUMENT) as f:
        return yaml.safe_load(f)


def asyncapi_validator() -> jsonschema.Draft7Validator:
    """The AsyncAPI 3.0.0 JSON Schema; every $ref in it is to a definition it bundles (keyed by its $id)."""
    with open(ASYNCAPI_SCHEMA) as f:
        schema = json.load(f)
    assert schema["$schema"].startswith("http://json-schema.org/draft-07/schema"), schema["$schema"]
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


class Contract:
    """The document as the test reads it: channels by topic, their messages, the operations that declare each."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc
        self.validators: dict[str, jsonschema.Draft7Validator] = {}
        # What each message received is (by its object's id), so that polling does not validate it again.
        self.verdicts: dict[int, tuple[set[str], str | None]] = {}
        share_id = doc["components"]["parameters"]["shareId"]["x-flare-pattern"]
        self.share_id = re.compile(share_id)
        self.channels: dict[str, re.Pattern[str]] = {}
        for name, channel in doc["channels"].items():
            address = re.escape(channel["address"]).replace(re.escape("{shareId}"), f"(?P<shareId>{share_id})")
            self.channels[name] = re.compile(address)

    def at(self, pointer: str) -> Any:
        assert pointer.startswith("#/"), pointer
        node: Any = self.doc
        for part in pointer[2:].split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]
        return node

    def resolve(self, node: Any) -> Any:
        while isinstance(node, dict) and "$ref" in node:
            node = self.at(node["$ref"])
        return node

    def validator(self, pointer: str) -> jsonschema.Draft7Validator:
        """A validator of the schema at `pointer`, whose $refs resolve in the document: the document itself as the root
        schema, with a $ref to the pointer (a $ref's siblings do not count in draft-07)."""
        if pointer not in self.validators:
            self.validators[pointer] = jsonschema.Draft7Validator(dict(self.doc, **{"$ref": pointer}))
        return self.validators[pointer]

    def errors(self, pointer: str, instance: Any) -> list[str]:
        return [f"{'/'.join(str(p) for p in e.absolute_path) or '(top)'}: {e.message[:200]}" for e in self.validator(pointer).iter_errors(instance)]

    def message_pointer(self, channel: str, message: str) -> str:
        """The pointer of the message object a channel's message names (following its $ref)."""
        node = self.doc["channels"][channel]["messages"][message]
        return node["$ref"] if "$ref" in node else f"#/channels/{channel}/messages/{message}"

    def match(self, channel: str, payload: Any, headers: dict[str, str]) -> tuple[list[str], dict[str, list[str]]]:
        """The channel's messages whose payload (and headers) schema the message matches, and why each other did not."""
        matched: list[str] = []
        why: dict[str, list[str]] = {}
        for name in self.doc["channels"][channel]["messages"]:
            pointer = self.message_pointer(channel, name)
            message = self.at(pointer)
            errors = self.errors(pointer + "/payload", payload)
            if "headers" in message:
                errors += [f"headers {e}" for e in self.errors(pointer + "/headers", headers)]
            if errors:
                why[name] = errors
            else:
                matched.append(name)
        return matched, why

    def operations_of(self, channel: str, message: str) -> list[tuple[str, dict[str, Any]]]:
        ref = f"#/channels/{channel}/messages/{message}"
        return [(name, op) for name, op in self.doc["operations"].items()
                if op["channel"]["$ref"] == f"#/channels/{channel}" and any(m["$ref"] == ref for m in op.get("messages", []))]

    def scheme(self, name: str) -> dict[str, Any]:
        return self.doc["components"]["securitySchemes"][name]

    def client_id_rule(self, scheme: str, share_id: str) -> re.Pattern[str]:
        return re.compile(self.scheme(scheme)["x-flare-client-id"].replace("{shareId}", re.escape(share_id)))

    def topic(self, channel: str, share_id: str) -> str:
        return self.doc["channels"][channel]["address"].replace("{shareId}", share_id)


# --- MQTT --------------------------------------------------------------------------------------------------------


@dataclass
class Received:
    recorder: str
    topic: str
    qos: int
    retain: bool
    payload: bytes
    user_properties: dict[str, str]
    expiry: int | None


def paho_client(client_id: str) -> mqtt.Client:
    extra: dict[str, Any] = {}
    if hasattr(mqtt, "CallbackAPIVersion"):  # paho-mqtt 2 (Debian 12 has 1.6, whose callbacks these are)
        extra["callback_api_version"] = mqtt.CallbackAPIVersion.VERSION1
    return mqtt.Client(client_id=client_id, protocol=mqtt.MQTTv5, **extra)


class Recorder:
    """One MQTT 5 client that keeps everything it receives, with the flags it arrived with."""

    def __init__(self, name: str, port: int, client_id: str, username: str, password: str) -> None:
        self.name = name
        self.lock = threading.Lock()
        self.messages: list[Received] = []
        self.connack: list[int] = []
        self.subacks: dict[int, list[int]] = {}
        self.client = paho_client(client_id)
        self.client.username_pw_set(username, password)
        # A client the broker refused or cut off tries again soon, and stops without waiting out a long delay.
        self.client.reconnect_delay_set(min_delay=0.1, max_delay=2)
        self.client.on_connect = self._on_connect
        self.client.on_message = self._on_message
        self.client.on_subscribe = self._on_subscribe
        self.client.connect(HOST, port)
        self.client.loop_start()

    def _on_connect(self, client: mqtt.Client, userdata: Any, flags: Any, rc: Any, properties: Any = None) -> None:
        with self.lock:
            self.connack.append(rc.value if hasattr(rc, "value") else int(rc))

    def _on_message(self, client: mqtt.Client, userdata: Any, msg: mqtt.MQTTMessage) -> None:
        props = msg.properties
        received = Received(self.name, msg.topic, msg.qos, bool(msg.retain), bytes(msg.payload),
                            dict(getattr(props, "UserProperty", []) or []), getattr(props, "MessageExpiryInterval", None))
        with self.lock:
            self.messages.append(received)

    def _on_subscribe(self, client: mqtt.Client, userdata: Any, mid: int, codes: Any, properties: Any = None) -> None:
        with self.lock:
            self.subacks[mid] = [c.value if hasattr(c, "value") else int(c) for c in codes]

    def connected(self) -> int:
        """The first CONNACK's reason code (0: accepted), once it came."""
        wait_until(lambda: self.connack, 10, f"{self.name}: CONNACK")
        return self.connack[0]

    def subscribe(self, filters: list[str]) -> list[int]:
        """Reason codes of the SUBACK, one per filter (granted QoS, or 128 and above: refused)."""
        assert self.connected() == 0, f"{self.name}: connection refused ({self.connack})"
        result, mid = self.client.subscribe([(f, SubscribeOptions(qos=2, retainAsPublished=True)) for f in filters])
        assert result == mqtt.MQTT_ERR_SUCCESS, result
        return wait_until(lambda: self.subacks.get(mid), 10, f"{self.name}: SUBACK for {filters}")

    def seen(self, match: Callable[[Received], bool] = lambda m: True) -> list[Received]:
        with self.lock:
            return [m for m in self.messages if match(m)]

    def wait_for(self, match: Callable[[Received], bool], what: str, count: int = 1, seconds: float = 15) -> list[Received]:
        return wait_until(lambda: (found := self.seen(match)) and len(found) >= count and found, seconds, f"{self.name}: {what}")

    def stop(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def payload_of(message: Received) -> Any:
    return json.loads(message.payload) if message.payload else None


def on(share_id: str, channel: str) -> Callable[[Received], bool]:
    suffix = {"location": "/location", "locationCommand": "/location/cmd"}.get(channel, "/" + channel)
    return lambda m: m.topic == f"flare/v1/shares/{share_id}{suffix}"


def event(share_id: str, kind: str) -> Callable[[Received], bool]:
    return lambda m: on(share_id, "events")(m) and json.loads(m.payload).get("type") == kind


# --- Flare over HTTP ---------------------------------------------------------------------------------------------


class Api:
    def __init__(self, instance: Instance) -> None:
        self.port = instance.http_port
        with open(os.path.join(instance.data_dir, "owner.key")) as f:
            self.owner_key = f.read().strip()

    def call(self, method: str, path: str, body: Any = None, bearer: str | None = None, expect: int | tuple[int, ...] = (200, 201, 202)) -> Any:
        headers = {"Content-Type": "application/json"}
        if bearer != "":
            headers["Authorization"] = f"Bearer {bearer or self.owner_key}"
        status, _, answer = request(self.port, method, path, json.dumps(body) if body is not None else None, headers)
        expected = (expect,) if isinstance(expect, int) else expect
        assert status in expected, f"{method} {path}: {status} {answer[:300]!r}"
        return json.loads(answer) if answer.strip() else None

    def view_token(self, url: str) -> str:
        return url.rsplit("/s/", 1)[1]


def fix(lat: float, lon: float, **fields: Any) -> dict[str, Any]:
    return dict({"_type": "location", "lat": lat, "lon": lon, "tst": int(time.time())}, **fields)


# --- The tests ---------------------------------------------------------------------------------------------------


def test_the_document_is_asyncapi_3_and_its_examples_match_its_schemas() -> None:
    doc = load_document()
    validator = asyncapi_validator()
    errors = [f"{'/'.join(str(p) for p in e.absolute_path)}: {e.message[:300]}" for e in validator.iter_errors(doc)]
    assert not errors, "docs/asyncapi.yaml is not a valid AsyncAPI 3.0.0 document:\n" + "\n".join(errors[:20])

    # The validator sees what is wrong: an AsyncAPI 2 action, a QoS MQTT has not, a payload schema that is no schema.
    for change in (lambda d: d["operations"]["sendEvent"].update(action="publish"),
                   lambda d: d["operations"]["sendEvent"]["bindings"]["mqtt"].update(qos=3),
                   lambda d: d["components"]["schemas"]["storedMark"].update(type=5)):
        broken = copy.deepcopy(doc)
        change(broken)
        assert not validator.is_valid(broken), "a broken document passed"

    contract = Contract(doc)
    examples = 0
    for name, message in doc["components"]["messages"].items():
        pointer = f"#/components/messages/{name}"
        for example in message.get("examples", []):
            examples += 1
            assert not contract.errors(pointer + "/payload", example["payload"]), (name, example)
            if "headers" in message:
                assert not contract.errors(pointer + "/headers", example.get("headers", {})), (name, example)
    assert examples >= 10, examples
    # Every reference resolves, and every operation's messages are its channel's.
    for name, op in doc["operations"].items():
        channel = op["channel"]["$ref"].rsplit("/", 1)[1]
        assert channel in doc["channels"], name
        for ref in op.get("messages", []):
            assert ref["$ref"].startswith(f"#/channels/{channel}/messages/"), (name, ref)
            contract.at(ref["$ref"])
    for channel, node in doc["channels"].items():
        for message in node["messages"]:
            assert contract.operations_of(channel, message), f"no operation sends or receives {channel}/{message}"


@pytest.mark.bounded(45)
def test_everything_flared_and_flare_track_publish_matches_the_document(built: None, work: str, started: list[Instance],
                                                                        mail: MailCatcher) -> None:
    contract = Contract(load_document())
    instance = Instance(work, "run", free_span(2), extra_env=dict(mail.env(), FLARE_HISTORY_RETENTION_S="0", FLARE_STALE_AFTER_S="3"))
    started.append(instance)
    instance.wait_until_running()
    api = Api(instance)
    port = instance.mqtt_port
    recorders: list[Recorder] = []
    trackers: list[subprocess.Popen[bytes]] = []
    track_log = open(os.path.join(work, "track.log"), "w+b")
    try:
        with open(os.path.join(instance.data_dir, "broker", "flared.password")) as f:
            service = Recorder("service account", port, f"asyncapi-{secrets.token_hex(4)}", "flared", f.read().strip())
        recorders.append(service)
        assert service.subscribe(["flare/v1/shares/+/#", "flare/v1/epoch"]) == [2, 2]

        mum = api.call("POST", "/api/v1/contacts", {"name": "Mum", "email": "mum@example.org"})["id"]
        # A check-in missed at once, its ladder's first step 5 s later (nobody answers).
        missed = api.call("POST", "/api/v1/checkins", {"in_s": 1, "grace_s": 0, "contacts": [mum], "escalate_after_s": 5,
                                                         "duration_s": 600, "name": "Cleo"})

        # The main share, its watch token, and what each token may do.
        share = api.call("POST", "/api/v1/shares", {"duration_s": 900, "name": "Anna"})
        sid = share["share_id"]
        watch = api.call("POST", f"/api/v1/shares/{sid}/watch-tokens")
        assert watch["topic_filter"] == f"flare/v1/shares/{sid}/#" and watch["mqtt_client_id_prefix"] == f"flare-{sid}-watch-", watch
        watcher_id = watch["mqtt_client_id_prefix"] + "asyncapi"
        assert contract.client_id_rule("watchToken", sid).fullmatch(watcher_id)
        watcher = Recorder("watch token", port, watcher_id, sid, watch["watch_token"])
        recorders.append(watcher)
        assert watcher.subscribe([watch["topic_filter"]]) == [2]
        watcher.wait_for(on(sid, "status"), "the retained status")
        check_token_rights(contract, port, sid, {"deviceToken": share["device_token"], "watchToken": watch["watch_token"]})

        share_file = os.path.join(work, "anna.json")
        with open(share_file, "w") as f:
            json.dump(share, f)
        tracker = subprocess.Popen([FLARE, "track", "--share-file", share_file, "--interval", "0.5", "--quiet", "--status-every", "0"],
                                   stdout=track_log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        trackers.append(tracker)

        # An end-to-end encrypted share: `flare track --e2e` seals its fixes; a sealed fix over HTTP.
        e2e = api.call("POST", "/api/v1/shares", {"duration_s": 600, "name": "Eve", "e2e": True})
        e2e_file = os.path.join(work, "eve.json")
        with open(e2e_file, "w") as f:
            json.dump(e2e, f)
        sealed_track = subprocess.Popen([FLARE, "track", "--share-file", e2e_file, "--e2e", "--e2e-key", secrets.token_urlsafe(24),
                                         "--count", "2", "--interval", "0.2", "--quiet", "--status-every", "0", "--confirm-timeout", "20"],
                                        stdout=track_log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        trackers.append(sealed_track)

        # Check-ins: one done, one ended by a fix inside its zone.
        done = api.call("POST", "/api/v1/checkins", {"in_s": 600, "contacts": [mum], "name": "Dora"})
        api.call("POST", f"/api/v1/checkins/{done['checkin_id']}/done")
        arriving = api.call("POST", "/api/v1/checkins", {"in_s": 600, "contacts": [mum], "name": "Finn", "arrive": {"lat": 48.2, "lon": 11.6, "radius_m": 500}})
        # (a second ahead: only fixes made since arming count, and `tst` is in whole seconds)
        api.call("POST", f"/api/v1/shares/{arriving['share_id']}/locations", fix(48.2, 11.6, acc=10, tst=int(time.time()) + 1),
                 bearer=arriving["device_token"])

        # SOS devices: pressed twice; five wrong PINs; the duress PIN.
        ben = api.call("POST", "/api/v1/devices", {"name": "Ben", "contacts": [mum], "pin": "4711"})
        dana = api.call("POST", "/api/v1/devices", {"name": "Dana", "contacts": [mum], "pin": "4711", "duress_pin": "9999"})
        for device in (ben, ben, dana):
            api.call("POST", "/api/v1/devices/sos", {}, bearer=device["secret"])
        for _ in range(5):
            api.call("POST", "/api/v1/devices/sos/stop", {"pin": "0000"}, bearer=ben["secret"], expect=403)
        api.call("POST", "/api/v1/devices/sos/stop", {"pin": "9999"}, bearer=dana["secret"])

        # The main share's story.
        watcher.wait_for(lambda m: on(sid, "location")(m) and b'"seq"' in m.payload, "flare track's fixes", count=3)
        watcher.wait_for(on(sid, "stored"), "the stored mark")
        links = api.call("POST", f"/api/v1/shares/{sid}/links", {"contacts": [mum]})["links"]
        general, personal = api.view_token(share["share_url"]), api.view_token(links[0]["url"])
        api.call("GET", f"/api/v1/view/{general}?v={secrets.token_urlsafe(16)}", bearer="")
        api.call("GET", f"/api/v1/view/{personal}?v={secrets.token_urlsafe(16)}", bearer="")
        watcher.wait_for(lambda m: on(sid, "audience")(m) and b'"links"' in m.payload, "the audience with the personal link")
        api.call("POST", f"/api/v1/view/{general}/answers", {"kind": "on_my_way", "name": "Mum"}, bearer="")
        api.call("POST", f"/api/v1/view/{personal}/answers", {"kind": "called_emergency"}, bearer="")
        watcher.wait_for(on(sid, "answers"), "the answers", count=2)

        tracker.send_signal(signal.SIGKILL)  # no DISCONNECT: the broker sends the last will
        tracker.wait(timeout=10)
        watcher.wait_for(event(sid, "tracker.offline"), "tracker.offline after the last will")
        # "Locate now" while the tracker is offline (409 only while it is live: a fix still on its way could make it so).
        wait_until(lambda: request(api.port, "POST", f"/api/v1/view/{general}/locate", "", {})[0] == 202, 10, "locate answered 202")
        watcher.wait_for(on(sid, "locationCommand"), "the reportLocation command")
        api.call("POST", f"/api/v1/shares/{sid}/locations", fix(48.1372, 11.5755, acc=5, batt=10, bs=1), bearer=share["device_token"])
        watcher.wait_for(event(sid, "tracker.battery_low"), "tracker.battery_low")
        api.call("POST", f"/api/v1/shares/{sid}/extend", {"duration_s": 1200})
        watcher.wait_for(event(sid, "share.extended"), "share.extended")
        api.call("POST", f"/api/v1/shares/{sid}/stop")
        # Read on the service account: the watch token is revoked right after flared published the ended status, the
        # quiet-mode command and `share.ended` on the same connection, and the broker cuts it off before it has
        # written all of them to it (docs/events.md promises it `share.ended`; it gets it about one stop in two).
        service.wait_for(event(sid, "share.ended"), "share.ended")
        service.wait_for(lambda m: on(sid, "status")(m) and m.payload == b"", "the status cleared with the history")

        assert sealed_track.wait(timeout=20) == 0, "flare track --e2e did not finish"
        eid = e2e["share_id"]
        sealed = base64.b64encode(secrets.token_bytes(80)).decode()
        api.call("POST", f"/api/v1/shares/{eid}/locations", {"_type": "encrypted", "data": sealed}, bearer=e2e["device_token"])
        service.wait_for(lambda m: on(eid, "location")(m) and "flare-origin" in m.user_properties, "the sealed HTTP fix")

        # Everything the document declares has come (the ladder's first step last, about 7 s after the check-in).
        def missing() -> list[str]:
            seen = coverage(contract, [m for r in recorders for m in r.seen()])[0]
            return sorted(set(expected_kinds(contract)) - seen - set(NOT_PRODUCED))

        wait_until(lambda: not missing(), 20, lambda: f"messages of the document never published: {missing()}", interval=0.25)
        service.wait_for(lambda m: on(missed["share_id"], "events")(m) and b"sos.escalated" in m.payload, "the missed check-in's ladder")
    finally:
        for process in trackers:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=10)
        for recorder in recorders:
            recorder.stop()
        track_log.seek(0)
        print("--- flare track's output ---\n" + track_log.read().decode(errors="replace"))  # shown when the test fails
        track_log.close()

    messages = [m for r in recorders for m in r.seen()]
    seen, failures = coverage(contract, messages)
    assert not failures, f"{len(failures)} of {len(messages)} messages do not match the document:\n" + "\n".join(failures[:25])
    for kind, reason in NOT_PRODUCED.items():
        assert kind in expected_kinds(contract), f"NOT_PRODUCED names {kind}, which the document does not declare"
        assert kind not in seen, f"{kind} was published after all: take it off NOT_PRODUCED ({reason})"
    # The watch token read its own share only.
    assert all(m.topic.startswith(f"flare/v1/shares/{sid}/") for m in watcher.seen())
    assert len(watcher.seen()) >= 20, len(watcher.seen())
    told = [kind for kind, match in (("the ended status", lambda m: on(sid, "status")(m) and b'"ended"' in m.payload),
                                     ("quiet mode", on(sid, "locationCommand")), ("share.ended", event(sid, "share.ended")))
            if watcher.seen(match)]
    print(f"the watch token was told of the stop: {told or 'nothing'}")
    print(f"{len(messages)} messages checked ({len(watcher.seen())} by the watch token); kinds seen: {len(seen)}")


def expected_kinds(contract: Contract) -> list[str]:
    """Every "<channel>/<message>" of the document, and "event <type>" for each event type."""
    kinds = [f"{channel}/{message}" for channel, node in contract.doc["channels"].items() for message in node["messages"]]
    kinds += [f"event {kind}" for kind in contract.doc["components"]["schemas"]["eventType"]["enum"]]
    return kinds


def coverage(contract: Contract, messages: list[Received]) -> tuple[set[str], list[str]]:
    """What kinds the messages are, and every way one of them does not match the document."""
    seen: set[str] = set()
    failures: list[str] = []
    for m in messages:
        if id(m) not in contract.verdicts:
            contract.verdicts[id(m)] = verdict(contract, m)
        kinds, failure = contract.verdicts[id(m)]
        seen.update(kinds)
        if failure:
            failures.append(failure)
    return seen, failures


def verdict(contract: Contract, m: Received) -> tuple[set[str], str | None]:
    """The kinds one message is ("<channel>/<message>", "event <type>"), and how it does not match the document."""
    where = f"[{m.recorder}] {m.topic} qos {m.qos} retain {int(m.retain)} {m.payload[:160]!r}"
    channels = [name for name, address in contract.channels.items() if address.fullmatch(m.topic)]
    if len(channels) != 1:
        return set(), f"{where}: the topic is {'no' if not channels else 'more than one'} channel of the document {channels}"
    channel = channels[0]
    try:
        payload = json.loads(m.payload) if m.payload else ""  # a zero-length payload: the `cleared` message
    except ValueError:
        return set(), f"{where}: not JSON"
    matched, why = contract.match(channel, payload, m.user_properties)
    if len(matched) != 1:
        return set(), f"{where} headers {m.user_properties}: matches {matched or 'none'} of the channel's messages; {why}"
    message = matched[0]
    kinds = {f"{channel}/{message}"} | ({f"event {payload['type']}"} if channel == "events" else set())
    problems = []
    for name, op in contract.operations_of(channel, message):
        binding = op["bindings"]["mqtt"]
        wrong = []
        if m.qos != binding["qos"]:
            wrong.append(f"QoS {m.qos}, declared {binding['qos']}")
        if m.retain != binding["retain"]:
            wrong.append(f"retain {m.retain}, declared {binding['retain']}")
        expiry = binding.get("messageExpiryInterval")
        if isinstance(expiry, int) and not (m.expiry is not None and 0 < m.expiry <= expiry):
            wrong.append(f"message expiry {m.expiry}, declared {expiry}")
        if isinstance(expiry, dict) and (m.expiry is None or contract.errors(f"#/operations/{name}/bindings/mqtt/messageExpiryInterval", m.expiry)):
            wrong.append(f"message expiry {m.expiry}, declared {expiry}")
        if not wrong:
            return kinds, None
        problems.append(f"{name}: {', '.join(wrong)}")
    return kinds, f"{where}: {channel}/{message} arrived unlike every operation that declares it: {problems}"


def check_token_rights(contract: Contract, port: int, share_id: str, tokens: dict[str, str]) -> None:
    """Each token kind's SUBACKs are its scheme's `x-flare-subscribe`, the broker takes the client ids its
    `x-flare-client-id` allows and no other (a few of each form), and what it publishes beyond its `x-flare-publish` is
    acknowledged."""
    channels = list(contract.doc["channels"])
    for scheme, token in tokens.items():
        rule = contract.client_id_rule(scheme, share_id)
        taken: list[str] = []
        # (not the recorders' own ids: a client that connects with an id takes that session over)
        for suffix in ("", "-probe", "-watch-probe", "-watch-", "-track-x/y"):
            client_id = f"flare-{share_id}{suffix}"
            probe = Recorder(f"{scheme} as {client_id}", port, client_id, share_id, token)
            try:
                accepted = probe.connected() == 0
                assert accepted == bool(rule.fullmatch(client_id)), f"the broker {'took' if accepted else 'refused'} {scheme} with client id {client_id}"
                if not accepted:
                    continue
                taken.append(client_id)
                codes = probe.subscribe([contract.topic(c, share_id) for c in channels])
                granted = {c for c, code in zip(channels, codes) if code < 128}
                declared = set(contract.scheme(scheme)["x-flare-subscribe"])
                assert granted == declared, f"{scheme} may subscribe to {sorted(granted)}; the document says {sorted(declared)}"
            finally:
                probe.stop()
        assert taken, f"{scheme}: no client id taken"
        # Where it may not publish, the broker acknowledges and drops: had one been taken, the recorders would have it,
        # and it matches no message of the document (the test fails on it). One connection each: mosquitto 2.0 closes
        # the connection after acknowledging a refused publish (which docs/security.md says it does not).
        for channel in channels:
            if channel in contract.scheme(scheme)["x-flare-publish"]:
                continue
            publisher = Recorder(f"{scheme} publishing on {channel}", port, taken[0], share_id, token)
            try:
                assert publisher.connected() == 0
                sent = publisher.client.publish(contract.topic(channel, share_id), json.dumps({"asyncapi-probe": scheme}), qos=1)
                sent.wait_for_publish(5)
                assert sent.is_published(), f"{scheme}: no PUBACK for a message on {channel}"
            finally:
                publisher.stop()
