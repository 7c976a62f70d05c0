"""The SOS page in a real browser: the phone's side of an SOS (GET /sos, set up once with /sos#d=<secret>).

A headless Chromium is the phone: its position is set through the DevTools protocol (Emulation.setGeolocationOverride),
its network cut with Network.emulateNetworkConditions, or Flare made unreachable behind conftest's CuttableProxy.
What is checked is what the family gets: the mails (the run's real SMTP server), the personal links' viewer pages, the
share's positions as stored (the view JSON's trail) and as published (an MQTT subscription with a watch token).
Every wait is for a visible change; the page's test hooks are body[data-*] (sos.html names them).
`./scripts/browser-test.sh -k sos_page` runs these alone.
"""
import json
import os
import re
import subprocess
import threading
import time
import urllib.parse
import urllib.request

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select
from test_viewer import axe_violations, shot, text, wait_coords

from scripts.flarestack import wait_until

from conftest import ARTIFACTS, BASE_URL, TIMEOUT_S, http_get, http_json

MUM_PHONE, DAD_PHONE = '+4915111111111', '+4915122222222'
# Munich, moving north in steps of about 11 m: five decimals, as the viewer prints them.
HOME = (48.13715, 11.57612)


def step(i):
    return (round(HOME[0] + i * 0.0001, 5), HOME[1])


# --- the family, the device, the phone ---------------------------------------------------------------------------

@pytest.fixture(scope='module')
def family(flare):
    """Mum and Dad, with an address each (mail) and a number each (the SMS fallback)."""
    key = flare.api_key()
    ids = {}
    for name, phone in (('Mum', MUM_PHONE), ('Dad', DAD_PHONE)):
        ids[name] = http_json('POST', '/api/v1/contacts', {'name': name, 'email': f'{name.lower()}@example.org', 'phone': phone}, key)['id']
    return ids


class Device:
    def __init__(self, flare, family, name, **settings):
        self.key = flare.api_key()
        self.name = name
        made = http_json('POST', '/api/v1/devices', dict({'name': name, 'contacts': [family['Mum'], family['Dad']]}, **settings), self.key)
        self.id, self.secret = made['device_id'], made['secret']

    def sos(self):
        """What the device reads of its SOS (GET /api/v1/devices/sos)."""
        status, _, body = http_get('/api/v1/devices/sos', {'Authorization': 'Bearer ' + self.secret})
        assert status == 200, body
        return json.loads(body)

    def owner_view(self):
        """The device as its owner sees it: `sos` is none, live, duress or ended."""
        status, _, body = http_get(f'/api/v1/devices/{self.id}', {'Authorization': 'Bearer ' + self.key})
        assert status == 200, body
        return json.loads(body)

    def links(self):
        """The live SOS's personal links, by contact name: their paths."""
        share = wait_until(lambda: self.sos().get('share_id'), TIMEOUT_S, f"{self.name}'s SOS share")
        status, _, body = http_get(f'/api/v1/shares/{share}/links', {'Authorization': 'Bearer ' + self.key})
        assert status == 200, body
        return {link['name']: urllib.parse.urlsplit(link['url']).path for link in json.loads(body)['links']}

    def trail(self, link_path):
        status, _, body = http_get('/api/v1/view/' + link_path.rsplit('/', 1)[-1])
        assert status == 200, body
        return json.loads(body)['trail']


def phone(viewer, lang='en-US', location=True, at=HOME):
    """A browser as a phone: location allowed (or refused), at `at`."""
    d = viewer(lang=lang)
    if location:
        d.execute_cdp_cmd('Browser.grantPermissions', {'permissions': ['geolocation']})
        try:
            d.execute_cdp_cmd('Browser.grantPermissions', {'permissions': ['geolocation', 'wakeLockScreen']})
        except Exception:
            pass  # a Chromium without the Wake Lock permission: the page goes on without it
        move(d, at)
    else:
        d.execute_cdp_cmd('Browser.setPermission', {'permission': {'name': 'geolocation'}, 'setting': 'denied'})
    return d


def move(d, at, acc=8):
    d.execute_cdp_cmd('Emulation.setGeolocationOverride', {'latitude': at[0], 'longitude': at[1], 'accuracy': acc})


def hook(d, name):
    return d.find_element(By.TAG_NAME, 'body').get_attribute('data-' + name)


def wait_for(d, cond, what, timeout=TIMEOUT_S):
    return wait_until(lambda: cond(d), timeout, lambda: f'{what} (the page: screen={_hook(d, "screen")!r} '
                      f'queued={_hook(d, "queued")!r} sent={_hook(d, "sent")!r} net={_hook(d, "net")!r})',
                      interval=0.1, ignoring=(Exception,))


def _hook(d, name):
    try:
        return hook(d, name)
    except Exception:
        return None


def wait_screen(d, screen, timeout=TIMEOUT_S):
    wait_for(d, lambda drv: hook(drv, 'screen') == screen and hook(drv, 'i18n') == 'ready', f'the {screen} screen', timeout)


def open_page(d, device, base=BASE_URL):
    """The setup link, as `flare devices setup` prints it; ready once the device's card (its name) is shown."""
    d.get(f'{base}/sos#d={device.secret}')
    wait_screen(d, 'idle')
    wait_for(d, lambda drv: device.name in text(drv, '#device'), "the device's card")


def size(d, element_id):
    return d.execute_script("var r = document.getElementById(arguments[0]).getBoundingClientRect(); return [r.width, r.height]", element_id)


def visible(d, css):
    return d.find_element(By.CSS_SELECTOR, css).is_displayed()


def click(d, css):
    d.find_element(By.CSS_SELECTOR, css).click()


def no_violations(d, what):
    found = axe_violations(d)
    assert found == [], f'{what}: {found}'


def stopped_text(d):
    """The stopped screen as read, its time masked: all that could differ between a stop and a duress."""
    return re.sub(r'\d{1,2}:\d{2}(\s?[AP]M)?', '<time>', text(d, '#main'))


class Subscriber:
    """An MQTT subscription to the share's positions with a watch token (mosquitto_sub): each as published, in
    order. Ready once the broker acknowledged the subscription (mosquitto_sub -d says so)."""

    def __init__(self, device):
        share = device.sos()['share_id']
        watch = http_json('POST', f'/api/v1/shares/{share}/watch-tokens', {}, device.key)
        self.fixes = []
        self.ready = threading.Event()
        self.proc = subprocess.Popen(['mosquitto_sub', '-d', '-h', os.environ.get('FLARE_MQTT_HOST', '127.0.0.1'),
                                      '-p', os.environ.get('FLARE_MQTT_PORT', '1883'), '-V', 'mqttv5', '-u', share,
                                      '-P', watch['watch_token'], '-i', watch['mqtt_client_id_prefix'] + 'sos-page', '-q', '1',
                                      '-t', f'flare/v1/shares/{share}/location'],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        threading.Thread(target=self._read, daemon=True).start()
        assert self.ready.wait(TIMEOUT_S), 'the subscription was not acknowledged'

    def _read(self):
        for line in self.proc.stdout:
            if 'SUBACK' in line:
                self.ready.set()
            if not line.startswith('{'):
                continue
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if message.get('_type') == 'location':
                self.fixes.append(message)

    def close(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)


# --- the tests ---------------------------------------------------------------------------------------------------

def test_sos_page_setup_press_countdown_mails_and_a_contact_follows(flare, family, viewer, mail):
    """The setup link is kept and leaves the address bar; a press counts down, then the SOS starts with the position:
    Mum and Dad get their mails with their links, Mum's page shows the position and follows it as the phone moves,
    her "on my way" reaches the phone. No request leaves Flare's origin, nothing breaks the CSP."""
    anna = Device(flare, family, 'Anna', countdown_s=4)
    d = phone(viewer)
    open_page(d, anna)
    assert '#' not in d.current_url and anna.secret not in d.current_url, 'the secret left in the address bar'
    assert d.execute_script("return localStorage.getItem('flare-sos-secret')") == anna.secret
    assert text(d, '#idle-hint') == 'Press SOS to send your live location to Mum and Dad.'
    button = size(d, 'press')
    click(d, '#press')
    wait_screen(d, 'countdown')
    assert re.match(r'^Sending SOS in [1-4] s$', text(d, '#count-h'))
    assert size(d, 'cancel') == button, 'the Cancel is as large as the button'
    wait_screen(d, 'sharing')
    wait_for(d, lambda drv: re.match(r'^Sharing with Mum and Dad · ends in \d+ (h \d+ )?min$', text(drv, '#sh-line')), 'the sharing line')
    wait_for(d, lambda drv: text(drv, '#fix-line').startswith('Last position just now, ±8 m')
             or text(drv, '#fix-line').startswith('Last position'), 'the last fix line')
    mails = mail.wait_for(lambda m: m.subject == 'SOS: Anna needs help', 2, 20, "Anna's SOS mails")
    assert sorted(m.to[0] for m in mails) == ['dad@example.org', 'mum@example.org']
    link = {m.to[0]: re.search(r'https?://[^\s/]+(/s/[A-Za-z0-9_-]+)', m.text).group(1) for m in mails}
    assert link['mum@example.org'] != link['dad@example.org']
    assert set(anna.links().values()) == set(link.values())

    # Mum opens her link: the first fix went with the start.
    mum = viewer()
    mum.get(BASE_URL + link['mum@example.org'])
    wait_coords(mum, {'lat': HOME[0], 'lon': HOME[1]})
    wait_for(d, lambda drv: re.search(r'^Mum (opened the link|is watching) ', text(drv, '#opened')), 'Mum opened her link, as the phone reads it',
             TIMEOUT_S + 5)
    assert 'Dad has not opened the link yet' in text(d, '#opened')
    # The phone moves; Mum's page follows.
    for i in (1, 2, 3):
        move(d, step(i))
        wait_coords(mum, {'lat': step(i)[0], 'lon': step(i)[1]})
    # Until someone answers, the phone says so, and when everyone is alerted again (the ladder, 300 s by default).
    wait_for(d, lambda drv: text(drv, '#answers').startswith('Nobody has answered yet. Everyone is alerted again at '), 'nobody answered yet')
    shot(d, 'sos-nobody-yet.png')
    # Mum answers; the phone hears it, and the ladder ends.
    mum.find_element(By.CSS_SELECTOR, '.answer-buttons [data-kind="on_my_way"]').click()
    wait_for(d, lambda drv: re.match(r'^Mum: on my way · ', text(drv, '#answers')), 'the answer on the phone', TIMEOUT_S + 5)
    shot(d, 'sos-sharing.png')
    assert hook(d, 'awake') == 'held', 'the screen wake lock'
    assert d.execute_script('return window.__csp') == []
    own = urllib.parse.urlsplit(BASE_URL).netloc
    urls = [json.loads(e['message'])['message']['params']['request']['url']
            for e in d.get_log('performance') if '"Network.requestWillBeSent"' in e['message']]
    assert urls
    for u in urls:
        assert urllib.parse.urlsplit(u).netloc == own or u.startswith('data:'), f'third-party request: {u}'
        assert anna.secret not in u, f'the secret in a URL: {u}'
    # The page reloaded (or the home-screen app reopened) during the SOS: it goes on where it was.
    d.refresh()
    wait_screen(d, 'sharing')
    wait_for(d, lambda drv: re.match(r'^Mum: on my way · ', text(drv, '#answers')), 'the answer after a reload')
    move(d, step(4))
    wait_coords(mum, {'lat': step(4)[0], 'lon': step(4)[1]})


def test_sos_page_network_cut_while_moving_every_fix_arrives_in_order_once(flare, family, viewer):
    """The network goes for 20 s while the phone moves: the positions wait on the phone and all go out once it is back,
    in order, none twice (as published and as stored)."""
    ben = Device(flare, family, 'Ben', countdown_s=0)
    d = phone(viewer)
    open_page(d, ben)
    click(d, '#press')
    wait_screen(d, 'sharing')
    subscriber = Subscriber(ben)
    try:
        mum_link = ben.links()['Mum']
        moves = [step(1), step(2)]
        for at in moves:
            move(d, at)
            wait_for(d, lambda drv: int(hook(drv, 'sent')) >= moves.index(at) + 2, 'the position sent')
        d.execute_cdp_cmd('Network.emulateNetworkConditions', {'offline': True, 'latency': 0, 'downloadThroughput': -1, 'uploadThroughput': -1})
        cut_until = time.monotonic() + 20
        i = 3
        while time.monotonic() < cut_until:
            moves.append(step(i))
            move(d, step(i))
            # One a second at most (a position's time is in seconds): wait until this one is queued.
            wait_for(d, lambda drv: int(hook(drv, 'queued')) >= i - 2, f'position {i} queued while offline')
            time.sleep(1.1)
            i += 1
        queued = int(hook(d, 'queued'))
        assert queued >= 10, f'only {queued} positions waited during the cut'
        assert hook(d, 'net') == 'down'
        assert 'No network' in text(d, '#queue-note')
        d.execute_cdp_cmd('Network.emulateNetworkConditions', {'offline': False, 'latency': 0, 'downloadThroughput': -1, 'uploadThroughput': -1})
        wait_for(d, lambda drv: hook(drv, 'queued') == '0', 'the waiting positions sent', 30)
        sent = int(hook(d, 'sent'))
        # As stored: the trail holds every position once, the moves among them, in order.
        trail = wait_until(lambda: (lambda t: t if len(t) >= sent else None)(ben.trail(mum_link)), TIMEOUT_S, 'every sent position in the trail')
        stamps = [p['tst'] for p in trail]
        assert len(trail) == sent and stamps == sorted(set(stamps)), f'{sent} sent, trail {stamps}'
        coords = [(round(p['lat'], 5), round(p['lon'], 5)) for p in trail]
        assert [c for c in coords if c in moves] == [c for c in moves if c in coords]
        assert set(moves) <= set(coords), f'missing: {set(moves) - set(coords)}'
        # As published, in the order they arrived: what a phone sent twice or out of order would show here.
        wait_until(lambda: len(subscriber.fixes) >= sent - 1, TIMEOUT_S, 'the published positions')
        published = [f['tst'] for f in subscriber.fixes]
        assert published == sorted(set(published)), f'published out of order or twice: {published}'
        assert published == stamps[len(stamps) - len(published):]
    finally:
        subscriber.close()


def test_sos_page_location_refused_still_starts_and_the_viewer_waits_for_a_position(flare, family, viewer):
    cleo = Device(flare, family, 'Cleo', countdown_s=0)
    d = phone(viewer, location=False)
    open_page(d, cleo)
    wait_for(d, lambda drv: visible(drv, '#loc-idle') and 'Location is blocked' in text(drv, '#loc-idle'), 'the sentence on location')
    click(d, '#press')
    wait_screen(d, 'sharing')
    assert hook(d, 'loc') == 'denied'
    assert text(d, '#loc-note').startswith('Location is blocked for this page: allow it in the browser')
    assert text(d, '#fix-line') == 'No position yet.'
    dad = viewer()
    dad.get(BASE_URL + cleo.links()['Dad'])
    wait_for(dad, lambda drv: text(drv, '#updated') == 'Waiting for the first position…', 'the viewer says no position yet')


def test_sos_page_cancel_during_the_countdown_sends_nothing(flare, family, viewer, mail):
    dora = Device(flare, family, 'Dora', countdown_s=2)
    d = phone(viewer)
    open_page(d, dora)
    click(d, '#press')
    wait_screen(d, 'countdown')
    click(d, '#cancel')
    wait_screen(d, 'idle')
    # Past the countdown's end and a start's time: still nothing.
    end = time.monotonic() + 4
    while time.monotonic() < end:
        assert hook(d, 'screen') == 'idle'
        time.sleep(0.25)
    assert dora.sos()['status'] == 'none'
    assert dora.owner_view()['sos'] == 'none'
    assert not mail.mails(lambda m: 'Dora' in m.subject)
    # The home-screen shortcut (/sos#press) presses at once, and counts down as a press does.
    d.get(BASE_URL + '/sos#press')
    wait_screen(d, 'countdown')
    assert '#' not in d.current_url
    click(d, '#cancel')
    wait_screen(d, 'idle')
    assert dora.sos()['status'] == 'none'


def test_sos_page_stop_with_the_pin_and_the_duress_pin_look_the_same(flare, family, viewer):
    """A wrong PIN is refused and the SOS goes on; the right one stops it (Mum's page ends). The duress PIN shows the
    very same screen, while the share goes on for the family with the duress warning, and the positions keep coming."""
    eve = Device(flare, family, 'Eve', countdown_s=0, pin='4711', duress_pin='9999')
    fay = Device(flare, family, 'Fay', countdown_s=0, pin='4711', duress_pin='9999')
    pages = {}
    for who in (eve, fay):
        d = pages[who.name] = phone(viewer)
        open_page(d, who)
        click(d, '#press')
        wait_screen(d, 'sharing')
    eve_mum, fay_mum = viewer(), viewer()
    eve_mum.get(BASE_URL + eve.links()['Mum'])
    fay_mum.get(BASE_URL + fay.links()['Mum'])
    for v in (eve_mum, fay_mum):
        wait_coords(v, {'lat': HOME[0], 'lon': HOME[1]})

    def enter(d, pin):
        click(d, '#stop')
        wait_screen(d, 'pin')
        for digit in pin:
            click(d, f'#pad [data-key="{digit}"]')
        assert text(d, '#pin-dots') == '\u25CF' * len(pin)
        click(d, '#pin-ok')

    d = pages['Eve']
    enter(d, '1234')
    wait_for(d, lambda drv: text(drv, '#pin-error') == 'Wrong PIN. The SOS goes on.', 'the wrong PIN said')
    assert hook(d, 'screen') == 'pin' and eve.sos()['status'] == 'live'
    shot(d, 'sos-pin.png')
    no_violations(d, 'the PIN pad')
    click(d, '#pin-back')
    wait_screen(d, 'sharing')
    enter(d, '4711')
    wait_screen(d, 'stopped')
    wait_for(eve_mum, lambda drv: drv.find_element(By.ID, 'ended').is_displayed(), "Mum's page ends")
    assert eve.owner_view()['sos'] == 'ended'

    f = pages['Fay']
    enter(f, '9999')
    wait_screen(f, 'stopped')
    assert stopped_text(f) == stopped_text(d), 'the duress stop reads differently from a stop'
    assert [hook(f, k) for k in ('screen', 'loc', 'net')] == [hook(d, k) for k in ('screen', 'loc', 'net')]
    wait_for(fay_mum, lambda drv: drv.find_element(By.ID, 'checkin').is_displayed(), 'the duress warning on Mum\'s page')
    assert 'Fay may be under duress' in text(fay_mum, '#checkin')
    assert not fay_mum.find_element(By.ID, 'ended').is_displayed()
    assert fay.owner_view()['sos'] == 'duress' and fay.sos()['status'] == 'stopped'
    # The phone keeps sending while the page stays open; Mum's page follows. The stopped screen stays as it is.
    for i in (1, 2):
        move(f, step(i))
        wait_coords(fay_mum, {'lat': step(i)[0], 'lon': step(i)[1]})
    assert hook(f, 'screen') == 'stopped' and stopped_text(f) == stopped_text(d)


@pytest.mark.parametrize('lang', ['en', 'zh-CN'])
def test_sos_page_each_state_passes_axe_and_flare_unreachable_offers_sms(flare, family, viewer, cuttable, lang):
    """Idle, countdown, sharing, stopped and the SMS fallback, each audited (axe-core: no serious or critical
    violation) and photographed (artifacts/sos-<state>[-zh-CN].png). The fallback: Flare cannot be reached at the
    press: an sms: link to Mum's and Dad's numbers with the coordinates; the start goes through once Flare is back."""
    suffix = '' if lang == 'en' else '-' + lang
    gus = Device(flare, family, 'Gus' if lang == 'en' else '小古', countdown_s=10)
    d = phone(viewer, lang=lang if lang != 'en' else 'en-US')
    open_page(d, gus, cuttable.url)
    assert d.find_element(By.TAG_NAME, 'html').get_attribute('lang') == lang
    if lang == 'zh-CN':
        assert text(d, '#idle-hint') == '按下 SOS，把你的实时位置发送给Mum和Dad。'
    no_violations(d, 'idle')
    shot(d, f'sos-idle{suffix}.png')
    click(d, '#press')
    wait_screen(d, 'countdown')
    shot(d, f'sos-countdown{suffix}.png')
    no_violations(d, 'countdown')
    assert hook(d, 'screen') == 'countdown', 'the countdown ran out during the audit'
    click(d, '#cancel')
    wait_screen(d, 'idle')

    # No countdown from here on: the owner changes it, the page reads it on its next load.
    http_json('PATCH', f'/api/v1/devices/{gus.id}', {'countdown_s': 0}, gus.key)
    d.refresh()
    wait_screen(d, 'idle')
    wait_for(d, lambda drv: text(drv, '#idle-cd') == '', 'the countdown gone')
    click(d, '#press')
    wait_screen(d, 'sharing')
    wait_for(d, lambda drv: 'Dad' in text(drv, '#opened'), 'the links listed')
    click(d, '#extend')
    wait_for(d, lambda drv: visible(drv, '#sh-status'), 'extended')
    assert re.match(r'^Extended: ends in 1 h 5\d min\.$' if lang == 'en' else r'^已延长：1 小时 5\d 分钟后结束。$', text(d, '#sh-status')), \
        text(d, '#sh-status')
    no_violations(d, 'sharing')
    shot(d, f'sos-sharing{suffix}.png' if lang != 'en' else 'sos-sharing-extended.png')

    click(d, '#stop')
    wait_screen(d, 'pin')
    assert text(d, '#pin-h') == ('Stop sharing your location?' if lang == 'en' else '停止共享你的位置？')
    assert not visible(d, '#pad')
    click(d, '#pin-ok')
    wait_screen(d, 'stopped')
    no_violations(d, 'stopped')
    shot(d, f'sos-stopped{suffix}.png')

    # Flare unreachable at the press.
    click(d, '#again')
    wait_screen(d, 'idle')
    move(d, step(5))
    cuttable.down()
    click(d, '#press')
    wait_screen(d, 'fallback', START_WAIT_S)
    sms = d.find_element(By.ID, 'sms-all').get_attribute('href')
    assert sms.startswith(f'sms:{MUM_PHONE},{DAD_PHONE}?body='), sms
    message = urllib.parse.unquote(sms.split('body=', 1)[1])
    lat, lon = (f'{v:.5f}' for v in step(5))
    assert f'{lat}, {lon}' in message and message.endswith(f'https://www.openstreetmap.org/#map=18/{lat}/{lon}'), message
    assert '&' not in message, 'an Android messaging app would cut the body at the "&"'
    assert message == text(d, '#sms-text')
    each = [a.get_attribute('href') for a in d.find_elements(By.CSS_SELECTOR, '#sms-each a')]
    assert [h.split('?')[0] for h in each] == [f'sms:{MUM_PHONE}', f'sms:{DAD_PHONE}']
    if lang == 'en':
        assert message.startswith('SOS: Gus needs help. Last known position ')
        assert text(d, '#sms-all') == 'Text Mum and Dad'
    else:
        assert message.startswith('SOS：小古需要帮助。')
    no_violations(d, 'fallback')
    shot(d, f'sos-fallback{suffix}.png')
    # Flare is back: the page's own retries start the SOS.
    cuttable.up()
    wait_screen(d, 'sharing', 45)
    assert gus.sos()['status'] == 'live'
    if lang == 'en':
        shot(d, 'sos-sharing-after-fallback.png')


# The start waits 1 s for a first fix at most, then the fallback shows at once on a refused connection (5 s at most).
START_WAIT_S = TIMEOUT_S


def test_sos_page_is_installable_and_works_offline_across_a_reload(flare, family, viewer, cuttable):
    """Chromium's own installability check finds nothing. With Flare unreachable the home-screen app still opens from
    the service worker's copy, ready to press; a press offers the SMS fallback with the numbers the phone kept. The page
    closed and opened again without a network goes on trying, its positions kept in IndexedDB; once Flare is back, the
    SOS starts and every one of them arrives, in order."""
    hal = Device(flare, family, 'Hal', countdown_s=1)
    d = phone(viewer)
    open_page(d, hal, cuttable.url)
    shell = ['/sos', '/sos/sos.js', '/sos/sos.css', '/sos/i18n/en.json', '/sos/i18n/zh-CN.json', '/sos/manifest.webmanifest', '/sos/icon.svg']
    cached = ("var done = arguments[arguments.length - 1];"
              "caches.open('flare-sos-1').then(function (c) { return c.keys(); })"
              ".then(function (ks) { done(ks.map(function (r) { return new URL(r.url).pathname; })); }, function () { done([]); });")
    wait_for(d, lambda drv: drv.execute_script('return !!navigator.serviceWorker.controller')
             and set(shell) <= set(drv.execute_async_script(cached)), 'the worker in control, the shell cached', 20)
    assert not [k for k in d.execute_async_script(cached) if k.startswith('/api/')], 'the worker cached the API'
    errors = d.execute_cdp_cmd('Page.getInstallabilityErrors', {})['installabilityErrors']
    assert errors == [], errors
    manifest = d.execute_cdp_cmd('Page.getAppManifest', {})
    assert not manifest.get('errors'), manifest.get('errors')

    cuttable.down()
    assert http_get_status(cuttable.url + '/sos') is None, 'the proxy still answers'
    d.refresh()
    wait_screen(d, 'idle')
    assert text(d, '#press') == 'SOS' and 'Hal' in text(d, '#device')
    assert text(d, '#idle-hint') == 'Press SOS to send your live location to Mum and Dad.'
    click(d, '#press')
    wait_screen(d, 'fallback', START_WAIT_S + 1)
    assert d.find_element(By.ID, 'sms-all').get_attribute('href').startswith(f'sms:{MUM_PHONE},{DAD_PHONE}?body=')
    for i in (1, 2):
        move(d, step(i))
        wait_for(d, lambda drv: int(hook(drv, 'queued')) >= i + 1, f'position {i} queued')
    # Closed and opened again, still without a network: the press goes on, with the positions it had.
    d.refresh()
    wait_for(d, lambda drv: hook(drv, 'screen') in ('starting', 'fallback') and int(hook(drv, 'queued')) >= 3,
             'the press going on after the reload, its positions kept')
    wait_screen(d, 'fallback', START_WAIT_S)
    cuttable.up()
    wait_screen(d, 'sharing', 45)
    wait_for(d, lambda drv: hook(drv, 'queued') == '0', 'the kept positions sent', 20)
    trail = [(round(p['lat'], 5), round(p['lon'], 5)) for p in hal.trail(hal.links()['Mum'])]
    assert [c for c in trail if c in (HOME, step(1), step(2))][:3] == [HOME, step(1), step(2)], trail


def http_get_status(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status
    except Exception:
        return None


def test_sos_page_headers_manifest_and_weight(flare):
    status, headers, html = http_get('/sos', {'Accept-Language': 'zh-CN,zh;q=0.9'})
    assert status == 200 and b'lang="zh-CN"' in html and b'{{' not in html
    assert headers.get('Content-Security-Policy') == (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; manifest-src 'self'; "
        "worker-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
    assert headers.get('Referrer-Policy') == 'no-referrer'
    assert b' style=' not in html and b'<script>' not in html
    status, headers, body = http_get('/sos/manifest.webmanifest')
    manifest = json.loads(body)
    assert (manifest['name'], manifest['short_name'], manifest['start_url'], manifest['scope'], manifest['display']) == \
        ('Flare SOS', 'SOS', '/sos', '/sos', 'standalone')
    assert manifest['shortcuts'][0]['url'] == '/sos#press'
    status, headers, _ = http_get('/sos-sw.js')
    assert status == 200 and 'javascript' in headers.get('Content-Type', '')
    total = len(http_get('/sos')[2])
    for f in ('/sos/sos.js', '/sos/sos.css'):
        status, _, body = http_get(f)
        assert status == 200, f
        total += len(body)
    strings = max(len(http_get(f'/sos/i18n/{c}.json')[2]) for c in ('en', 'zh-CN'))
    (ARTIFACTS / 'sos-weight.txt').parent.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / 'sos-weight.txt').write_text(f'{total + strings}\n')
    assert total + strings < 40 * 1024, f'{total + strings} bytes'


def test_sos_page_without_a_secret_says_how_to_set_it_up(flare, viewer):
    d = viewer()
    d.get(BASE_URL + '/sos')
    wait_screen(d, 'setup')
    assert text(d, '#setup-text') == "Open this phone's setup link (from flare devices setup) here to make this page ready."
    assert not visible(d, '#press')
    # The language menu, as the viewer's; the choice is kept for the home-screen app, which opens /sos as it is.
    Select(d.find_element(By.ID, 'lang')).select_by_value('zh-CN')
    wait_for(d, lambda drv: text(drv, '#setup-text').startswith('请在这部手机上打开它的设置链接'), 'the page in Chinese')
    d.refresh()
    wait_screen(d, 'setup')
    assert d.find_element(By.TAG_NAME, 'html').get_attribute('lang') == 'zh-CN' and text(d, '#title') == 'Flare 紧急求救'

