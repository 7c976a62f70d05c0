"""A track to hand over, read by independent libraries (`make scripts-test`; about 10 s).

`make run`'s flared; a share fed positions over HTTP ingest as a phone sends them; its track written by
`flare share export --gpx --geojson --kml` (the owner key) and fetched through the share's link, then read by libraries
that are not Flare's, from PyPI: `gpxpy` (GPX 1.1), `geojson` (RFC 7946, its own validation) and `fastkml` (KML 2.2).
Every stored position must be there, in order, with its time, altitude and accuracy where known; the live KML feed
parses and shows the last position.
"""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
import time
from typing import Any

import pytest
from test_sos import Flare, run_logs, send

from scripts.flarestack import HOST, ROOT, free_span

from runsh import Instance

FLARE = os.path.join(ROOT, ".build", "debug", "flare")


def venv_import(name: str) -> Any:
    """A PyPI library installed by scripts/deps.sh into .build/venv (the tests run under Debian's Python)."""
    site = os.path.join(ROOT, ".build", "venv", "lib", f"python{sys.version_info.major}.{sys.version_info.minor}", "site-packages")
    if site not in sys.path:
        sys.path.append(site)
    return __import__(name)


def positions(count: int) -> list[dict[str, Any]]:
    """`count` OwnTracks locations a second apart, ending now: a walk north."""
    now = int(time.time())
    return [{"_type": "location", "lat": round(47.36 + n * 1e-4, 6), "lon": round(8.54 + (n % 5) * 1e-5, 6), "tst": now - count + n,
             "acc": 8 + n % 4, "alt": 410 + n, "vel": 5, "batt": 90 - n % 10} for n in range(count)]


@pytest.mark.bounded(60)
def test_every_position_is_in_the_gpx_geojson_and_kml_in_order(built: None, work: str, started: list[Instance]) -> None:
    gpxpy = venv_import("gpxpy")
    geojson = venv_import("geojson")
    fastkml = venv_import("fastkml")
    instance = Instance(work, "run", free_span(2))
    started.append(instance)
    instance.wait_until_running()
    with open(os.path.join(instance.data_dir, "owner.key")) as f:
        flare = Flare(f"http://{HOST}:{instance.http_port}", f.read().strip(), run_logs(instance))
    status, share = flare.call("POST", "/api/v1/shares", {"name": "Anna & the <hut>", "duration_s": 3600})
    assert status == 201, share
    sent = positions(60)
    for fix in sent:
        status, answer = flare.call("POST", f"/api/v1/shares/{share['share_id']}/locations", fix, key=share["device_token"])
        assert status == 202, answer

    # The owner's files, written by the command line.
    files = {kind: os.path.join(work, f"anna.{kind}") for kind in ("gpx", "geojson", "kml")}
    env = dict(os.environ, FLARE_SERVER_URL=flare.base, FLARE_OWNER_KEY=flare.owner_key)
    done = subprocess.run([FLARE, "share", "export", share["share_id"], "--gpx", files["gpx"], "--geojson", files["geojson"], "--kml", files["kml"]],
                          env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("wrote ") == 3, done.stdout

    times = [datetime.datetime.fromtimestamp(fix["tst"], datetime.timezone.utc) for fix in sent]
    with open(files["gpx"]) as f:
        gpx = gpxpy.parse(f)
    assert gpx.version == "1.1" and gpx.name == "Anna & the <hut>"
    points = [point for track in gpx.tracks for segment in track.segments for point in segment.points]
    assert [(p.latitude, p.longitude) for p in points] == [(fix["lat"], fix["lon"]) for fix in sent]
    assert [p.time for p in points] == times
    assert [p.elevation for p in points] == [float(fix["alt"]) for fix in sent]
    accuracy = [[child.text for child in p.extensions if child.tag.endswith("accuracy")] for p in points]
    assert accuracy == [[str(fix["acc"])] for fix in sent], accuracy[:3]

    with open(files["geojson"]) as f:
        collection = geojson.load(f)
    assert collection.is_valid, collection.errors()
    line, last = collection["features"]
    assert line["geometry"]["type"] == "LineString" and line["geometry"]["coordinates"] == [[fix["lon"], fix["lat"]] for fix in sent]
    assert last["geometry"]["coordinates"] == [sent[-1]["lon"], sent[-1]["lat"], sent[-1]["alt"]]
    assert last["properties"]["time"] == times[-1].strftime("%Y-%m-%dT%H:%M:%SZ") and last["properties"]["accuracy_m"] == sent[-1]["acc"]

    with open(files["kml"], "rb") as f:
        document = fastkml.KML.from_string(f.read())
    placemarks = list(walk(document))
    tracks = [p for p in placemarks if type(p.kml_geometry).__name__ == "LineString"]
    stamped = [p for p in placemarks if p.times is not None]
    assert len(tracks) == 1 and len(stamped) == len(sent), (len(tracks), len(stamped))
    assert [tuple(c[:2]) for c in tracks[0].geometry.coords] == [(fix["lon"], fix["lat"]) for fix in sent]
    assert [p.times.timestamp.dt for p in stamped] == times

    # The same track through the link; the live feed.
    token = share["share_url"].rsplit("/", 1)[1]
    status, _, body = send(f"{flare.base}/api/v1/view/{token}/track.gpx")
    assert status == 200
    with open(files["gpx"], "rb") as f:
        assert body == f.read(), "the link's track is the owner's"
    status, headers, feed = send(f"{flare.base}/s/{token}/feed.kml")
    assert status == 200 and headers["Content-Type"] == "application/vnd.google-earth.kml+xml"
    live = list(walk(fastkml.KML.from_string(feed)))
    assert any(p.times is not None and p.times.timestamp.dt == times[-1] for p in live), feed[-400:]


def walk(element: Any):
    """Every Placemark below a KML element."""
    for feature in getattr(element, "features", []) or []:
        if type(feature).__name__ == "Placemark":
            yield feature
        else:
            yield from walk(feature)


def test_the_export_command_says_what_it_needs(built: None) -> None:
    done = subprocess.run([FLARE, "share", "export", "x"], capture_output=True, text=True, timeout=30,
                          env=dict(os.environ, FLARE_SERVER_URL="http://127.0.0.1:9", FLARE_OWNER_KEY="k"))
    assert done.returncode != 0 and "--gpx FILE" in done.stderr, (done.returncode, done.stderr)

