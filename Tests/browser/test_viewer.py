"""The viewer page in a real browser: what a family member sees after opening the SMS link.

Every wait is for a visible change on the page (never sleep-then-assert). See conftest.py for the
environment, and README.md beside this file for how to run.
"""
import base64
import fnmatch
import json
import os
import re
import secrets
import subprocess
import time
import urllib.parse

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from scripts.flarestack import wait_until

from conftest import ARTIFACTS, BASE_URL, TIMEOUT_S, Share, coord_text, http_get, http_json, seal, tile_host_pattern

POLL_TIMEOUT_S = TIMEOUT_S + 6  # polling adds up to 3 s, the SSE give-up up to 8 s


def text(d, css):
    return d.find_element(By.CSS_SELECTOR, css).text


def body_attr(d, name):
    return d.find_element(By.TAG_NAME, 'body').get_attribute('data-' + name)


def wait_for(d, cond, what, timeout=TIMEOUT_S):
    """Waits for `cond(d)` with flarestack's wait_until; any exception is "not yet" (an element not there yet, a stale
    reference during a re-render). A failure says how the page stood then."""
    return wait_until(lambda: cond(d), timeout, lambda: f'{what} (the page: status={_safe(d, "#status")!r} '
                      f'updated={_safe(d, "#updated")!r} coords={_safe(d, "#coords")!r})', interval=0.1, ignoring=(Exception,))


def _safe(d, css):
    try:
        return text(d, css)
    except Exception:
        return None


def wait_coords(d, fix, timeout=TIMEOUT_S):
    want = coord_text(fix)
    wait_for(d, lambda drv: text(drv, '#coords') == want, f'#coords == {want}', timeout)


def shot(d, name):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    d.save_screenshot(str(ARTIFACTS / name))


def marker_transform(d):
    return d.execute_script("var m=document.querySelector('.fl-marker');return m?m.style.transform:null")


def test_page_shows_published_position(flare, viewer):
    share = flare.create()
    a = flare.publish(share, flare.fix(acc=12, vel=4, batt=81))
    d = viewer()
    d.get(share.url())
    wait_coords(d, a)
    assert body_attr(d, 'state') == 'active'
    wait_for(d, lambda drv: re.match(r'^Updated (just now|\d+ s ago)$', text(drv, '#updated')), '"Updated … ago"')
    assert text(d, '#accuracy') == '±12 m'
    assert text(d, '#battery') == '81%'
    assert text(d, '#speed') == '4 km/h'
    assert text(d, '#countdown').startswith('Ends in ')
    q = f"{a['lat']:.5f},{a['lon']:.5f}"
    assert d.find_element(By.ID, 'nav-apple').get_attribute('href') == f'https://maps.apple.com/?daddr={q}'
    assert d.find_element(By.ID, 'nav-google').get_attribute('href') == f'https://www.google.com/maps/dir/?api=1&destination={q}'
    assert d.find_element(By.ID, 'nav-geo').get_attribute('href') == f'geo:{q}'
    assert d.execute_script('return window.__csp') == []
    shot(d, 'viewer-live.png')


def test_new_fix_arrives_by_sse_without_reload(flare, viewer):
    share = flare.create()
    a = flare.publish(share, flare.fix())
    d = viewer()
    d.get(share.url())
    wait_coords(d, a)
    wait_for(d, lambda drv: body_attr(drv, 'conn') == 'live', 'SSE connected (data-conn=live)')
    d.execute_script('window.__sameDocument = true')
    before = marker_transform(d)
    b = flare.publish(share, flare.fix())
    wait_coords(d, b)
    assert d.execute_script('return window.__sameDocument') is True
    assert body_attr(d, 'conn') == 'live'
    wait_for(d, lambda drv: marker_transform(drv) != before, 'the marker to move')
    assert d.execute_script("return document.querySelectorAll('.leaflet-overlay-pane path').length") >= 2  # trail + circle


@pytest.mark.parametrize('how', ['no-eventsource', 'events-blocked'])
def test_polling_fallback_when_sse_unavailable(flare, viewer, how):
    share = flare.create()
    a = flare.publish(share, flare.fix())
    d = viewer(no_eventsource=True) if how == 'no-eventsource' else viewer(blocked=['*/events*'])
    d.get(share.url())
    wait_coords(d, a)
    wait_for(d, lambda drv: body_attr(drv, 'conn') == 'polling', 'fallback to polling', POLL_TIMEOUT_S)
    assert text(d, '#status') == 'Live'
    d.execute_script('window.__sameDocument = true')
    for _ in range(2):  # twice: one lucky poll is not polling
        b = flare.publish(share, flare.fix())
        wait_coords(d, b, POLL_TIMEOUT_S)
    assert d.execute_script('return window.__sameDocument') is True
    assert body_attr(d, 'conn') == 'polling'


def test_waiting_for_first_fix_then_it_appears(flare, viewer):
    share = flare.create()
    d = viewer()
    d.get(share.url())
    wait_for(d, lambda drv: text(drv, '#updated') == 'Waiting for the first position…', 'waiting message')
    assert d.find_element(By.ID, 'nav-apple').get_attribute('href') is None
    a = flare.publish(share, flare.fix())
    wait_coords(d, a)


def test_stop_shows_ended_and_keeps_last_position(flare, viewer):
    share = flare.create()
    a = flare.publish(share, flare.fix())
    d = viewer()
    d.get(share.url())
    wait_coords(d, a)
    flare.stop(share)
    wait_for(d, lambda drv: drv.find_element(By.ID, 'ended').is_displayed(), '#ended to appear')
    assert 'Location sharing has ended' in text(d, '#ended')
    assert 'The sender stopped sharing.' in text(d, '#ended')
    assert body_attr(d, 'state') == 'ended'
    assert text(d, '#status') == 'Ended'
    assert text(d, '#coords') == coord_text(a)
    assert re.match(r'^Updated .+', text(d, '#updated'))
    assert d.find_element(By.ID, 'nav-google').get_attribute('href')
    shot(d, 'viewer-ended.png')


def test_a_withdrawn_personal_link_says_so_and_shows_nothing_while_the_others_go_on(flare, viewer):
    mum, dad = flare.contact('Mum'), flare.contact('Dad')
    share, links = flare.create_with_contacts([mum, dad])
    a = flare.publish(share, flare.fix())
    d = viewer()
    d.get(BASE_URL + links[0][1])
    wait_coords(d, a)
    other = viewer()
    other.get(BASE_URL + links[1][1])
    wait_coords(other, a)
    flare.withdraw(share, links[0][0])
    wait_for(d, lambda drv: drv.find_element(By.ID, 'ended').is_displayed(), '#ended to appear')
    assert 'This link was withdrawn' in text(d, '#ended')
    assert 'no longer shows where they are' in text(d, '#ended')
    assert not d.find_element(By.ID, 'ended-last').is_displayed()
    wait_for(d, lambda drv: text(drv, '#coords') in ('', '—'), 'the position to go')
    assert 'Anna' not in text(d, '#title') and 'Anna' not in d.title, 'the page names nothing of the share'
    assert 'Waiting' not in text(d, '#updated')
    assert d.execute_script("return document.querySelector('.fl-marker') === null || !document.querySelector('.fl-marker').isConnected")
    shot(d, 'viewer-link-withdrawn.png')
    # Dad's link goes on: a new fix reaches his page.
    b = flare.publish(share, flare.fix())
    wait_coords(other, b)
    # The same page in Chinese.
    zh = viewer(lang='zh-CN')
    zh.get(BASE_URL + links[0][1])
    wait_for(zh, lambda drv: drv.find_element(By.ID, 'ended').is_displayed(), '#ended in Chinese')
    assert '此链接已被撤回' in text(zh, '#ended')


def test_a_missed_checkin_opens_with_who_did_not_check_in_and_the_last_position(flare, viewer):
    mum = flare.contact('Mum')
    _, share = flare.checkin([mum], in_s=2)
    a = flare.publish(share, flare.fix())
    # No link is live before the deadline; once it and its grace (none here) pass, the server makes Mum's.
    links = wait_until(lambda: flare.links(share), TIMEOUT_S, "the missed check-in's link", interval=0.3)
    d = viewer()
    d.get(BASE_URL + links[0][1])
    wait_coords(d, a)
    wait_for(d, lambda drv: drv.find_element(By.ID, 'checkin').is_displayed(), '#checkin to appear')
    banner = text(d, '#checkin')
    assert 'Anna did not check in by' in banner, banner
    assert 'Last position' in banner and '±12 m' in banner, banner
    shot(d, 'viewer-checkin-missed.png')
    zh = viewer(lang='zh-CN')
    zh.get(BASE_URL + links[0][1])
    wait_for(zh, lambda drv: drv.find_element(By.ID, 'checkin').is_displayed(), '#checkin in Chinese')
    assert '未在' in text(zh, '#checkin') and '报平安' in text(zh, '#checkin')


def test_a_duress_pin_keeps_the_page_live_with_a_warning_while_the_phone_says_stopped(flare, viewer):
    mum = flare.contact('Mum')
    secret, sos = flare.sos_device([mum], pin='4711', duress_pin='9999')
    link = urllib.parse.urlsplit(sos['links'][0]['url']).path
    share = Share(dict(share_id=sos['share_id'], device_token=sos['device_token'], share_url=sos['share_url']))
    a = flare.publish(share, flare.fix())
    d = viewer()
    d.get(BASE_URL + link)
    wait_coords(d, a)
    assert not d.find_element(By.ID, 'checkin').is_displayed()
    stopped = http_json('POST', '/api/v1/devices/sos/stop', {'pin': '9999'}, secret)
    assert stopped['status'] == 'stopped', stopped
    wait_for(d, lambda drv: drv.find_element(By.ID, 'checkin').is_displayed(), 'the duress alert to appear without a reload')
    banner = text(d, '#checkin')
    assert 'Anna may be under duress' in banner and 'Do not call or message it' in banner, banner
    assert not d.find_element(By.ID, 'ended').is_displayed(), 'the page goes on'
    b = flare.publish(share, flare.fix())
    wait_coords(d, b)
    shot(d, 'viewer-duress.png')
    zh = viewer(lang='zh-CN')
    zh.get(BASE_URL + link)
    wait_for(zh, lambda drv: drv.find_element(By.ID, 'checkin').is_displayed(), 'the duress alert in Chinese')
    assert '胁迫' in text(zh, '#checkin')


def open_stale_share(flare, viewer, send):
    """A share whose only fix (sent with `send`: MQTT or HTTP ingest) is older than the page's stale limit, open
    in the browser once the page says it is stale."""
    share = flare.create()
    status, _, html = http_get(share.path)
    assert status == 200
    stale_after = int(re.search(rb'data-stale-after="(\d+)"', html).group(1))
    old = send(share, flare.fix(age_s=stale_after + 90))
    d = viewer()
    d.get(share.url())
    wait_coords(d, old)
    wait_for(d, lambda drv: body_attr(drv, 'fresh') == 'stale', 'stale warning')
    return share, d


def test_stale_fix_shows_warning_until_a_fresh_one(flare, viewer):
    share, d = open_stale_share(flare, viewer, flare.publish)
    assert re.match(r'^No new position for \d+ min\.$', text(d, '#detail'))
    # Stale: the page offers to ask the phone; nothing says it is offline.
    wait_for(d, lambda drv: drv.find_element(By.ID, 'locate').is_displayed(), 'the locate button')
    assert not d.find_element(By.ID, 'tracker').is_displayed()
    assert re.match(r'^Updated \d+ min ago$', text(d, '#updated'))
    shot(d, 'viewer-stale.png')
    b = flare.publish(share, flare.fix())
    wait_coords(d, b)
    wait_for(d, lambda drv: body_attr(drv, 'fresh') == 'fresh', 'warning to clear')


def test_a_phone_reporting_over_http_goes_stale_and_the_page_says_why_it_cannot_be_offline(flare, viewer):
    _, d = open_stale_share(flare, viewer, flare.ingest)
    wait_for(d, lambda drv: drv.find_element(By.ID, 'tracker').is_displayed(), 'the note on HTTP phones')
    assert text(d, '#tracker') == 'This phone reports over the web, so Flare cannot tell whether it lost its connection.'
    assert 'offline' not in text(d, '#detail').lower()
    wait_for(d, lambda drv: drv.find_element(By.ID, 'locate').is_displayed(), 'the locate button')
    shot(d, 'viewer-stale-http.png')


def test_reconnecting_after_network_loss_then_fills_the_gap(flare, viewer, cuttable):
    share = flare.create()
    a = flare.publish(share, flare.fix())
    d = viewer()
    d.get(cuttable.url + share.path)
    wait_coords(d, a)
    wait_for(d, lambda drv: body_attr(drv, 'conn') == 'live', 'SSE connected')
    cuttable.down()
    wait_for(d, lambda drv: text(drv, '#status') == 'Reconnecting…', '"Reconnecting…"')
    assert body_attr(d, 'conn') == 'reconnecting'
    b = flare.publish(share, flare.fix())  # published while the viewer is cut off
    cuttable.up()
    wait_coords(d, b, POLL_TIMEOUT_S)
    wait_for(d, lambda drv: body_attr(drv, 'conn') in ('live', 'polling'), 'connection back')
    assert text(d, '#status') == 'Live'


def test_unknown_and_malformed_tokens_get_the_same_plain_not_found(flare, viewer):
    pages = []
    for token in [secrets.token_urlsafe(16), 'x', 'a' * 300, '..%2F..%2Fetc', '%00', 'abc.def']:
        status, headers, body = http_get('/s/' + token)
        assert status == 404, token
        assert 'text/html' in headers.get('Content-Type', '')
        pages.append(body)
        assert token.encode() not in body or token == 'x'
    assert all(p == pages[0] for p in pages), 'not-found page differs between tokens'
    d = viewer()
    d.get(BASE_URL + '/s/' + secrets.token_urlsafe(16))
    wait_for(d, lambda drv: text(drv, 'h1') == 'This link is not valid', 'not-found heading')
    assert d.find_elements(By.ID, 'map') == []
    shot(d, 'viewer-notfound.png')


def test_chinese_from_accept_language(flare, viewer):
    share = flare.create()
    status, _, html = http_get(share.path, {'Accept-Language': 'zh-CN,zh;q=0.9,en;q=0.5'})
    assert b'lang="zh-CN"' in html
    a = flare.publish(share, flare.fix())
    d = viewer(lang='zh-CN')
    d.get(share.url())
    wait_coords(d, a)
    assert d.find_element(By.TAG_NAME, 'html').get_attribute('lang') == 'zh-CN'
    wait_for(d, lambda drv: text(drv, '#status') == '实时', 'status 实时')
    assert text(d, '#nav-google') == 'Google 地图'
    flare.stop(share)
    wait_for(d, lambda drv: '位置共享已结束' in text(drv, '#ended'), '位置共享已结束')
    assert text(d, '#status') == '已结束'
    assert text(d, '#coords') == coord_text(a)
    shot(d, 'viewer-ended-zh-CN.png')
    # The not-found page follows Accept-Language too.
    d.get(BASE_URL + '/s/' + secrets.token_urlsafe(16))
    wait_for(d, lambda drv: text(drv, 'h1') == '此链接无效', 'not-found in Chinese')


def test_language_switcher(flare, viewer):
    share = flare.create()
    a = flare.publish(share, flare.fix())
    d = viewer()
    d.get(share.url())
    wait_coords(d, a)
    wait_for(d, lambda drv: text(drv, '#status') == 'Live', 'status Live')
    Select(d.find_element(By.ID, 'lang')).select_by_value('zh-CN')
    wait_for(d, lambda drv: text(drv, '#status') == '实时', 'status 实时 after switching')
    assert d.find_element(By.TAG_NAME, 'html').get_attribute('lang') == 'zh-CN'
    assert text(d, '#copy') == '复制坐标'
    assert re.search(r'(刚刚更新|秒前更新)', text(d, '#updated'))
    assert urllib.parse.parse_qs(urllib.parse.urlsplit(d.current_url).query).get('lang') == ['zh-CN']
    assert urllib.parse.urlsplit(d.current_url).path == share.path
    # The server honours ?lang= on reload.
    _, _, html = http_get(share.path + '?lang=zh-CN')
    assert b'lang="zh-CN"' in html
    Select(d.find_element(By.ID, 'lang')).select_by_value('en')
    wait_for(d, lambda drv: text(drv, '#status') == 'Live', 'back to English')


def test_the_maps_buttons_are_reachable_by_assistive_technology(flare, viewer):
    """The map is a labelled region: an element with role img would hide its zoom buttons from screen readers."""
    share = flare.create()
    a = flare.publish(share, flare.fix())
    d = viewer()
    d.get(share.url())
    wait_coords(d, a)
    area = d.find_element(By.ID, 'map')
    assert area.get_attribute('role') == 'region' and area.get_attribute('aria-label')
    assert d.execute_script("return document.querySelector('#map [role=img], #map[role=img]') === null")
    zoom = d.find_elements(By.CSS_SELECTOR, '#map .leaflet-control-zoom-in')
    assert zoom and zoom[0].get_attribute('aria-label'), 'the zoom buttons are there, with a name'


def test_works_without_tiles(flare, viewer):
    share = flare.create()
    _, _, html = http_get(share.path)
    tile_url = re.search(rb'data-tile-url="([^"]+)"', html).group(1).decode().replace('&amp;', '&')
    a = flare.publish(share, flare.fix())
    d = viewer(blocked=[f'*://{tile_host_pattern(tile_url)}/*'])
    d.get(share.url())
    wait_coords(d, a)
    wait_for(d, lambda drv: body_attr(drv, 'tiles') == 'failed', 'tile failure noticed')
    assert d.find_element(By.ID, 'mapnote').is_displayed()
    assert d.find_element(By.ID, 'nav-apple').get_attribute('href')
    assert re.match(r'^Updated ', text(d, '#updated'))


@pytest.mark.parametrize('e2e', [False, True], ids=['plain', 'e2e'])
def test_no_third_party_requests_and_no_csp_violations(flare, viewer, e2e):
    # An end-to-end encrypted share's page loads more: its own script, strings and styles, and TweetNaCl.
    if e2e:
        share, passphrase = flare.create_e2e()
        a = flare.publish_sealed(share, flare.fix(), passphrase)
    else:
        share = flare.create()
        a = flare.publish(share, flare.fix())
    d = viewer()
    d.get(share.url() + ('#k=' + passphrase if e2e else ''))
    wait_coords(d, a)
    if e2e:
        wait_for(d, lambda drv: body_attr(drv, 'e2e') == 'open' and text(drv, '#e2e-more'), 'the banner with its strings')
    wait_for(d, lambda drv: body_attr(drv, 'conn') == 'live', 'SSE connected')
    wait_for(d, lambda drv: body_attr(drv, 'tiles') != 'pending', 'tiles tried')
    assert d.execute_script('return window.__csp') == []
    tile_url = d.find_element(By.TAG_NAME, 'html').get_attribute('data-tile-url')
    tiles = tile_host_pattern(tile_url)
    own = urllib.parse.urlsplit(BASE_URL).netloc
    urls = [json.loads(e['message'])['message']['params']['request']['url']
            for e in d.get_log('performance') if '"Network.requestWillBeSent"' in e['message']]
    assert urls, 'no requests seen'
    for u in urls:
        p = urllib.parse.urlsplit(u)
        if p.scheme == 'data':
            continue
        assert not e2e or passphrase not in u, f'the key went out in a request: {u}'
        if p.netloc == own:
            continue
        assert fnmatch.fnmatch(p.netloc, tiles), f'third-party request: {u}'
        assert share.view_token not in u, 'view token leaked into a tile request'


def test_security_headers_and_noindex(flare):
    share = flare.create()
    status, headers, html = http_get(share.path)
    assert status == 200
    csp = headers.get('Content-Security-Policy', '')
    assert "script-src 'self'" in csp and 'unsafe-inline' not in csp and "default-src 'none'" in csp
    assert headers.get('Referrer-Policy') == 'no-referrer'
    assert headers.get('X-Content-Type-Options') == 'nosniff'
    assert b'<meta name="robots" content="noindex' in html
    assert b'{{' not in html, 'a placeholder was left unfilled'


def test_page_weight_under_50_kb(flare):
    share = flare.create()
    total = len(http_get(share.path)[2])
    for f in ('/viewer/viewer.js', '/viewer/viewer.css'):
        status, _, body = http_get(f)
        assert status == 200, f
        total += len(body)
    strings = max(len(http_get(f'/viewer/i18n/{c}.json')[2]) for c in ('en', 'zh-CN'))
    assert total + strings < 50 * 1024, f'{total + strings} bytes'


def test_no_layout_jump_while_loading(flare, viewer):
    share = flare.create()
    a = flare.publish(share, flare.fix(batt=None, vel=None))
    d = viewer()
    # Remember where the buttons were before any data or strings arrived.
    d.execute_cdp_cmd('Page.addScriptToEvaluateOnNewDocument', {'source':
        "document.addEventListener('DOMContentLoaded',function(){window.__top0="
        "document.querySelector('.actions').getBoundingClientRect().top})"})
    d.get(share.url())
    wait_coords(d, a)
    top0, top1 = d.execute_script(
        "return [window.__top0, document.querySelector('.actions').getBoundingClientRect().top]")
    assert abs(top0 - top1) < 1, f'actions moved from {top0} to {top1}'


def _device_client(share, *args, client_id=None):
    """A real MQTT client with the share's device token (Debian's mosquitto_sub), as a phone connects: with the
    phone's own client id if told, else one of the share's other device ids (the broker admits no other)."""
    return subprocess.Popen(['mosquitto_sub', '-h', os.environ.get('FLARE_MQTT_HOST', '127.0.0.1'),
                             '-p', os.environ.get('FLARE_MQTT_PORT', '1883'), '-V', 'mqttv311', '-u', share.id,
                             '-P', share.device_token, '-i', client_id or f'flare-{share.id}-{secrets.token_hex(4)}']
                            + list(args),
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def _connected_phone(share, will, qos):
    """A phone with the last will of an OwnTracks app, connected: subscribed to its status, which is retained, so its
    first line says it is in. SIGKILL (`.kill()`) cuts its connection without a DISCONNECT."""
    phone = _device_client(share, '-c', '-t', f'flare/v1/shares/{share.id}/status',
                           '--will-topic', share.topic, '--will-payload', will, '--will-qos', str(qos), client_id=f'flare-{share.id}')
    assert phone.stdout.readline()
    return phone


def test_a_lost_connection_is_said_plainly_and_locate_now_asks_the_phone(flare, viewer):
    share = flare.create()
    cached = flare.publish(share, flare.fix(batt=8, bs=1))
    phone = _connected_phone(share, '{"_type":"lwt"}', 0)    # Android's will
    d = viewer()
    d.get(share.url())
    wait_coords(d, cached)
    assert not d.find_element(By.ID, 'locate').is_displayed()       # live: nothing to ask
    assert d.find_element(By.ID, 'battery-note').text == 'Battery 8%'
    phone.kill()
    phone.wait(timeout=10)
    wait_for(d, lambda drv: body_attr(drv, 'tracker') == 'offline', 'the tracker to go offline')
    assert re.match(r'^Phone went offline at .+ \(connection lost\)\. Last known position below\.$', text(d, '#tracker'))
    assert text(d, '#coords') == coord_text(cached)
    shot(d, 'viewer-offline.png')

    commands = _device_client(share, '-C', '1', '-W', '20', '-t', f'{share.topic}/cmd')
    d.find_element(By.ID, 'locate').click()
    wait_for(d, lambda drv: text(drv, '#locate-status').startswith('Asked the phone at'), 'asked the phone')
    assert json.loads(commands.stdout.readline()) == {'_type': 'cmd', 'action': 'reportLocation'}
    commands.wait(timeout=10)
    # iOS answers with its cached position (already stored): the answer still shows, with how old the position is.
    flare.publish(share, dict(cached, t='r'))
    wait_for(d, lambda drv: text(drv, '#locate-status').startswith('The phone answered at'), 'the answer')
    assert 'Its position is from' in text(d, '#locate-status')
    wait_for(d, lambda drv: body_attr(drv, 'tracker') == 'live', 'the tracker to be live again')
    shot(d, 'viewer-locate-answered.png')


def test_offline_and_low_battery_in_chinese(flare, viewer):
    share = flare.create()
    a = flare.publish(share, flare.fix(batt=8, bs=1))
    phone = _connected_phone(share, '{"_type":"lwt","tst":1}', 1)    # iOS's will
    phone.kill()
    phone.wait(timeout=10)
    d = viewer(lang='zh-CN')
    d.get(share.url())
    wait_coords(d, a)
    wait_for(d, lambda drv: body_attr(drv, 'tracker') == 'offline', 'offline')
    assert '离线（连接中断）' in text(d, '#tracker')
    assert text(d, '#battery-note').startswith('电量')
    assert text(d, '#locate') == '请求最新位置'
    shot(d, 'viewer-offline-zh-CN.png')


def test_answers_reach_every_viewer_and_the_phone(flare, viewer):
    """Two family members on two browsers: one answers, the other sees it live; the phone gets it over MQTT with its
    device token while connected, and over HTTP after being away; the name is text, never markup."""
    share = flare.create()
    a = flare.publish(share, flare.fix())
    topic = f'flare/v1/shares/{share.id}/answers'
    live_phone = _device_client(share, '-q', '1', '-t', topic, '-C', '1', '-W', '20')
    mum, dad = viewer(), viewer()
    for d in (mum, dad):
        d.get(share.url())
        wait_coords(d, a)
    mum.find_element(By.ID, 'answer-name').send_keys('Mum <b>x</b>')
    mum.find_element(By.CSS_SELECTOR, '.answer-buttons [data-kind="on_my_way"]').click()
    line = re.compile(r'^Mum <b>x</b>: on my way · \d{1,2}:\d{2}')
    wait_for(dad, lambda drv: line.match(text(drv, '#answers li')), 'the answer on the other viewer\'s page')
    wait_for(mum, lambda drv: text(drv, '#answer-status').startswith('Sent'), 'the sender told it was sent')
    assert dad.execute_script("return document.querySelector('#answers b') === null"), 'the name was shown as text'
    out, _ = live_phone.communicate(timeout=25)
    assert json.loads(out.strip())['kind'] == 'on_my_way' and json.loads(out.strip())['name'] == 'Mum <b>x</b>'
    # A phone that was away asks for what it missed (the broker keeps nothing for a device that is not connected).
    status, _, missed = http_get(f'/api/v1/shares/{share.id}/answers?after=0', headers={'Authorization': f'Bearer {share.device_token}'})
    assert status == 200 and [x['name'] for x in json.loads(missed)['answers']] == ['Mum <b>x</b>']
    # A reload shows it from the view document; once ended the buttons go and the answers stay.
    dad.refresh()
    wait_for(dad, lambda drv: line.match(text(drv, '#answers li')), 'the answer after a reload')
    dad.execute_script("document.getElementById('answers-box').scrollIntoView({block: 'end'})")
    shot(dad, 'viewer-answers.png')
    flare.stop(share)
    wait_for(dad, lambda drv: body_attr(drv, 'state') == 'ended', 'ended')
    assert not dad.find_element(By.ID, 'answer-form').is_displayed()
    assert line.match(text(dad, '#answers li'))


def test_answers_in_chinese(flare, viewer):
    share = flare.create()
    a = flare.publish(share, flare.fix())
    d = viewer(lang='zh-CN')
    d.get(share.url())
    wait_coords(d, a)
    assert text(d, '.answer-buttons [data-kind="called_emergency"]') == '我已拨打急救电话'
    d.find_element(By.CSS_SELECTOR, '.answer-buttons [data-kind="called_emergency"]').click()
    wait_for(d, lambda drv: re.match(r'^有人：已拨打急救电话 · ', text(drv, '#answers li')), 'the answer in Chinese')


def _rect(d, css):
    return d.execute_script("var r = document.querySelector(arguments[0]).getBoundingClientRect();"
                            "return {left: r.left, right: r.right, top: r.top, bottom: r.bottom};", css)


def _rects(d, css):
    return d.execute_script("return Array.prototype.map.call(document.querySelectorAll(arguments[0]), function (e) {"
                            "var r = e.getBoundingClientRect(), li = e.parentNode.getBoundingClientRect();"
                            "return {left: r.left, right: r.right, top: r.top, bottom: r.bottom, height: r.height,"
                            "li_left: li.left, li_right: li.right, clipped: e.scrollWidth > e.clientWidth}; });", css)


def _above(d, css, height=400):
    """A picture of the page's `height` px just above the element `css` (by page position: no scrolling, so no
    scrollbar or anything else that moves with it)."""
    top, width = d.execute_script("return [document.querySelector(arguments[0]).getBoundingClientRect().top + window.scrollY,"
                                  " document.documentElement.clientWidth];", css)
    return d.execute_cdp_cmd('Page.captureScreenshot', {'format': 'png', 'captureBeyondViewport': True, 'clip': {
        'x': 0, 'y': top - height, 'width': width, 'height': height, 'scale': 1}})['data']


def test_names_at_their_limit_are_clipped_and_draw_over_nothing(flare, viewer):
    """A share's name and answers' names at their limits (80 and 40 code points): a row of wide letters is cut with an
    ellipsis inside its line, and a letter with its combining marks stacked as high as they go draws over nothing
    else: the 400 px above the answers (their heading, the responder's section, the facts; nothing there changes by
    itself, the card's countdown is further up) look exactly as they did before the names arrived, pixel for pixel."""
    stacked_title = 'Z' + '\u0301' * 79
    share = flare.create(name=stacked_title)
    a = flare.publish(share, flare.fix())
    d = viewer()
    d.get(share.url())
    wait_coords(d, a)
    wait_for(d, lambda drv: 'Z' in text(drv, '#title'), 'the share\'s name in the title')
    before = _above(d, '#answers')
    for name in ('M' + '\u0301' * 39, 'W' * 40):
        http_json('POST', f'/api/v1/view/{share.view_token}/answers', {'kind': 'on_my_way', 'name': name})
    wait_for(d, lambda drv: len(drv.find_elements(By.CSS_SELECTOR, '#answers li .answer-who')) == 2, 'both answers, each name in its box')
    d.execute_script("document.getElementById('answers-box').scrollIntoView({block: 'end'})")
    shot(d, 'viewer-long-names.png')
    line = d.execute_script("return parseFloat(getComputedStyle(document.querySelector('.answer-who')).lineHeight)")
    card, box = _rect(d, '#fresh-card'), _rect(d, '#answers-box')
    stacked, wide = _rects(d, '#answers li .answer-who')
    for who in (stacked, wide):
        assert who['height'] <= line + 1, f'a name box is {who["height"]} px high, more than one line ({line} px)'
        assert box['top'] <= who['top'] and who['bottom'] <= box['bottom'], 'a name box reaches out of the answers'
        assert who['top'] >= card['bottom'] or who['bottom'] <= card['top'], 'a name box overlaps the position card'
        assert who['li_left'] <= who['left'] and who['right'] <= who['li_right'], 'a name box is wider than its line'
    assert wide['clipped'], 'the 40 wide letters are not cut (ellipsis)'
    # The marks' ink is where the box is, not above it: nothing above the answers changed.
    after = _above(d, '#answers')
    if after != before:
        (ARTIFACTS / 'viewer-long-names-above-before.png').write_bytes(base64.b64decode(before))
        (ARTIFACTS / 'viewer-long-names-above-after.png').write_bytes(base64.b64decode(after))
        raise AssertionError('the page above the answers looks different once the names arrived (artifacts/viewer-long-names-above-*.png)')
    title, bar = _rect(d, '#title'), _rect(d, '.bar')
    assert bar['top'] <= title['top'] and title['bottom'] <= bar['bottom'], 'the title reaches out of the bar'


def test_seen_by_counts_each_browser_once(flare, viewer):
    """Two browsers open the link, then the first reloads: opened 1, 2, 2, as the phone reads it with its token."""
    share = flare.create()
    a = flare.publish(share, flare.fix())

    def opened():
        status, _, body = http_get(f'/api/v1/shares/{share.id}', headers={'Authorization': f'Bearer {share.device_token}'})
        assert status == 200, body
        return json.loads(body)['audience']['opened']

    first, second = viewer(), viewer()
    counts = []
    for d, expected in ((first, 1), (second, 2), (first, 2)):
        if counts and d is first:
            d.refresh()
        else:
            d.get(share.url())
        wait_coords(d, a)
        wait_until(lambda: opened() == expected, 10, lambda: f'{expected} opened (counted {counts + [opened()]})', interval=0.2)
        counts.append(opened())
    assert counts == [1, 2, 2]


AXE = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', '.build', 'axe', 'axe.min.js')


def axe_violations(d):
    """axe-core 4's serious and critical findings, run through the DevTools protocol (the page's CSP refuses injected
    scripts, and rightly so)."""
    with open(AXE) as f:
        source = f.read()
    result = d.execute_cdp_cmd('Runtime.evaluate', {
        'expression': source + ';axe.run(document,{resultTypes:["violations"]}).then(function(r){return JSON.stringify('
                      'r.violations.map(function(v){return {id:v.id,impact:v.impact,nodes:v.nodes.map(function(n){return n.target.join(" ")})}}))})',
        'awaitPromise': True, 'returnByValue': True})
    found = json.loads(result['result']['value'])
    return [v for v in found if v['impact'] in ('serious', 'critical')]


def test_the_page_passes_an_accessibility_audit_live_and_ended(flare, viewer):
    share = flare.create()
    a = flare.publish(share, flare.fix())
    d = viewer()
    d.get(share.url())
    wait_coords(d, a)
    assert axe_violations(d) == []
    flare.stop(share)
    wait_for(d, lambda drv: body_attr(drv, 'state') == 'ended', 'ended')
    assert axe_violations(d) == []


def test_a_responder_sees_the_distance_and_can_read_the_position_to_a_dispatcher(flare, viewer):
    share = flare.create()
    a = flare.publish(share, dict(flare.fix(), lat=48.13715, lon=11.57612, acc=12))
    d = viewer()
    d.execute_cdp_cmd('Browser.grantPermissions', {'permissions': ['geolocation']})
    # 1 km south of the person (0.009° of latitude).
    d.execute_cdp_cmd('Emulation.setGeolocationOverride', {'latitude': 48.12815, 'longitude': 11.57612, 'accuracy': 5})
    d.get(share.url())
    wait_coords(d, a)
    d.find_element(By.ID, 'distance').click()
    wait_for(d, lambda drv: re.match(r'^1(\.0)? km from you, toward N \(0°\)$', text(drv, '#distance-text')), 'the distance and bearing')
    assert d.find_element(By.ID, 'distance').get_attribute('aria-pressed') == 'true'
    d.find_element(By.CSS_SELECTOR, '.dispatch summary').click()
    assert text(d, '#dispatch-dec') == '48.13715, 11.57612'
    assert text(d, '#dispatch-dms') == '48° 8′ 13.7″ N, 11° 34′ 34.0″ E'
    assert text(d, '#dispatch-acc').startswith('Accuracy ±12 m, position from ')
    d.execute_script("document.querySelector('.responder').scrollIntoView({block: 'center'})")
    shot(d, 'viewer-responder.png')


def test_an_integrator_hears_the_people_side_on_the_events_topic(flare, viewer):
    """With a watch token, an integrator follows the share's events: the link opened in a browser, the family's
    answer, and the end, which arrives before the broker cuts the stopped share's tokens off."""
    share = flare.create()
    a = flare.publish(share, flare.fix())
    key = flare.owner_key or open(os.path.join(os.environ['FLARE_DATA_DIR'], 'owner.key')).read().strip()
    watch = http_json('POST', f'/api/v1/shares/{share.id}/watch-tokens', {}, key)
    events = subprocess.Popen(['mosquitto_sub', '-h', os.environ.get('FLARE_MQTT_HOST', '127.0.0.1'),
                               '-p', os.environ.get('FLARE_MQTT_PORT', '1883'), '-V', 'mqttv5', '-u', share.id,
                               '-P', watch['watch_token'], '-i', watch['mqtt_client_id_prefix'] + 'browser-test',
                               '-q', '1', '-t', f'flare/v1/shares/{share.id}/events',
                               '-W', '30'], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)  # subscribed before the page opens
    d = viewer()
    d.get(share.url())
    wait_coords(d, a)
    d.find_element(By.CSS_SELECTOR, '.answer-buttons [data-kind="called_emergency"]').click()
    wait_for(d, lambda drv: text(drv, '#answer-status').startswith('Sent'), 'the answer sent')
    flare.stop(share)
    lines, got = [], []
    for line in events.stdout:  # until the end arrives (mosquitto_sub gives up by itself after 30 s)
        lines.append(line)
        got.append(json.loads(line))
        if got[-1]['type'] == 'share.ended':
            break
    events.terminate()
    err = events.communicate(timeout=10)[1]
    out = ''.join(lines)
    # share.started went out when the share was created, before this subscription, unless the deliverer was late
    # (a loaded machine): then it comes first.
    if got and got[0]['type'] == 'share.started':
        got = got[1:]
    assert [e['type'] for e in got] == ['share.opened', 'share.answered', 'share.ended'], (out, err)
    assert all(e['share_id'] == share.id and e['id'].startswith('msg_') for e in got)
    assert got[1]['answer']['kind'] == 'called_emergency' and got[2]['reason'] == 'stopped'
    assert str(a['lat']) not in out and share.device_token not in out


def test_an_end_to_end_encrypted_share_opens_only_with_the_key_in_its_link(flare, viewer):
    share, passphrase = flare.create_e2e()
    a = flare.publish_sealed(share, flare.fix(), passphrase)
    d = viewer()
    d.get(share.url() + '#k=' + passphrase)
    wait_coords(d, a)
    wait_for(d, lambda drv: body_attr(drv, 'e2e') == 'open', 'the page to open the positions')
    assert 'End-to-end encrypted' in text(d, '#e2e')
    # What the server cannot do for such a share, said on its page, one tap away (the map comes first on a phone).
    assert text(d, '#e2e-off') == '' and 'cannot do' in text(d, '#e2e-more')
    d.find_element(By.CSS_SELECTOR, '#e2e-more').click()
    wait_for(d, lambda drv: text(drv, '#e2e-off'), 'the details to open')
    off = text(d, '#e2e-off')
    assert all(w in off for w in ('low-battery alert', 'check-in', 'mail to contacts', 'Ask for a fresh position')), off
    d.find_element(By.CSS_SELECTOR, '#e2e-more').click()  # closed again, as the page opens
    # Live: the next one arrives over the stream and opens too.
    b = flare.publish_sealed(share, flare.fix(), passphrase)
    wait_coords(d, b)
    shot(d, 'viewer-e2e.png')
    # The key left the address bar once read: not in the history, a bookmark or a copied address. A reload of what is
    # left asks for it, and the key typed in opens what had come meanwhile.
    assert passphrase not in d.current_url and '#k=' not in d.current_url, d.current_url
    d.refresh()
    wait_for(d, lambda drv: body_attr(drv, 'e2e') == 'no-key', 'the reloaded page to ask for the key')
    assert d.find_element(By.CSS_SELECTOR, '#e2e-ask').is_displayed() and text(d, '#coords') != coord_text(b)
    shot(d, 'viewer-e2e-asks-for-key.png')
    d.find_element(By.CSS_SELECTOR, '#e2e-key').send_keys(passphrase)
    d.find_element(By.CSS_SELECTOR, '#e2e-open').click()
    wait_coords(d, b)
    wait_for(d, lambda drv: body_attr(drv, 'e2e') == 'open', 'the typed key to open the positions')
    assert not d.find_element(By.CSS_SELECTOR, '#e2e-ask').is_displayed()
    # What the server holds is ciphertext only.
    status, _, body = http_get('/api/v1/view/' + share.view_token)
    assert str(a['lat']) not in body.decode() and str(b['lat']) not in body.decode()
    # Without the key, and with a wrong one: said so, nothing shown.
    bare = viewer()
    bare.get(share.url())
    wait_for(bare, lambda drv: body_attr(drv, 'e2e') == 'no-key', 'the page to say the key is missing')
    assert '#k=' in text(bare, '#e2e') and text(bare, '#coords') != coord_text(b)
    wrong = viewer(lang='zh-CN')
    wrong.get(share.url() + '#k=' + 'x' * 32)
    wait_for(wrong, lambda drv: body_attr(drv, 'e2e') == 'wrong-key', 'the page to say the key is wrong')
    assert '密钥' in text(wrong, '#e2e') and text(wrong, '#coords') != coord_text(b)
    wrong.find_element(By.CSS_SELECTOR, '#e2e-more').click()
    wait_for(wrong, lambda drv: text(drv, '#e2e-off'), 'the details to open')
    off = text(wrong, '#e2e-off')
    assert all(w in off for w in ('低电量', '报平安', '联系人', '请求最新位置')), off


def test_an_encrypted_page_shows_the_messages_it_opens_and_counts_the_others(flare, viewer):
    """Ciphertexts the server relays but the key does not open (another key, a changed byte, random bytes) or that
    open to no JSON: counted in the banner and never shown, among good ones, from the view document and live."""
    share, passphrase = flare.create_e2e()
    a = flare.publish_sealed(share, flare.fix(), passphrase)
    other_key = flare.fix()
    flare.publish_encrypted(share, seal(json.dumps(dict({'_type': 'location'}, **other_key)).encode(), 'y' * 32))
    d = viewer()
    d.get(share.url() + '#k=' + passphrase)
    wait_coords(d, a)
    wait_for(d, lambda drv: '1 message could not be opened and is not shown.' in text(drv, '#e2e'), 'the first one counted')
    # Live: a changed byte, random bytes, and a well-sealed message that is no JSON; then a good one, older than the
    # bad ones by its own time, so that none of them is left showing last by arriving last.
    b = flare.fix()
    changed = bytearray(base64.b64decode(seal(json.dumps(dict({'_type': 'location'}, **flare.fix())).encode(), passphrase)))
    changed[-1] ^= 1
    flare.publish_encrypted(share, base64.b64encode(bytes(changed)).decode())
    flare.publish_encrypted(share, base64.b64encode(os.urandom(80)).decode())
    flare.publish_encrypted(share, seal(b'not json', passphrase))
    flare.publish_sealed(share, b, passphrase)
    wait_coords(d, b)
    wait_for(d, lambda drv: '4 messages could not be opened and are not shown.' in text(drv, '#e2e'), 'all four counted')
    assert body_attr(d, 'e2e') == 'open' and text(d, '#coords') == coord_text(b)
    # A page opened now gets all six from the view document: the same count, the same position.
    later = viewer()
    later.get(share.url() + '#k=' + passphrase)
    wait_coords(later, b)
    wait_for(later, lambda drv: '4 messages could not be opened' in text(drv, '#e2e'), 'the four counted again')
    assert coord_text(other_key) not in later.page_source


def test_an_encrypted_page_tells_the_answer_to_locate_now_that_the_server_cannot(flare, viewer):
    share, passphrase = flare.create_e2e()
    cached = flare.publish_sealed(share, flare.fix(), passphrase)
    phone = _connected_phone(share, '{"_type":"lwt"}', 0)    # Android's will, in clear as the apps send it
    d = viewer()
    d.get(share.url() + '#k=' + passphrase)
    wait_coords(d, cached)
    phone.kill()
    phone.wait(timeout=10)
    wait_for(d, lambda drv: body_attr(drv, 'tracker') == 'offline', 'the tracker to go offline')
    commands = _device_client(share, '-C', '1', '-W', '20', '-t', f'{share.topic}/cmd')
    d.find_element(By.ID, 'locate').click()
    wait_for(d, lambda drv: text(drv, '#locate-status').startswith('Asked the phone at'), 'asked the phone')
    assert json.loads(commands.stdout.readline()) == {'_type': 'cmd', 'action': 'reportLocation'}
    commands.wait(timeout=10)
    # The server sees a ciphertext like any other and never reports an answer; the page opens it and sees t:"r".
    answer = flare.publish_sealed(share, flare.fix(t='r'), passphrase)
    wait_coords(d, answer)
    wait_for(d, lambda drv: text(drv, '#locate-status').startswith('The phone answered at'), 'the answer')
    status, _, body = http_get('/api/v1/view/' + share.view_token)
    assert 'locate_answered_at' not in json.loads(body).get('tracker', {}), body


def test_flare_tracks_sealed_positions_that_pynacl_opens(flare, viewer, tmp_path):
    import base64

    import nacl.secret
    share, passphrase = flare.create_e2e()
    share_file = tmp_path / 'share.json'
    share_file.write_text(json.dumps(share.created))
    subprocess.run(flare.cli + ['track', '--share-file', str(share_file), '--e2e', '--count', '2', '--interval', '0.2', '--quiet',
                                '--mqtt-url', f'mqtt://{flare.mqtt_host}:{flare.mqtt_port}'], check=True, capture_output=True, timeout=90)
    status, _, body = http_get('/api/v1/view/' + share.view_token)
    view = json.loads(body)
    assert view['e2e'] is True and view['last'] is None and len(view['sealed']) == 2, view
    key = passphrase.encode()[:32].ljust(32, b'\0')
    opened = [json.loads(nacl.secret.SecretBox(key).decrypt(base64.b64decode(item['data']))) for item in view['sealed']]
    assert all(o['_type'] == 'location' and -90 <= o['lat'] <= 90 for o in opened), opened
    d = viewer()
    d.get(share.url() + '#k=' + passphrase)
    wait_coords(d, opened[-1])


def test_an_unchanged_owntracks_app_configured_by_the_cli_shows_its_encrypted_position(flare, viewer, tmp_path):
    """The configuration `flare share owntracks --e2e` writes, used as the app uses it: its credentials, client id and
    topic on a real MQTT client, its encryptionKey sealing the location the way the apps seal it (PyNaCl here)."""
    import base64

    import nacl.secret
    share, passphrase = flare.create_e2e()
    otrc = tmp_path / 'sos.otrc'
    subprocess.run(flare.cli + ['share', 'owntracks', share.id, '--e2e', '--otrc', str(otrc)], check=True, capture_output=True, timeout=30)
    config = json.loads(otrc.read_text())
    assert config['encryptionKey'] == passphrase and config['username'] == share.id
    # The server never had the key: its own configuration for the share has none, and it hands that one only to a
    # client that says it adds the key; a phone asking for a file gets 409 e2e_needs_key.
    status, _, served = http_get(f'/api/v1/shares/{share.id}/owntracks?encryption=client', {'Authorization': 'Bearer ' + share.device_token})
    assert status == 200 and b'encryptionKey' not in served and passphrase not in served.decode(errors='replace')
    status, _, refused = http_get(f'/api/v1/shares/{share.id}/owntracks.otrc', {'Authorization': 'Bearer ' + share.device_token})
    assert status == 409 and json.loads(refused)['error'] == 'e2e_needs_key'
    fix = flare.fix()
    key = config['encryptionKey'].encode()[:32].ljust(32, b'\0')
    data = base64.b64encode(bytes(nacl.secret.SecretBox(key).encrypt(json.dumps(dict({'_type': 'location', 'tid': config['tid']}, **fix)).encode()))).decode()
    subprocess.run(['mosquitto_pub', '-h', flare.mqtt_host, '-p', str(flare.mqtt_port), '-i', config['clientId'], '-u', config['username'],
                    '-P', config['password'], '-t', config['pubTopicBase'], '-q', str(config['pubQos']), '-r',
                    '-m', json.dumps({'_type': 'encrypted', 'data': data})], check=True, capture_output=True, timeout=30)
    d = viewer()
    d.get(share.url() + '#k=' + passphrase)
    wait_coords(d, fix)
