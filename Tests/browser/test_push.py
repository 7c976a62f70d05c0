"""Web Push in the browser: a link's page as an installable app whose service worker shows what Flare pushes, and a
contact's alerts page (`/alerts#c=`).

Headless Chromium cannot reach a push service, so `pushManager.subscribe` cannot succeed here: the subscription flared
takes and what it sends are tested from the receiver's side (Tests/scripts/test_push.py, with its own P-256 key and
auth secret, and http_ece to decrypt). Here a message is handed to the page's service worker through the DevTools
protocol (`ServiceWorker.deliverPushMessage`), as the browser would after decrypting it, and the notification it shows
is read back (`getNotifications()`). A notification's click cannot be made either (Chromium lets a worker open a window
only for a click the browser delivers): the link it opens is the notification's `data.url`, checked here.
"""
import json

from selenium.webdriver.common.by import By
from test_viewer import axe_violations, shot, text, wait_for

from conftest import BASE_URL, http_json

ACTIVE = ("var done = arguments[arguments.length - 1];"
          "navigator.serviceWorker.getRegistration(arguments[0]).then(function (r) { done(!!(r && r.active) && r.scope); }, function () { done(false); });")
NOTIFICATIONS = ("var done = arguments[arguments.length - 1];"
                 "navigator.serviceWorker.getRegistration(arguments[0]).then(function (r) { return r.getNotifications(); })"
                 ".then(function (ns) { done(ns.map(function (n) { return {title: n.title, body: n.body, tag: n.tag, data: n.data,"
                 " requireInteraction: n.requireInteraction}; })); }, function (e) { done(String(e)); });")


def push(d, scope, payload):
    """Hands `payload` to the worker of `scope` as the browser does with a decrypted push message. The DevTools
    protocol names a registration by an id it tells only in events, which Selenium's commands do not return; a test's
    browser is new and has one worker, and a message for an id that is no registration goes nowhere: so the first ids
    are each given the message, and the one worker shows it once."""
    d.execute_cdp_cmd('ServiceWorker.enable', {})
    for rid in range(16):
        d.execute_cdp_cmd('ServiceWorker.deliverPushMessage', {'origin': BASE_URL, 'registrationId': str(rid), 'data': json.dumps(payload)})


def notifications(d, scope):
    found = d.execute_async_script(NOTIFICATIONS, scope)
    assert isinstance(found, list), found
    return found


def allow_notifications(d):
    d.execute_cdp_cmd('Browser.grantPermissions', {'origin': BASE_URL, 'permissions': ['notifications']})


def test_a_links_page_is_an_installable_app_whose_worker_shows_an_alert_that_opens_the_link(flare, viewer):
    share = flare.create(name='Anna')
    d = viewer()
    allow_notifications(d)
    d.get(share.url())
    scope = BASE_URL + share.path
    wait_for(d, lambda drv: drv.execute_async_script(ACTIVE, share.path) == scope, 'the link\'s worker active')
    wait_for(d, lambda drv: drv.find_element(By.ID, 'notify').is_displayed(), 'the notify button')
    assert text(d, '#notify') == 'Notify me about Anna'
    assert d.execute_cdp_cmd('Page.getInstallabilityErrors', {})['installabilityErrors'] == []
    manifest = d.execute_cdp_cmd('Page.getAppManifest', {})
    assert manifest['url'] == scope + '/manifest.webmanifest' and not manifest.get('errors'), manifest
    assert d.execute_script('return window.__csp') == []
    assert axe_violations(d) == []
    d.execute_script("document.getElementById('push').scrollIntoView({block: 'center'})")
    shot(d, 'push-viewer-notify.png')

    push(d, scope, {'type': 'sos.repeated', 'title': 'Anna pressed SOS again', 'body': 'Tap to see where Anna is.',
                    'tag': f'flare-{share.id}', 'urgent': True, 'at': '2026-12-06T07:00:00.000Z'})
    wait_for(d, lambda drv: notifications(drv, share.path), 'the notification shown')
    shown = notifications(d, share.path)
    assert len(shown) == 1 and shown[0]['title'] == 'Anna pressed SOS again' and shown[0]['body'] == 'Tap to see where Anna is.', shown
    assert shown[0]['tag'] == f'flare-{share.id}' and shown[0]['requireInteraction'] is True
    # A tap opens the link this page was opened at.
    assert shown[0]['data']['url'] == share.url(), shown
    # A newer state of the same share replaces it.
    push(d, scope, {'type': 'share.ended', 'title': 'Anna stopped sharing', 'body': 'The link no longer shows where Anna is.',
                    'tag': f'flare-{share.id}', 'urgent': False})
    wait_for(d, lambda drv: [n['title'] for n in notifications(drv, share.path)] == ['Anna stopped sharing'], 'the newer notification')

    # Headless Chromium has no push service: asking to be notified says it could not, and the page goes on.
    d.find_element(By.ID, 'notify').click()
    assert text(d, '#notify-status') == 'Just a moment…'
    wait_for(d, lambda drv: text(drv, '#notify-status') == 'Could not turn notifications on. Try again in a moment.', 'the failure said', 25)
    assert d.find_element(By.ID, 'notify').is_enabled()


def test_an_end_to_end_links_alert_opens_it_without_its_passphrase_which_is_kept_nowhere(flare, viewer):
    share, passphrase = flare.create_e2e(name='Anna')
    d = viewer()
    allow_notifications(d)
    link = share.url() + '#k=' + passphrase
    d.get(link)
    scope = BASE_URL + share.path
    wait_for(d, lambda drv: drv.execute_async_script(ACTIVE, share.path) == scope, 'the link\'s worker active')
    push(d, scope, {'type': 'tracker.battery_low', 'title': "Anna's phone battery is low", 'body': 'Tap to see where Anna is.', 'tag': 'x'})
    wait_for(d, lambda drv: notifications(drv, share.path), 'the notification shown')
    # The passphrase stays in the page's memory: the alert opens the link, whose page asks for it.
    assert notifications(d, share.path)[0]['data']['url'] == share.url()
    stored = d.execute_async_script("var done = arguments[arguments.length - 1]; caches.keys().then(done, function () { done([]); });")
    assert stored == [] and passphrase not in json.dumps(d.execute_script('return Object.assign({}, localStorage)'))


def test_on_an_iphone_the_page_says_to_add_it_to_the_home_screen(flare, viewer):
    share = flare.create(name='Anna')
    d = viewer()
    d.execute_cdp_cmd('Emulation.setUserAgentOverride', {'userAgent': 'Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 '
                                                                      '(KHTML, like Gecko) Version/17.4 Mobile/15E148 Safari/604.1'})
    # Safari outside the home screen has no PushManager.
    d.execute_cdp_cmd('Page.addScriptToEvaluateOnNewDocument', {'source': 'delete window.PushManager;'})
    d.get(share.url())
    wait_for(d, lambda drv: drv.find_element(By.ID, 'push').is_displayed(), 'the push section')
    assert text(d, '#notify-status').startswith('On iPhone and iPad, notifications need this page on your home screen')
    assert not d.find_element(By.ID, 'notify').is_displayed()
    d.execute_script("document.getElementById('push').scrollIntoView({block: 'center'})")
    shot(d, 'push-viewer-iphone.png')


def test_a_contacts_alerts_page_registers_its_worker_and_shows_alerts_with_their_link(flare, viewer):
    key = flare.api_key()
    mum = http_json('POST', '/api/v1/contacts', {'name': 'Mum', 'email': 'mum@example.org'}, key)['id']
    url = http_json('GET', f'/api/v1/contacts/{mum}/alerts-link', None, key)['url']
    path = '/alerts#' + url.split('#', 1)[1]
    d = viewer()
    allow_notifications(d)
    d.get(BASE_URL + path)
    wait_for(d, lambda drv: drv.find_element(By.TAG_NAME, 'body').get_attribute('data-state') == 'ready', 'the alerts page ready')
    assert text(d, '#alerts-text').startswith('Hello Mum. Allow notifications once')
    assert text(d, '#alerts-on') == 'Allow alerts on this device'
    assert d.execute_script('return window.__csp') == []
    assert axe_violations(d) == []
    shot(d, 'push-alerts-page.png')
    scope = BASE_URL + '/alerts'
    wait_for(d, lambda drv: drv.execute_async_script(ACTIVE, '/alerts') == scope, 'the alerts worker active')
    assert d.execute_cdp_cmd('Page.getInstallabilityErrors', {})['installabilityErrors'] == []
    link = BASE_URL + '/s/' + 'A' * 32
    push(d, scope, {'type': 'sos.started', 'title': 'Anna pressed SOS', 'body': 'Tap to see where Anna is.', 'tag': 'flare-x', 'urgent': True,
                    'url': link})
    wait_for(d, lambda drv: notifications(drv, '/alerts'), 'the alert shown')
    assert notifications(d, '/alerts')[0]['data']['url'] == link
    # Opened again from the home screen (no fragment), the page still knows whose alerts it holds.
    d.get(BASE_URL + '/alerts')
    wait_for(d, lambda drv: drv.find_element(By.TAG_NAME, 'body').get_attribute('data-state') == 'ready', 'the alerts page ready again')
    # A deleted contact's link no longer works.
    http_json('DELETE', f'/api/v1/contacts/{mum}', None, key)
    d.get('about:blank')
    d.get(BASE_URL + path)
    wait_for(d, lambda drv: drv.find_element(By.TAG_NAME, 'body').get_attribute('data-state') == 'unknown', 'the page saying the link ended')
    assert text(d, '#alerts-text') == 'This alerts link no longer works. Ask for a new one.'
