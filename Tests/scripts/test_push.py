"""Web Push and the escalation ladder end to end, with real processes (`make scripts-test`; about 40 s in all).

scripts/run.sh as `make run` starts it, with push on (FLARE_VAPID_SUBJECT) and flared allowed to post to a push
service on loopback (FLARE_PUSH_ALLOW_LOOPBACK=1), which this test runs: scripts/flarestack/push.py, which checks
every request as a push service would (RFC 8030 headers, the VAPID token against GET /api/v1/push/key, its `aud` and
`exp`) and decrypts each message with http_ece (PyPI), an implementation independent of Flare's. The subscriptions
are made here as a browser makes them (a P-256 key pair and an auth secret of the test's own): headless Chromium
cannot reach a real push service, so the browser's side is tested apart (Tests/browser/test_push.py).

- a contact subscribed on their alerts page gets "Anna pressed SOS" with their own personal link, at once; a viewer
  of a link gets what happens next; no coordinate is in any payload;
- 410 once: the subscription is gone, and nothing more is sent to it; 503 with Retry-After, then 201: delivered once,
  no sooner than asked;
- the share's end reaches its viewers, and ends their subscriptions;
- the ladder: with escalate_after_s 5, nobody answering, every contact is alerted again by push and mail at 5 s and
  at 15 s; an answer "on my way" before then, and nothing comes.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from test_sos import Flare, links_in, run_logs, send, subject

from scripts.flarestack import HOST, MailCatcher, free_span
from scripts.flarestack.push import PushReceiver

from runsh import Instance


@pytest.fixture
def receiver() -> Iterator[PushReceiver]:
    with PushReceiver() as push:
        yield push


def push_flare(work: str, started: list[Instance], mail: MailCatcher) -> Flare:
    instance = Instance(work, "run", free_span(2), extra_env=dict(mail.env(), FLARE_VAPID_SUBJECT="mailto:ops@example.org",
                                                                  FLARE_PUSH_ALLOW_LOOPBACK="1"))
    started.append(instance)
    instance.wait_until_running()
    with open(f"{instance.data_dir}/owner.key") as f:
        owner_key = f.read().strip()
    return Flare(f"http://{HOST}:{instance.http_port}", owner_key, run_logs(instance))


def server_key(flare: Flare) -> str:
    status, _, body = send(f"{flare.base}/api/v1/push/key")
    assert status == 200, (status, body)
    key = json.loads(body)["public_key"]
    assert len(key) == 87, key  # 65 bytes, base64url without padding
    return key


def press(flare: Flare, device: dict[str, Any]) -> dict[str, Any]:
    status, _, body = send(f"{flare.base}/api/v1/devices/sos", "POST", b"{}",
                           {"Authorization": f"Bearer {device['secret']}", "Content-Type": "application/json"})
    assert status in (200, 201), (status, body)
    return json.loads(body)


def subscribe(flare: Flare, path: str, subscription: dict[str, Any], bearer: str | None = None, lang: str = "en") -> int:
    headers = {"Content-Type": "application/json"}
    if bearer:
        headers["Authorization"] = f"Bearer {bearer}"
    status, _, body = send(f"{flare.base}{path}", "POST", json.dumps(dict(subscription, lang=lang)).encode(), headers)
    assert status in (200, 201), (status, body)
    return status


def alerts_secret(flare: Flare, contact: str) -> str:
    status, answer = flare.call("GET", f"/api/v1/contacts/{contact}/alerts-link")
    assert status == 200, (status, answer)
    found = re.fullmatch(r"https?://[^/]+/alerts#c=([A-Za-z0-9_-]{32})", answer["url"])
    assert found, answer
    return found.group(1)


def no_position_in(payload: dict[str, Any]) -> None:
    text = json.dumps(payload)
    assert not re.search(r"\d+\.\d{3,}", text), f"a payload holds a number like a coordinate: {text}"


@pytest.mark.bounded(90)
def test_alerts_and_viewers_get_pushes_with_their_links_and_gone_subscriptions_end(built: None, work: str, started: list[Instance],
                                                                                   mail: MailCatcher, receiver: PushReceiver) -> None:
    flare = push_flare(work, started, mail)
    receiver.server_key = server_key(flare)
    mum = flare.contact("Mum", "mum@example.org")
    dad = flare.contact("Dad", "dad@example.org")
    anna = flare.device("Anna", [mum, dad], escalate_after_s=0)

    # Mum allows alerts before anything happens.
    secret = alerts_secret(flare, mum)
    flare.keep_out("Mum's alerts secret", secret)
    assert subscribe(flare, "/api/v1/alerts/push", receiver.subscription("mum"), bearer=secret) == 201
    assert subscribe(flare, "/api/v1/alerts/push", receiver.subscription("mum-2"), bearer=secret, lang="zh-CN") == 201

    started_at = time.monotonic()
    sos = press(flare, anna)
    first = receiver.wait_for("mum", 1)[0]
    assert first["payload"]["type"] == "sos.started" and first["payload"]["title"] == "Anna pressed SOS", first
    assert first["urgency"] == "high" and first["ttl"] == 43200 and first["topic"], first
    assert receiver.wait_for("mum-2", 1)[0]["payload"]["title"] == "Anna 按下了 SOS"
    mails = mail.wait_for(subject("SOS: Anna needs help"), 2, 10, "the SOS mails")
    tokens = links_in(mails)
    # The alert opens Mum's own link, the one her mail has.
    assert first["payload"]["url"].endswith("/s/" + tokens["mum@example.org"]), (first, tokens)
    assert "/alerts#c=" in next(m for m in mails if m.to[0] == "mum@example.org").text
    no_position_in(first["payload"])
    print(f"press to Mum's push: {first['at'] - started_at:.3f} s")

    # Dad asks to be notified from his link's page; the share's own link has a viewer too.
    dads = receiver.subscription("dad")
    assert subscribe(flare, f"/api/v1/view/{tokens['dad@example.org']}/push", dads) == 201
    assert subscribe(flare, f"/api/v1/view/{tokens['dad@example.org']}/push", dads) == 200  # the same browser again
    own = sos["share_url"].rsplit("/", 1)[1]
    assert subscribe(flare, f"/api/v1/view/{own}/push", receiver.subscription("own")) == 201

    press(flare, anna)
    for name in ("mum", "dad", "own"):
        got = receiver.wait_for(name, 2 if name == "mum" else 1)[-1]
        assert got["payload"]["type"] == "sos.repeated", (name, got)
        assert "url" not in got["payload"] or name == "mum", got  # a viewer's page opens its own link

    # Dad's browser dropped its subscription: 410 once, then never again. Mum's push service is busy: 503, Retry-After 2.
    receiver.respond("dad", 410)
    receiver.respond("mum", 503, retry_after=2)
    press(flare, anna)
    receiver.wait_for("own", 2)
    receiver.wait_for("mum", 3, timeout=20)
    mum_attempts = [a for a in receiver.attempts if a["name"] == "mum"]
    assert [a["status"] for a in mum_attempts[-2:]] == [503, 201], mum_attempts
    assert mum_attempts[-1]["at"] - mum_attempts[-2]["at"] >= 1.9, mum_attempts
    press(flare, anna)
    receiver.wait_for("own", 3)
    receiver.wait_for("mum", 4)
    time.sleep(1)
    assert [a["status"] for a in receiver.attempts if a["name"] == "dad"] == [201, 410], receiver.attempts
    assert len(receiver.messages("mum")) == 4

    # The end reaches the link's viewers (not the contacts' alerts), and ends their subscriptions.
    status, _, body = send(f"{flare.base}/api/v1/devices/sos/stop", "POST", b"{}",
                           {"Authorization": f"Bearer {anna['secret']}", "Content-Type": "application/json"})
    assert status == 200, (status, body)
    ended = receiver.wait_for("own", 4)[-1]
    assert ended["payload"]["type"] == "share.ended" and ended["urgency"] == "normal", ended
    time.sleep(1)
    assert len(receiver.messages("mum")) == 4
    status, _, body = send(f"{flare.base}/api/v1/view/{own}/push", "DELETE",
                           json.dumps({"endpoint": receiver.endpoint("own")}).encode(), {"Content-Type": "application/json"})
    assert status == 404, (status, body)
    assert receiver.errors == [], receiver.errors
    flare.assert_log_clean()


@pytest.mark.bounded(90)
def test_nobody_answering_climbs_the_ladder_by_push_and_mail_and_an_answer_ends_it(built: None, work: str, started: list[Instance],
                                                                                  mail: MailCatcher, receiver: PushReceiver) -> None:
    flare = push_flare(work, started, mail)
    receiver.server_key = server_key(flare)
    mum = flare.contact("Mum", "mum@example.org")
    anna = flare.device("Anna", [mum], escalate_after_s=5)
    ben = flare.device("Ben", [mum], escalate_after_s=5)
    assert subscribe(flare, "/api/v1/alerts/push", receiver.subscription("mum"), bearer=alerts_secret(flare, mum)) == 201

    # Ben's SOS is answered at once: his ladder ends.
    press(flare, ben)
    ben_token = links_in(mail.wait_for(subject("SOS: Ben needs help"), 1, 10, "Ben's SOS mail"))["mum@example.org"]
    status, _, body = send(f"{flare.base}/api/v1/view/{ben_token}/answers", "POST", json.dumps({"kind": "on_my_way"}).encode(),
                           {"Content-Type": "application/json"})
    assert status == 201, (status, body)

    started_at = time.monotonic()
    press(flare, anna)
    pushes = receiver.wait_for("mum", 4, timeout=30)  # Ben's start, his answer's news is not an alert; Anna's start, then two steps
    ladder = [p for p in pushes if p["payload"]["type"] == "sos.escalated"]
    assert [p["payload"]["title"] for p in ladder] == ["Nobody has answered Anna's SOS yet"] * 2, pushes
    assert ladder[0]["at"] - started_at >= 4.5 and ladder[1]["at"] - started_at >= 14.5, [p["at"] - started_at for p in ladder]
    mail.wait_for(subject("Nobody has answered Anna's SOS yet"), 1, 10, "the ladder's first mail")
    mail.wait_for(subject("Still nobody has answered Anna's SOS"), 1, 10, "the ladder's second mail")
    # The phone sees where the ladder stands: both steps taken, none to come.
    status, _, body = send(f"{flare.base}/api/v1/devices/sos", headers={"Authorization": f"Bearer {anna['secret']}"})
    assert status == 200 and json.loads(body)["escalation"] == {"step": 2}, body
    time.sleep(2)
    assert not mail.mails(lambda m: "Ben" in m.subject and "answered" in m.subject), [m.subject for m in mail.mails()]
    assert len([p for p in receiver.messages("mum") if p["payload"]["type"] == "sos.escalated"]) == 2
    assert receiver.errors == [], receiver.errors
