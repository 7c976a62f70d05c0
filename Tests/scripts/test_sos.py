"""A device's SOS end to end, with real processes (`make scripts-test`; about 15 s in all).

scripts/run.sh as `make run` starts it (flared, the broker, the demo share), with flared mailing contacts through a
real SMTP server this test runs on loopback (aiosmtpd, scripts/flarestack/mail.py); and two flared on one throwaway
PostgreSQL for the press seen by both. Every request a tracking app sends is rebuilt here as that app builds it, from
the fields of Flare's own setup answer; the comments cite the app's source (repository and path) as read for
docs/trackers.md. Nothing is mocked: what a test checks is what a contact would get (the mails, the personal links'
view JSON) and what the device is answered.

- a press: positions before it are answered 200 and dropped; `alarm=sos` starts one share, each contact gets a mail
  with a personal link that shows the position; pressing again makes no second share and, within the minute of the start
  mail, no second mail; every app's positions then go into it, in order;
- the PIN: five wrong PINs lock stopping and alert the contacts; the duress PIN answers as a stop does while the share
  goes on with a warning and keeps taking positions;
- the log (run.sh's output, where flared logs, at debug): no device secret, PIN or coordinate sent, refusals included;
- two instances seeing the same press at once start one share, and both answers name it.

Bounded in time (each test on its own); everything started is stopped on failure too (conftest.py). Uses the built
binaries in .build/debug and .build/broker (run `make build plugin` first).
"""

from __future__ import annotations

import glob
import http.client
import json
import os
import re
import secrets
import threading
import time
import urllib.parse
from datetime import datetime, timezone
from typing import Any

import pytest

from scripts.flarestack import HOST, Mail, MailCatcher, Stack, free_span, wait_until

from runsh import Instance

# --- Flare over HTTP ----------------------------------------------------------------------------------------------


def send(url: str, method: str = "GET", body: bytes | None = None, headers: dict[str, str] | None = None,
         source: str = HOST) -> tuple[int, dict[str, str], bytes]:
    """One request to an absolute URL (as an app has it from its setup), on its own connection."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=15, source_address=(source, 0))
    try:
        conn.request(method, parts.path + (f"?{parts.query}" if parts.query else ""), body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


class Flare:
    """One flared as a test talks to it: its owner key, the API, and everything sent that must stay out of the log
    (device secrets, PINs, the coordinates' exact strings)."""

    def __init__(self, base: str, owner_key: str, logs: list[str]) -> None:
        self.base = base
        self.owner_key = owner_key
        self.logs = logs
        self.kept_out: dict[str, str] = {}  # text -> what it is

    def keep_out(self, what: str, *texts: str) -> None:
        for text in texts:
            self.kept_out[text] = what

    def call(self, method: str, path: str, body: Any = None, key: str | None = None, source: str = HOST) -> tuple[int, Any]:
        """A request with a bearer (the owner key unless `key`) and a JSON body; (status, JSON answer or None)."""
        headers = {"Authorization": f"Bearer {key or self.owner_key}"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        status, _, answer = send(self.base + path, method, data, headers, source)
        return status, json.loads(answer) if answer else None

    def contact(self, name: str, address: str) -> str:
        status, made = self.call("POST", "/api/v1/contacts", {"name": name, "email": address})
        assert status == 201, (status, made)
        return made["id"]

    def device(self, name: str, contacts: list[str], **settings: Any) -> dict[str, Any]:
        status, made = self.call("POST", "/api/v1/devices", {"name": name, "contacts": contacts, **settings})
        assert status == 201, (status, made)
        self.keep_out(f"{name}'s secret", made["secret"])
        for field in ("pin", "duress_pin"):
            if field in settings:
                self.keep_out(f"{name}'s {field}", settings[field])
        return made

    def info(self, device: dict[str, Any]) -> dict[str, Any]:
        status, info = self.call("GET", f"/api/v1/devices/{device['device_id']}")
        assert status == 200, (status, info)
        return info

    def sos_shares(self, name: str) -> list[dict[str, Any]]:
        """The owner's shares named `name` (an SOS share has its device's name; the demo share is "Demo")."""
        status, listed = self.call("GET", "/api/v1/shares?limit=200")
        assert status == 200, (status, listed)
        return [share for share in listed["shares"] if share["name"] == name]

    def view(self, token: str) -> dict[str, Any]:
        status, _, body = send(f"{self.base}/api/v1/view/{token}")
        assert status == 200, (status, body[:200])
        return json.loads(body)

    def stop(self, device: dict[str, Any], pin: str | None) -> tuple[int, dict[str, str], Any]:
        """POST /api/v1/devices/sos/stop as Flare's API has it (the setup's "Stop" field), with the secret."""
        body = json.dumps({} if pin is None else {"pin": pin}).encode()
        status, headers, answer = send(f"{self.base}/api/v1/devices/sos/stop", "POST", body,
                                       {"Authorization": f"Bearer {device['secret']}", "Content-Type": "application/json"})
        return status, headers, json.loads(answer) if answer else None

    def assert_log_clean(self) -> None:
        """No secret, PIN or coordinate sent is anywhere in the log."""
        found = []
        for path in self.logs:
            with open(path, "rb") as f:
                text = f.read().decode(errors="replace")
            found += [f"{what} ({needle}) in {path}" for needle, what in self.kept_out.items() if needle in text]
        assert self.kept_out, "nothing was noted to look for"
        assert not found, "the log holds what it must never hold:\n" + "\n".join(found)


def run_logs(instance: Instance) -> list[str]:
    """run.sh's output (flared's log, the broker's, the demo's) and any log file in its data directory."""
    return [instance.log_path] + glob.glob(os.path.join(instance.data_dir, "**", "*.log"), recursive=True)


def started_flare(work: str, started: list[Instance], mail: MailCatcher, log_level: str = "info") -> tuple[Instance, Flare]:
    instance = Instance(work, "run", free_span(2), extra_env=dict(mail.env(), FLARE_LOG_LEVEL=log_level))
    started.append(instance)
    instance.wait_until_running()
    with open(os.path.join(instance.data_dir, "owner.key")) as f:
        owner_key = f.read().strip()
    return instance, Flare(f"http://{HOST}:{instance.http_port}", owner_key, run_logs(instance))


def apps(created: dict[str, Any]) -> dict[str, dict[str, str]]:
    """The setup answer's fields, by app and label."""
    return {app["app"]: {field["label"]: field["value"] for field in app["fields"]} for app in created["setup"]["apps"]}


def links_in(mails: list[Mail]) -> dict[str, str]:
    """Each mail's personal link token, by recipient."""
    tokens = {}
    for mail in mails:
        found = re.findall(r"https?://[^\s/]+/s/([A-Za-z0-9_-]+)", mail.text)
        assert len(set(found)) == 1, f"a mail to {mail.to} has not one personal link: {mail.text}"
        tokens[mail.to[0]] = found[0]
    return tokens


def subject(text: str):
    return lambda mail: mail.subject == text


# --- the apps' requests, as each app builds them -------------------------------------------------------------------


class Position:
    """One fix as a phone has it; the tests' coordinates are exact in 6 decimals, so that every app writes the same
    digits (and the log can be searched for them)."""

    def __init__(self, lat: float, lon: float, tst: int, accuracy: float = 8.0, altitude: float = 34.0, speed_mps: float = 1.5,
                 bearing: float = 87.0, battery: int = 85) -> None:
        self.lat, self.lon, self.tst = round(lat, 6), round(lon, 6), tst
        self.accuracy, self.altitude, self.speed_mps, self.bearing, self.battery = accuracy, altitude, speed_mps, bearing, battery
        self.lat_text, self.lon_text = f"{lat:.6f}".rstrip("0"), f"{lon:.6f}".rstrip("0")
        assert (float(self.lat_text), float(self.lon_text)) == (self.lat, self.lon)

    def iso(self) -> str:
        return datetime.fromtimestamp(self.tst, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + "000Z"


def java_double(value: float) -> str:
    """Kotlin's and Java's Double.toString for the values used here (1e-3 to 1e7): the shortest digits, ".0" kept."""
    return repr(float(value))


def traccar_android(server_url: str, identifier: str, fix: Position, alarm: str | None = None) -> tuple[str, str, bytes | None, dict[str, str]]:
    """Traccar Client for Android, the classic app (traccar/traccar-client-android,
    app/src/main/java/org/traccar/client/ProtocolFormatter.kt:25-42): the fields in this order, appended to the
    configured URL with Uri.buildUpon().appendQueryParameter; speed in knots (Position.kt:44), accuracy 0.0 for a GPS
    fix (Position.kt:46-50), batt a percentage as a double (PositionProvider.kt:67-72), charge only when charging,
    alarm=sos last from the SOS shortcut (ShortcutActivity.kt:78-98). RequestManager.kt:33-40 POSTs it with no body
    and no headers of its own."""
    fields = [("id", identifier), ("timestamp", str(fix.tst)), ("lat", java_double(fix.lat)), ("lon", java_double(fix.lon)),
              ("speed", java_double(fix.speed_mps * 1.943844)), ("bearing", java_double(fix.bearing)), ("altitude", java_double(fix.altitude)),
              ("accuracy", "0.0"), ("batt", java_double(fix.battery)), ("charge", "true")]
    if alarm:
        fields.append(("alarm", alarm))
    return "POST", server_url + "?" + urllib.parse.urlencode(fields, quote_via=urllib.parse.quote), None, {}


def ios_number(value: float) -> str:
    """NSNumber's description of a double: no ".0" for a whole number."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def traccar_ios(server_url: str, identifier: str, fix: Position, alarm: str | None = None) -> tuple[str, str, bytes | None, dict[str, str]]:
    """Traccar Client for iOS, the older native app (traccar/traccar-client-ios, TraccarClient/ProtocolFormatter.swift:21-62):
    the query written by hand (the id raw), lat and lon as %.06f, speed in knots (Position.swift:44-46), the query
    replacing any in the configured URL; the "Send SOS" quick action adds alarm=sos (AppDelegate.swift:96-123).
    RequestManager.swift:22-26 POSTs it with no body."""
    query = (f"id={identifier}&timestamp={fix.tst}&lat={fix.lat:.6f}&lon={fix.lon:.6f}&speed={ios_number(fix.speed_mps * 1.94384)}"
             f"&bearing={ios_number(fix.bearing)}&altitude={ios_number(fix.altitude)}&accuracy={ios_number(fix.accuracy)}"
             f"&batt={ios_number(fix.battery)}")
    if alarm:
        query += f"&alarm={alarm}"
    return "POST", server_url.split("?")[0] + "?" + query, None, {}


def traccar_flutter9(server_url: str, identifier: str, fix: Position, alarm: str | None = None) -> tuple[str, str, bytes | None, dict[str, str]]:
    """Traccar Client 9.x, Flutter with flutter_background_geolocation (traccar/traccar-client at
    e75baaac1e2b4be2e91207aa5f1c1b92d3200970): lib/preferences.dart:103-109 sends `device_id` at the JSON root and
    adds a "/" only to a URL without a path (:124-129); the body is its locationTemplate (:131-155, the sample of
    Traccar's OsmAndProtocolDecoderTest.testDecodeJson), speed in m/s, battery level a fraction, and the "_" string
    for old servers. The SOS quick action (lib/quick_actions.dart:31-33) puts extras {'alarm': 'sos'}, merged at
    `location` (so `location.alarm`)."""
    location: dict[str, Any] = {
        "timestamp": fix.iso(), "coords": {"latitude": fix.lat, "longitude": fix.lon, "accuracy": fix.accuracy, "speed": fix.speed_mps,
                                           "heading": fix.bearing, "altitude": fix.altitude},
        "is_moving": True, "odometer": 0, "event": "", "battery": {"level": fix.battery / 100, "is_charging": False},
        "activity": {"type": "walking"}, "extras": {},
        "_": f"&id={identifier}&lat={fix.lat}&lon={fix.lon}&timestamp={fix.iso()}&",
    }
    if alarm:
        location["alarm"] = alarm
    url = server_url if urllib.parse.urlsplit(server_url).path else server_url + "/"
    body = json.dumps({"location": location, "device_id": identifier}, separators=(",", ":")).encode()
    return "POST", url, body, {"Content-Type": "application/json"}


def traccar_flutter10(server_url: str, identifier: str, fix: Position, alarm: str | None = None) -> tuple[str, str, bytes | None, dict[str, str]]:
    """Traccar Client 10.x, its own SDK (traccar-client-sdk, read in the fork smit-joshi-addon/traccar-client-sdk at
    upstream 4a9dc46, core/src/commonMain/kotlin/org/traccar/client/HttpUploader.kt:17-42): Ktor's submitForm, a
    form body in this order, no query; speed in knots rounded to 2 decimals, batt an integer, charge true or false;
    the SOS button and quick action call requestPosition(alarm: 'sos') (traccar/traccar-client lib/quick_actions.dart:30-31,
    lib/main_screen.dart)."""
    fields = [("id", identifier), ("lat", java_double(fix.lat)), ("lon", java_double(fix.lon)), ("timestamp", str(fix.tst)),
              ("accuracy", java_double(fix.accuracy)), ("altitude", java_double(fix.altitude)),
              ("speed", java_double(round(fix.speed_mps * 1.94384 * 100) / 100)), ("bearing", java_double(fix.bearing)),
              ("batt", str(fix.battery)), ("charge", "false")]
    if alarm:
        fields.append(("alarm", alarm))
    return "POST", server_url, urllib.parse.urlencode(fields).encode(), {"Content-Type": "application/x-www-form-urlencoded; charset=UTF-8"}


def traccar_push_token(server_url: str, identifier: str) -> tuple[str, str, bytes | None, dict[str, str]]:
    """Traccar Client 9.x and 10.x upload their push token to the same URL (traccar/traccar-client
    lib/push_service.dart:50-63): a form with the id and notificationToken, no position."""
    body = urllib.parse.urlencode([("id", identifier), ("notificationToken", "fcm:" + secrets.token_urlsafe(24))]).encode()
    return "POST", server_url, body, {"Content-Type": "application/x-www-form-urlencoded"}


def qr_scanned(created: dict[str, Any], app_id: str) -> tuple[str, str]:
    """Traccar Client 9 and 10 set up from the setup's QR code (traccar/traccar-client lib/qr_code_screen.dart
    _applySettings, lib/configuration_service.dart applyUri): the server URL becomes the code's origin and path, the
    device identifier changes only if the code has an `id` parameter (Flare's has none: the secret is in the path), so
    the app keeps its own random one (lib/preferences.dart). Returns (server URL, identifier) as the app then has them."""
    code = next(app["qr"] for app in created["setup"]["apps"] if app["app"] == "traccar_client")
    parts = urllib.parse.urlsplit(code)
    identifier = urllib.parse.parse_qs(parts.query).get("id", [app_id])[0]
    return f"{parts.scheme}://{parts.netloc}{parts.path}", identifier


def gpslogger(url_template: str, fix: Position, annotation: str = "") -> tuple[str, str, bytes | None, dict[str, str]]:
    """GPSLogger's Custom URL (mendhak/gpslogger): the placeholders replaced case-insensitively in the order of
    gpslogger/src/main/java/com/mendhak/gpslogger/senders/customurl/CustomUrlManager.java:191-236, each value as
    String.valueOf of its Java type (%ACC, %DIR, %SPD floats widened, %BATT an int printed as a float, %DESC the
    annotation URL-encoded, empty for an ordinary point); CustomUrlRequest.java and CustomUrlWorker.java:63-78 send a
    GET (the default method) with OkHttp, no body."""
    values = [("LAT", java_double(fix.lat)), ("LON", java_double(fix.lon)), ("DESC", urllib.parse.quote_plus(annotation).replace("%3A", ":")),
              ("ALT", java_double(fix.altitude)), ("ACC", java_double(fix.accuracy)), ("DIR", java_double(fix.bearing)),
              ("SPD", java_double(fix.speed_mps)), ("TIMESTAMP", str(fix.tst)), ("BATT", java_double(fix.battery)), ("ISCHARGING", "false")]
    url = url_template
    for name, value in values:
        url = re.sub("%" + name, lambda _: value, url, flags=re.IGNORECASE)
    assert "%" not in url.replace("%3A", ""), url
    return "GET", url, None, {}


def osmand(url_template: str, fix: Position) -> tuple[str, str, bytes | None, dict[str, str]]:
    """OsmAnd's online tracking (osmandapp/OsmAnd, OsmAnd/src/net/osmand/plus/plugins/monitoring/live/LiveSender.java
    getLiveUrl): MessageFormat fills {0}..{6} with lat and lon as DecimalFormat("0.00#####"), the time the point was
    queued in Unix milliseconds, accuracy, altitude, speed in m/s and bearing as floats; a GET with no body
    (HttpURLConnection, no method set)."""
    values = [f"{fix.lat:.7f}".rstrip("0"), f"{fix.lon:.7f}".rstrip("0"), str(fix.tst * 1000), java_double(fix.accuracy),
              java_double(fix.altitude), java_double(fix.speed_mps), java_double(fix.bearing)]
    url = url_template
    for index, value in enumerate(values):
        url = url.replace("{" + str(index) + "}", value)
    return "GET", url, None, {}


def deliver(built: tuple[str, str, bytes | None, dict[str, str]], what: str) -> None:
    """Sends an app's request; every app takes 200 with an empty body as success."""
    method, url, body, headers = built
    status, _, answer = send(url, method, body, headers)
    assert (status, answer) == (200, b""), f"{what}: {status} {answer[:300]!r}"


def noted(flare: Flare, fix: Position) -> Position:
    flare.keep_out("a latitude sent", fix.lat_text)
    flare.keep_out("a longitude sent", fix.lon_text)
    return fix


def trail_shows(flare: Flare, token: str, fixes: list[Position]):
    """A wait_until check: the link's view JSON ends its trail with `fixes`, in order, and `last` is the newest."""
    def check() -> bool:
        view = flare.view(token)
        trail = [(point["lat"], point["lon"], point["tst"]) for point in view["trail"]]
        wanted = [(fix.lat, fix.lon, fix.tst) for fix in fixes]
        last = view["last"]
        return trail[-len(wanted):] == wanted and last is not None and (last["lat"], last["lon"]) == (fixes[-1].lat, fixes[-1].lon)
    return check


# --- the tests ---------------------------------------------------------------------------------------------------------


@pytest.mark.bounded(60)
def test_a_press_starts_one_share_mails_each_contact_and_takes_every_apps_positions(work: str, started: list[Instance],
                                                                                   mail: MailCatcher) -> None:
    _, flare = started_flare(work, started, mail)
    mum, dad = flare.contact("Mum", "mum@example.org"), flare.contact("Dad", "dad@example.org")
    pin, duress = "".join(secrets.choice("3456789") for _ in range(10)), "".join(secrets.choice("3456789") for _ in range(11))
    anna = flare.device("Anna", [mum, dad], pin=pin, duress_pin=duress, message="Walking home through the park")
    setup = apps(anna)
    server_url, identifier = setup["traccar_client"]["Server URL"], setup["traccar_client"]["Device identifier"]
    assert identifier == anna["secret"] and server_url == f"{flare.base}/api/v1/osmand", setup["traccar_client"]
    base = int(time.time()) - 120
    fixes = [noted(flare, Position(38.711234 + n * 0.000111, -9.139876 - n * 0.000222, base + 10 * n)) for n in range(9)]

    # A position before any SOS: answered as the app wants it, and not kept.
    deliver(traccar_android(server_url, identifier, fixes[0]), "Traccar Client (Android) position before the SOS")
    info = flare.info(anna)
    assert (info["sos"], info.get("sos_share_id")) == ("none", None), info
    assert info["last_heard_at"] is not None, "the setup's test: Flare heard the device"
    assert flare.sos_shares("Anna") == []

    # The SOS shortcut: the same request with alarm=sos.
    deliver(traccar_android(server_url, identifier, fixes[1], alarm="sos"), "Traccar Client (Android) SOS")
    started_mails = mail.wait_for(subject("SOS: Anna needs help"), 2, 20, "the SOS mails")
    assert sorted(m.to[0] for m in started_mails) == ["dad@example.org", "mum@example.org"], started_mails
    assert all("Walking home through the park" in m.text for m in started_mails), started_mails[0].text
    tokens = links_in(started_mails)
    assert len(set(tokens.values())) == 2, f"each contact has a link of their own: {tokens}"
    for token in tokens.values():
        view = flare.view(token)
        assert view["state"] == "active" and view["name"] == "Anna", view
        assert (view["last"]["lat"], view["last"]["lon"]) == (fixes[1].lat, fixes[1].lon), view["last"]
    shares = flare.sos_shares("Anna")
    assert len(shares) == 1, shares
    info = flare.info(anna)
    assert (info["sos"], info.get("sos_share_id")) == ("live", shares[0]["share_id"]), info

    # Pressed again (from the iPhone app's quick action), and a third time (Traccar Client 10's SOS button): no second
    # share. The contacts were told a moment ago, so no "pressed again" mail within the minute (SOSMailTests moves a
    # clock past it). A share made after the presses, with a link for Mum, is the mark: once its mail is here, a mail
    # of the presses would be too.
    deliver(traccar_ios(server_url, identifier, fixes[2], alarm="sos"), "Traccar Client (iOS) SOS again")
    assert [s["share_id"] for s in flare.sos_shares("Anna")] == [shares[0]["share_id"]], "no second share"
    deliver(traccar_flutter10(server_url, identifier, fixes[3], alarm="sos"), "Traccar Client 10 SOS a third time")
    assert [s["share_id"] for s in flare.sos_shares("Anna")] == [shares[0]["share_id"]], "no second share"
    status, mark = flare.call("POST", "/api/v1/shares", {"duration_s": 600, "name": "Mark", "contacts": [mum]})
    assert status == 201, (status, mark)
    mail.wait_for(subject("Mark is sharing a live location with you"), 1, 20, "the mark's mail")
    assert not mail.mails(subject("SOS: Anna pressed SOS again")), "no pressed-again mail within the minute of the start"

    # Every app's positions go into the SOS, and the contacts' links show them in order.
    deliver(traccar_flutter9(server_url, identifier, fixes[4]), "Traccar Client 9 (JSON) position")
    deliver(traccar_flutter10(server_url, identifier, fixes[5]), "Traccar Client 10 (form) position")
    deliver(traccar_push_token(server_url, identifier), "Traccar Client's push token")
    deliver(gpslogger(setup["gpslogger"]["URL"], fixes[6]), "GPSLogger's custom URL")
    deliver(osmand(setup["osmand"]["Web address"], fixes[7]), "OsmAnd's online tracking")
    deliver(traccar_flutter10(*qr_scanned(anna, "48241179"), fixes[8]), "Traccar Client set up from the QR code")
    for token in tokens.values():
        wait_until(trail_shows(flare, token, fixes[1:]), 10, "the link's view shows every position, in order", interval=0.25)
    view = flare.view(tokens["mum@example.org"])
    assert (fixes[0].lat, fixes[0].lon) not in [(p["lat"], p["lon"]) for p in view["trail"]], "the position before the SOS was kept"
    osmands = next(p for p in view["trail"] if (p["lat"], p["lon"]) == (fixes[7].lat, fixes[7].lon))
    assert osmands["tst"] == fixes[7].tst, "OsmAnd's milliseconds read as such"
    last = view["last"]
    assert (last["acc"], last["cog"], last["batt"]) == (8.0, 87.0, 85) and abs(last["vel"] - 1.5 * 3.6) < 0.05, \
        f"Traccar Client 10's knots and percentages read as such: {last}"
    flare.assert_log_clean()


@pytest.mark.bounded(60)
def test_wrong_pins_lock_the_stop_and_the_duress_pin_only_seems_to_stop(work: str, started: list[Instance], mail: MailCatcher) -> None:
    _, flare = started_flare(work, started, mail)
    contacts = [flare.contact("Mum", "mum@example.org"), flare.contact("Dad", "dad@example.org")]
    pin, duress, wrong = ("".join(secrets.choice("3456789") for _ in range(n)) for n in (8, 9, 10))
    flare.keep_out("a wrong PIN", wrong)
    ben, cleo, dana = (flare.device(name, contacts, pin=pin, duress_pin=duress) for name in ("Ben", "Cleo", "Dana"))
    base = int(time.time()) - 60
    fixes = [noted(flare, Position(-33.868821 + n * 0.000101, 151.209296 + n * 0.000202, base + 10 * n)) for n in range(5)]
    server_url = apps(ben)["traccar_client"]["Server URL"]
    for device, fix in ((ben, fixes[0]), (cleo, fixes[1]), (dana, fixes[2])):
        deliver(traccar_android(server_url, device["secret"], fix, alarm="sos"), f"{device['name']}'s SOS")

    # Five wrong PINs: each refused, the fifth locks stopping (even with the right PIN) and alerts the contacts.
    for attempt in range(1, 6):
        status, _, answer = flare.stop(ben, wrong)
        assert (status, answer and answer.get("error")) == (403, "wrong_pin"), (attempt, status, answer)
    status, headers, answer = flare.stop(ben, pin)
    assert (status, answer and answer.get("error")) == (403, "stop_locked"), (status, answer)
    assert int(headers.get("Retry-After", "0")) > 0, headers
    alerts = mail.wait_for(subject("Someone is trying to stop Ben's SOS"), 2, 20, "the mails of the locked stop")
    assert sorted(m.to[0] for m in alerts) == ["dad@example.org", "mum@example.org"], alerts
    assert flare.info(ben)["sos"] == "live", "the SOS goes on"

    # The duress PIN on Cleo's live SOS answers as Dana's real stop does.
    real = flare.stop(dana, pin)
    forced = flare.stop(cleo, duress)
    assert real[0] == forced[0] == 200, (real, forced)
    assert set(real[2]) == set(forced[2]) and real[2]["status"] == forced[2]["status"] == "stopped", (real[2], forced[2])
    assert real[1].get("Content-Type") == forced[1].get("Content-Type")
    status, _, read = send(f"{flare.base}/api/v1/devices/sos", headers={"Authorization": f"Bearer {cleo['secret']}"})
    assert status == 200 and json.loads(read)["status"] == "stopped", "the device reads stopped"
    warned = mail.wait_for(subject("Cleo may be under duress"), 2, 20, "the duress mails")
    tokens = links_in(warned)
    started_tokens = links_in(mail.mails(subject("SOS: Cleo needs help")))
    assert tokens == started_tokens, "the duress mail carries each contact's own link"
    for token in tokens.values():
        view = flare.view(token)
        assert view["state"] == "active" and view["tracker"].get("duress") is True, view
    assert flare.info(cleo)["sos"] == "duress" and flare.info(dana)["sos"] == "ended"

    # Positions still go in: the apps' answers are as ever, the contacts see them.
    setup = apps(cleo)
    deliver(gpslogger(setup["gpslogger"]["URL"], fixes[3]), "GPSLogger under duress")
    deliver(traccar_android(server_url, cleo["secret"], fixes[4]), "Traccar Client under duress")
    for token in tokens.values():
        wait_until(trail_shows(flare, token, [fixes[1], fixes[3], fixes[4]]), 10, "the duress share's new positions", interval=0.25)
    flare.assert_log_clean()


@pytest.mark.bounded(60)
def test_the_log_holds_no_secret_pin_or_position(work: str, started: list[Instance], mail: MailCatcher) -> None:
    """Every device request there is, refusals too, then the whole log (at its most detailed, debug) is searched for
    what was sent."""
    _, flare = started_flare(work, started, mail, log_level="debug")
    mum = flare.contact("Mum", "mum@example.org")
    pin, duress = "".join(secrets.choice("3456789") for _ in range(12)), "".join(secrets.choice("3456789") for _ in range(7))
    eve = flare.device("Eve", [mum], pin=pin, duress_pin=duress)
    setup = apps(eve)
    base = int(time.time()) - 60
    fixes = [noted(flare, Position(59.329323 + n * 0.000123, 18.068581 + n * 0.000231, base + 5 * n)) for n in range(9)]
    server_url, secret = setup["traccar_client"]["Server URL"], eve["secret"]
    gps, osm = setup["gpslogger"]["URL"], setup["osmand"]["Web address"]

    # Outside an SOS, every app; then GPSLogger's annotation "sos" starts it.
    deliver(traccar_ios(server_url, secret, fixes[0]), "iOS before")
    deliver(osmand(osm, fixes[1]), "OsmAnd before")
    deliver(gpslogger(gps, fixes[2], annotation="sos"), "GPSLogger's sos annotation")
    mail.wait_for(subject("SOS: Eve needs help"), 1, 20, "the SOS mail")
    deliver(traccar_flutter9(server_url, secret, fixes[3], alarm="sos"), "Traccar Client 9 SOS again")
    deliver(traccar_flutter10(server_url, secret, fixes[4]), "Traccar Client 10")
    # Flare's own API: a position, a read, wrong PINs, refused fields.
    status, _, answer = send(f"{flare.base}/api/v1/devices/locations", "POST",
                             json.dumps({"_type": "location", "lat": fixes[5].lat, "lon": fixes[5].lon, "tst": fixes[5].tst}).encode(),
                             {"Authorization": f"Bearer {secret}", "Content-Type": "application/json"})
    assert status == 202, (status, answer)
    wrong = "".join(secrets.choice("3456789") for _ in range(9))
    flare.keep_out("a wrong PIN", wrong)
    assert flare.stop(eve, wrong)[0] == 403
    bad = gpslogger(gps, fixes[6])[1].replace(f"lat={fixes[6].lat}", f"lat={fixes[6].lat}&lat={fixes[6].lat}")
    assert send(bad)[0] == 400
    assert send(osmand(osm, fixes[7])[1].replace(fixes[7].lon_text, fixes[7].lon_text + "x"))[0] == 400
    # An unknown secret, from an address of its own (it costs the address).
    unknown = secrets.token_urlsafe(32)
    flare.keep_out("an unknown secret", unknown)
    assert send(f"{server_url}/{unknown}?lat={fixes[8].lat}&lon={fixes[8].lon}", source="127.0.0.9")[0] == 404
    # The duress PIN, a new secret (the old one then refused), the PINs changed, the stop.
    assert flare.stop(eve, duress)[0] == 200
    status, renewed = flare.call("POST", f"/api/v1/devices/{eve['device_id']}/secret")
    assert status == 200, (status, renewed)
    flare.keep_out("Eve's new secret", renewed["secret"])
    assert send(f"{server_url}/{secret}?lat={fixes[8].lat}&lon={fixes[8].lon}")[0] == 404
    new_pin = "".join(secrets.choice("3456789") for _ in range(11))
    flare.keep_out("Eve's new PIN", new_pin)
    status, changed = flare.call("PATCH", f"/api/v1/devices/{eve['device_id']}", {"pin": new_pin, "duress_pin": ""})
    assert status == 200 and changed["has_pin"] and not changed["has_duress_pin"], (status, changed)
    deliver(traccar_android(server_url, renewed["secret"], fixes[8]), "Traccar Client with the new secret")
    status, _, answer = flare.stop({"secret": renewed["secret"]}, new_pin)
    assert status == 200, (status, answer)
    mail.wait_for(subject("Eve may be under duress"), 1, 20, "the duress mail")
    flare.assert_log_clean()


@pytest.mark.bounded(90)
def test_two_instances_seeing_the_same_press_at_once_start_one_share(work: str, mail: MailCatcher) -> None:
    """Two flared on one PostgreSQL (as `make cluster` runs them); the press reaches both at the same moment, as a
    retry through a balancer or two paths would bring it: once through Flare's API, once as Traccar Client's SOS."""
    stack = Stack(work, store="postgres", instances=2, env=mail.env())
    try:
        a = Flare(f"http://{HOST}:{stack.a.http_port}", stack.owner_key, [i.log for i in stack.instances])
        b = Flare(f"http://{HOST}:{stack.b.http_port}", stack.owner_key, [])
        contacts = [a.contact("Mum", "mum@example.org"), a.contact("Dad", "dad@example.org")]
        frank, gina = a.device("Frank", contacts), a.device("Gina", contacts)
        fix = noted(a, Position(-22.906847, -43.172897, int(time.time()) - 30))

        def at_once(path: str, method: str, body: bytes | None, headers: dict[str, str]) -> list[tuple[int, bytes]]:
            """The request to A and to B on connections opened beforehand, sent when both threads are ready."""
            answers: list[tuple[int, bytes]] = [(0, b""), (0, b"")]
            ready = threading.Barrier(2, timeout=10)

            def press(slot: int, port: int) -> None:
                conn = http.client.HTTPConnection(HOST, port, timeout=20)
                try:
                    conn.connect()
                    ready.wait()
                    conn.request(method, path, body=body, headers=headers)
                    response = conn.getresponse()
                    answers[slot] = (response.status, response.read())
                finally:
                    conn.close()

            threads = [threading.Thread(target=press, args=(slot, port)) for slot, port in enumerate((stack.a.http_port, stack.b.http_port))]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(30)
            return answers

        # Flare's API: one answer starts the SOS (201), the other finds it (200, repeated), both name the one share.
        answers = at_once("/api/v1/devices/sos", "POST", None, {"Authorization": f"Bearer {frank['secret']}"})
        assert sorted(status for status, _ in answers) == [200, 201], answers
        pressed = [json.loads(body) for _, body in answers]
        assert pressed[0]["share_id"] == pressed[1]["share_id"] and sorted(p["repeated"] for p in pressed) == [False, True], pressed
        for flare in (a, b):
            assert [s["share_id"] for s in flare.sos_shares("Frank")] == [pressed[0]["share_id"]], "exactly one share, on either instance"
            assert flare.info(frank).get("sos_share_id") == pressed[0]["share_id"]

        # Traccar Client's SOS (its answer is empty): one share, which both instances name, with the position.
        method, url, _, _ = traccar_android(apps(gina)["traccar_client"]["Server URL"], gina["secret"], fix, alarm="sos")
        parts = urllib.parse.urlsplit(url)
        answers = at_once(f"{parts.path}?{parts.query}", method, None, {})
        assert answers == [(200, b""), (200, b"")], answers
        shares = a.sos_shares("Gina")
        assert len(shares) == 1 and b.sos_shares("Gina") == shares, (shares, b.sos_shares("Gina"))
        assert a.info(gina)["sos_share_id"] == b.info(gina)["sos_share_id"] == shares[0]["share_id"]
        for flare in (a, b):
            status, share = flare.call("GET", f"/api/v1/shares/{shares[0]['share_id']}")
            assert status == 200 and (share["last"]["lat"], share["last"]["lon"]) == (fix.lat, fix.lon), (status, share)

        # Each contact was told of each SOS once.
        for name in ("Frank", "Gina"):
            started_mails = mail.wait_for(subject(f"SOS: {name} needs help"), 2, 20, f"{name}'s SOS mails")
            assert sorted(m.to[0] for m in started_mails) == ["dad@example.org", "mum@example.org"], started_mails
        a.assert_log_clean()
    finally:
        stack.stop()
