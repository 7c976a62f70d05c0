"""Fixtures for the viewer's real-browser tests (headless Chromium through Selenium).

Everything that knows how to reach a running Flare lives in `FlareBackend`; the tests only call
`create()`, `publish()` and `stop()`. With `--flare-bin DIR` (scripts/browser-test.sh passes it) the run starts
its own broker and flared of that build (a `scripts.flarestack.Stack` on free loopback ports in a temp directory,
stopped at the end) and sets the variables below for it. Otherwise, the environment says where Flare is:

  FLARE_BASE_URL      where the gateway answers, e.g. http://127.0.0.1:8080 (required; tests skip without it)
  FLARE_DRIVER        "cli" (default) or "http"; "http" is the default when FLARE_OWNER_KEY is set
    cli:  FLARE_CLI (default "flare", split like a shell line) runs `share create --json` and
          `share stop <id>`; fixes go through `mosquitto_pub` to FLARE_MQTT_HOST (127.0.0.1):FLARE_MQTT_PORT
          with the share id as username and the device token as password.
    http: the owner API with FLARE_OWNER_KEY; fixes through POST /api/v1/shares/<id>/locations with
          the device token.
  FLARE_TIMEOUT_S     how long to wait for the page to show something (default 10)
  CHROMIUM_BIN, CHROMEDRIVER   default /usr/bin/chromium, /usr/bin/chromedriver
  FLARE_ARTIFACTS     where screenshots go (default <repo>/artifacts)

With --flare-bin the run also has a real SMTP server (scripts/flarestack MailCatcher) that flared mails contacts
through: the `mail` fixture (tests that need it skip without it). Its flared keeps a long trail in memory and lets one
address start and stop many SOS (every browser here is 127.0.0.1); push is on (FLARE_VAPID_SUBJECT).
"""
import json
import os
import pathlib
import random
import shlex
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from scripts.flarestack import MailCatcher, Stack

BASE_URL = os.environ.get('FLARE_BASE_URL', '').rstrip('/')
TIMEOUT_S = float(os.environ.get('FLARE_TIMEOUT_S', '10'))
ARTIFACTS = pathlib.Path(os.environ.get('FLARE_ARTIFACTS', pathlib.Path(__file__).resolve().parents[2] / 'artifacts'))


_stack = None
_mail = None


def pytest_addoption(parser):
    parser.addoption('--flare-bin', metavar='DIR',
                     help='start a broker and the flared of this build for the run (else FLARE_BASE_URL says where Flare is)')


def pytest_configure(config):
    """With --flare-bin: a broker and flared for the whole run, and the environment the tests and the CLI read."""
    global _stack, _mail, BASE_URL
    bin_dir = config.getoption('--flare-bin')
    if not bin_dir:
        return
    _mail = MailCatcher()
    # Only the plain MQTT listener, on a free port: no fixed TLS or WebSockets ports that a running `make run` may hold.
    # The SOS page's tests check every position in a share's trail, and press and stop from one address often.
    try:
        _stack = Stack(tempfile.mkdtemp(prefix='flare-browser-'), bin_dir=os.path.abspath(bin_dir),
                       env=dict(_mail.env(), FLARE_MQTT_CLIENT_ID='flared-browser-test', FLARE_MQTT_TLS_PORT='', FLARE_MQTT_WS_PORT='',
                                FLARE_TRAIL_LENGTH='1000', FLARE_SOS_RATE_PER_ADDRESS='5/200',
                                FLARE_VAPID_SUBJECT='mailto:ops@example.org'))
    except BaseException:
        _mail.stop()
        raise
    os.environ.update(_stack.a.env, FLARE_BASE_URL=f'http://127.0.0.1:{_stack.http_port}',
                      FLARE_CLI=os.path.join(_stack.bin, 'flare'))
    BASE_URL = os.environ['FLARE_BASE_URL']


def pytest_terminal_summary(terminalreporter, exitstatus):
    if _stack and exitstatus:
        with open(_stack.a.log, errors='replace') as f:
            terminalreporter.write_line('--- flared log (tail)\n' + ''.join(f.readlines()[-40:]))


def pytest_unconfigure(config):
    if _stack:
        _stack.stop()
        shutil.rmtree(_stack.work, ignore_errors=True)
    if _mail:
        _mail.stop()


class Share:
    def __init__(self, created):
        self.created = created  # the flat create response, all strings
        self.id = created['share_id']
        self.device_token = created['device_token']
        self.topic = created.get('mqtt_topic') or f'flare/v1/shares/{self.id}/location'
        # share_url names the public host; the tests talk to FLARE_BASE_URL, so keep only the path.
        self.path = urllib.parse.urlsplit(created['share_url']).path
        self.view_token = self.path.rsplit('/', 1)[-1]

    def url(self, query=''):
        return BASE_URL + self.path + (('?' + query) if query else '')


class FlareBackend:
    """Create a share, publish fixes into it, stop it. Adapt here, not in the tests."""

    def __init__(self):
        self.owner_key = os.environ.get('FLARE_OWNER_KEY')
        self.mode = os.environ.get('FLARE_DRIVER') or ('http' if self.owner_key else 'cli')
        self.cli = shlex.split(os.environ.get('FLARE_CLI', 'flare'))
        self.mqtt_host = os.environ.get('FLARE_MQTT_HOST', '127.0.0.1')
        self.mqtt_port = os.environ.get('FLARE_MQTT_PORT', '1883')
        self._last_tst = 0

    def create(self, name='Anna', duration_s=3600):
        if self.mode == 'http':
            created = http_json('POST', '/api/v1/shares', {'duration_s': duration_s, 'name': name}, self.owner_key)
        else:
            out = subprocess.run(self.cli + ['share', 'create', '--json', '--name', name], check=True, capture_output=True, text=True, timeout=30)
            created = json.loads(out.stdout)
        return Share(created)

    def create_e2e(self, name='Anna'):
        """An end-to-end encrypted share: (the share, its passphrase). The CLI makes the passphrase and keeps it."""
        out = subprocess.run(self.cli + ['share', 'create', '--e2e', '--json', '--name', name], check=True, capture_output=True, text=True, timeout=30)
        created = json.loads(out.stdout)
        passphrase = urllib.parse.urlsplit(created['e2e_url']).fragment.split('k=', 1)[1]
        return Share(created), passphrase

    def publish_sealed(self, share, fix, passphrase):
        """Publish one location sealed as the OwnTracks apps seal it, by PyNaCl (an implementation other than
        Flare's): secretbox keyed by the passphrase's UTF-8 bytes zero-padded to 32, nonce | tag | ciphertext."""
        self.publish_encrypted(share, seal(json.dumps(dict({'_type': 'location'}, **fix)).encode(), passphrase))
        return fix

    def publish_encrypted(self, share, data):
        """Publish an OwnTracks `encrypted` message with this `data` (base64), whatever it holds."""
        subprocess.run(['mosquitto_pub', '-h', self.mqtt_host, '-p', str(self.mqtt_port), '-u', share.id, '-P', share.device_token,
                        '-i', f'flare-{share.id}-browser-test', '-t', share.topic, '-q', '1', '-r',
                        '-m', json.dumps({'_type': 'encrypted', 'data': data})], check=True, capture_output=True, timeout=30)

    def publish(self, share, fix):
        """Publish one OwnTracks location; returns the fix as sent."""
        payload = dict({'_type': 'location'}, **fix)
        if self.mode == 'http':
            http_json('POST', f'/api/v1/shares/{share.id}/locations', payload, share.device_token)
        else:
            subprocess.run(['mosquitto_pub', '-h', self.mqtt_host, '-p', str(self.mqtt_port), '-u', share.id,
                            '-P', share.device_token, '-i', f'flare-{share.id}-browser-test', '-t', share.topic, '-q', '1', '-r', '-m', json.dumps(payload)],
                           check=True, capture_output=True, timeout=30)
        return fix

    def ingest(self, share, fix):
        """Post one fix over HTTP ingest, as an app without MQTT does; returns the fix as sent."""
        http_json('POST', f'/api/v1/shares/{share.id}/locations', dict({'_type': 'location'}, **fix), share.device_token)
        return fix

    def contact(self, name):
        """A new contact of the owner key; returns its id."""
        if self.mode == 'http':
            return http_json('POST', '/api/v1/contacts', {'name': name}, self.owner_key)['id']
        out = subprocess.run(self.cli + ['contacts', 'add', name, '--json'], check=True, capture_output=True, text=True, timeout=30)
        return json.loads(out.stdout)['id']

    def api_key(self):
        """An owner key for the HTTP API: the run's, or (driving the CLI) a new admin key made with `flare keys create`."""
        if not self.owner_key:
            out = subprocess.run(self.cli + ['keys', 'create', '--admin', '--label', 'browser-tests'], check=True, capture_output=True, text=True,
                                 timeout=30)
            self.owner_key = out.stdout.strip().splitlines()[-1]
        return self.owner_key

    def sos_device(self, contact_ids, name='Anna', pin=None, duress_pin=None):
        """A device (POST /api/v1/devices) whose SOS is started (POST /api/v1/devices/sos): (its secret, the SOS answer)."""
        body = {'name': name, 'contacts': contact_ids}
        if pin:
            body['pin'] = pin
        if duress_pin:
            body['duress_pin'] = duress_pin
        secret = http_json('POST', '/api/v1/devices', body, self.api_key())['secret']
        return secret, http_json('POST', '/api/v1/devices/sos', {}, secret)

    def create_with_contacts(self, contact_ids, name='Anna'):
        """A share with a personal link per contact: (the share, [(link id, link path)])."""
        if self.mode == 'http':
            created = http_json('POST', '/api/v1/shares', {'name': name, 'contacts': contact_ids}, self.owner_key)
        else:
            flags = [arg for contact in contact_ids for arg in ('--contact', contact)]
            out = subprocess.run(self.cli + ['share', 'create', '--json', '--name', name] + flags, check=True, capture_output=True, text=True, timeout=30)
            created = json.loads(out.stdout)
        links = [(link['link_id'], urllib.parse.urlsplit(link['url']).path) for link in created.pop('links')]
        return Share(created), links

    def checkin(self, contact_ids, in_s, name='Anna'):
        """Arms a check-in with no grace; returns (its id, a Share for its device credentials)."""
        if self.mode == 'http':
            armed = http_json('POST', '/api/v1/checkins', {'in_s': in_s, 'grace_s': 0, 'contacts': contact_ids, 'name': name}, self.owner_key)
        else:
            flags = [arg for contact in contact_ids for arg in ('--contact', contact)]
            out = subprocess.run(self.cli + ['checkin', 'start', '--in', f'{in_s}s', '--grace', '0s', '--name', name, '--json'] + flags,
                                 check=True, capture_output=True, text=True, timeout=30)
            armed = json.loads(out.stdout)
        share = Share(dict(armed, share_url='/s/none-before-the-deadline'))
        return armed['checkin_id'], share

    def links(self, share):
        """The share's personal links: [(link id, link path)]."""
        if self.mode == 'http':
            listed = http_json('GET', f'/api/v1/shares/{share.id}/links', None, self.owner_key)
        else:
            out = subprocess.run(self.cli + ['share', 'links', share.id, '--json'], check=True, capture_output=True, text=True, timeout=30)
            listed = json.loads(out.stdout)
        return [(link['link_id'], urllib.parse.urlsplit(link['url']).path) for link in listed['links']]

    def withdraw(self, share, link_id):
        if self.mode == 'http':
            req = urllib.request.Request(BASE_URL + f'/api/v1/shares/{share.id}/links/{link_id}', method='DELETE',
                                         headers={'Authorization': 'Bearer ' + self.owner_key})
            urllib.request.urlopen(req, timeout=30).read()
        else:
            subprocess.run(self.cli + ['share', 'withdraw', share.id, link_id], check=True, capture_output=True, timeout=30)

    def stop(self, share):
        if self.mode == 'http':
            http_json('POST', f'/api/v1/shares/{share.id}/stop', {}, self.owner_key)
        else:
            subprocess.run(self.cli + ['share', 'stop', share.id], check=True, capture_output=True, timeout=30)

    def fix(self, age_s=0, **extra):
        """A fresh fix at a random spot; coordinates have exactly five decimals, as the page prints them.
        tst strictly increases across the run so no two fixes collide."""
        tst = int(time.time()) - age_s
        if age_s == 0:
            tst = max(tst, self._last_tst + 1)
            self._last_tst = tst
        f = {'lat': round(48.1 + random.randint(0, 9999) / 1e5, 5), 'lon': round(11.5 + random.randint(0, 9999) / 1e5, 5),
             'tst': tst, 'acc': 12, 'vel': 4, 'cog': 270, 'batt': 81}
        f.update(extra)
        return {k: v for k, v in f.items() if v is not None}  # unknown fields are absent, not null


def seal(plaintext, passphrase):
    """`data` of an OwnTracks `encrypted` message, by PyNaCl: base64 of nonce | tag | ciphertext."""
    import base64

    import nacl.secret
    key = passphrase.encode()[:32].ljust(32, b'\0')
    return base64.b64encode(bytes(nacl.secret.SecretBox(key).encrypt(plaintext))).decode()


def http_json(method, path, body, bearer=None):
    req = urllib.request.Request(BASE_URL + path, method=method, data=json.dumps(body).encode(),
                                 headers={'Content-Type': 'application/json'})
    if bearer:
        req.add_header('Authorization', 'Bearer ' + bearer)
    with urllib.request.urlopen(req, timeout=30) as r:
        text = r.read().decode()
        return json.loads(text) if text else {}


def http_get(path, headers=None):
    """(status, headers, body) without raising on 4xx."""
    req = urllib.request.Request(BASE_URL + path, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def tile_host_pattern(tile_url):
    """The host part of an XYZ template as a glob: 'https://{s}.tile.example/{z}/{x}/{y}.png' -> '*.tile.example'."""
    netloc = urllib.parse.urlsplit(tile_url.replace('{s}', 'SUBDOMAIN')).netloc
    return netloc.replace('SUBDOMAIN', '*')


def coord_text(fix):
    return f"{fix['lat']:.5f}, {fix['lon']:.5f}"


class CuttableProxy:
    """A TCP relay in front of the gateway whose network can be cut: `down()` drops every open
    connection (the SSE stream included) and refuses new ones until `up()`. Closer to a phone losing
    signal than Chromium's offline emulation, which leaves an open stream running."""

    def __init__(self, base_url):
        u = urllib.parse.urlsplit(base_url)
        self.target = (u.hostname, u.port or 80)
        self.server = socket.create_server(('127.0.0.1', 0))
        self.url = f'http://127.0.0.1:{self.server.getsockname()[1]}'
        self.is_up = True
        self.lock = threading.Lock()
        self.socks = set()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            if not self.is_up:
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=10)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.socks |= {client, upstream}
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, a, b):
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                self._kill(s)

    def _kill(self, s):
        with self.lock:
            self.socks.discard(s)
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()

    def down(self):
        self.is_up = False
        with self.lock:
            socks = list(self.socks)
        for s in socks:
            self._kill(s)

    def up(self):
        self.is_up = True

    def close(self):
        self.down()
        self.server.close()


@pytest.fixture
def cuttable():
    proxy = CuttableProxy(BASE_URL)
    yield proxy
    proxy.close()


@pytest.fixture(scope='session')
def mail():
    """The run's SMTP server (a MailCatcher): what flared mailed to contacts."""
    if _mail is None:
        pytest.skip('no SMTP server of this run (--flare-bin starts one)')
    return _mail


@pytest.fixture(scope='session')
def flare():
    if not BASE_URL:
        pytest.skip('FLARE_BASE_URL not set')
    return FlareBackend()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, 'rep_' + rep.when, rep)


@pytest.fixture
def viewer(request):
    """Factory for a headless Chromium sized like a phone. Options:
    lang: Accept-Language and UI language; no_eventsource: delete window.EventSource before any page script;
    blocked: URL patterns the browser refuses (Network.setBlockedURLs)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    drivers = []

    def make(lang='en-US', no_eventsource=False, blocked=()):
        opts = webdriver.ChromeOptions()
        opts.binary_location = os.environ.get('CHROMIUM_BIN', '/usr/bin/chromium')
        for a in ('--headless=new', '--no-sandbox', '--disable-dev-shm-usage', '--disable-gpu', f'--lang={lang}'):
            opts.add_argument(a)
        opts.add_experimental_option('prefs', {'intl.accept_languages': lang})
        opts.add_experimental_option('mobileEmulation', {'deviceMetrics': {'width': 390, 'height': 844, 'pixelRatio': 2}})
        opts.set_capability('goog:loggingPrefs', {'browser': 'ALL', 'performance': 'ALL'})
        d = webdriver.Chrome(service=Service(os.environ.get('CHROMEDRIVER', '/usr/bin/chromedriver')), options=opts)
        drivers.append(d)
        d.set_page_load_timeout(30)
        # Record CSP violations from the very first script on.
        d.execute_cdp_cmd('Page.addScriptToEvaluateOnNewDocument', {'source':
            "window.__csp=[];document.addEventListener('securitypolicyviolation',function(e){"
            "window.__csp.push(e.violatedDirective+' '+e.blockedURI+' '+e.sourceFile+':'+e.lineNumber)});"})
        if no_eventsource:
            d.execute_cdp_cmd('Page.addScriptToEvaluateOnNewDocument', {'source': 'delete window.EventSource;'})
        d.execute_cdp_cmd('Network.enable', {})
        if blocked:
            d.execute_cdp_cmd('Network.setBlockedURLs', {'urls': list(blocked)})
        return d

    yield make
    failed = getattr(request.node, 'rep_call', None) is not None and request.node.rep_call.failed
    for i, d in enumerate(drivers):
        if failed:
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            try:
                d.save_screenshot(str(ARTIFACTS / f'failed-{request.node.name}-{i}.png'))
            except Exception:
                pass
        d.quit()
