// Flare's Web Push in the browser, for a link's page (/s/<token>: "Notify me about Anna", and the page as an app)
// and a contact's alerts page (/alerts, alerts.js). Loaded after the page: nothing here is needed to see where the
// person is. The browser subscribes with the server's key (GET /api/v1/push/key) and hands its subscription to
// Flare; Flare then encrypts each notification for this browser alone (RFC 8291).
(function () {
  'use strict';
  var STRINGS = {
    en: {
      notify: 'Notify me about {name}',
      notify_anyone: 'Notify me on this device',
      on: 'Notifications are on for this link on this device.',
      off_button: 'Turn notifications off',
      denied: 'Notifications are blocked for this site: allow them in the browser\'s settings, then try again.',
      failed: 'Could not turn notifications on. Try again in a moment.',
      full: 'Enough devices get notifications for this link already.',
      ios: 'On iPhone and iPad, notifications need this page on your home screen: tap Share, then Add to Home Screen, and open it from there.',
      unsupported: 'This browser cannot show notifications from Flare.',
      working: 'Just a moment…'
    },
    'zh-CN': {
      notify: '有关 {name} 的消息请通知我',
      notify_anyone: '在此设备上通知我',
      on: '此设备已开启此链接的通知。',
      off_button: '关闭通知',
      denied: '此网站的通知已被阻止：请在浏览器设置中允许通知，然后重试。',
      failed: '无法开启通知，请稍后重试。',
      full: '已有足够多的设备接收此链接的通知。',
      ios: '在 iPhone 和 iPad 上，需要先把此页面添加到主屏幕才能接收通知：点按“共享”，再点“添加到主屏幕”，然后从主屏幕打开。',
      unsupported: '此浏览器无法显示 Flare 的通知。',
      working: '请稍候…'
    }
  };

  function lang() {
    var code = document.documentElement.lang || 'en';
    return STRINGS[code] ? code : /^zh/i.test(code) ? 'zh-CN' : 'en';
  }
  function t(key, vars) {
    var text = (STRINGS[lang()] || STRINGS.en)[key] || STRINGS.en[key] || key;
    Object.keys(vars || {}).forEach(function (k) { text = text.split('{' + k + '}').join(vars[k]); });
    return text;
  }
  function isIOS() {
    return /iPad|iPhone|iPod/.test(navigator.userAgent) || (navigator.platform === 'MacIntel' && navigator.maxTouchPoints > 1);
  }
  function standalone() {
    return navigator.standalone === true || (window.matchMedia && window.matchMedia('(display-mode: standalone)').matches);
  }
  function supported() {
    return 'serviceWorker' in navigator && 'PushManager' in window && 'Notification' in window;
  }
  function keyBytes(text) {
    var b64 = text.replace(/-/g, '+').replace(/_/g, '/');
    var raw = atob(b64 + '==='.slice((b64.length + 3) % 4));
    var out = new Uint8Array(raw.length);
    for (var i = 0; i < raw.length; i++) out[i] = raw.charCodeAt(i);
    return out;
  }
  function serverKey() {
    return fetch('/api/v1/push/key', { cache: 'no-store' }).then(function (res) {
      if (!res.ok) return null;
      return res.json().then(function (j) { return j.public_key || null; });
    }, function () { return null; });
  }

  // A push service that does not answer (none reachable: a headless browser, a network that blocks it) would leave the
  // button waiting for ever: after this long the page says it could not.
  var SUBSCRIBE_WAIT_MS = 15000;
  function within(promise, ms) {
    return new Promise(function (resolve, reject) {
      var timer = setTimeout(function () { reject('failed'); }, ms);
      promise.then(function (v) { clearTimeout(timer); resolve(v); }, function (e) { clearTimeout(timer); reject(e); });
    });
  }

  // Subscribes `reg` (asking for permission first) and hands the subscription to `api` with `headers`. Resolves
  // 'on', or rejects with 'denied', 'full' or 'failed'.
  function subscribe(reg, key, api, headers) {
    return Notification.requestPermission().then(function (permission) {
      if (permission !== 'granted') throw 'denied';
      return reg.pushManager.getSubscription();
    }).then(function (existing) {
      return existing || within(reg.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: keyBytes(key) }), SUBSCRIBE_WAIT_MS);
    }).then(function (sub) {
      var body = sub.toJSON();
      body.lang = lang();
      return fetch(api, { method: 'POST', headers: Object.assign({ 'Content-Type': 'application/json' }, headers || {}), body: JSON.stringify(body) });
    }).then(function (res) {
      if (res.status === 409) throw 'full';
      if (!res.ok) throw 'failed';
      return 'on';
    }, function (why) { throw why === 'denied' || why === 'full' ? why : 'failed'; });
  }

  // Ends the subscription, here and at Flare.
  function unsubscribe(reg, api, headers) {
    return reg.pushManager.getSubscription().then(function (sub) {
      if (!sub) return;
      var endpoint = sub.endpoint;
      return sub.unsubscribe().then(function () {
        return fetch(api, { method: 'DELETE', headers: Object.assign({ 'Content-Type': 'application/json' }, headers || {}),
          body: JSON.stringify({ endpoint: endpoint }) });
      });
    });
  }

  window.FlarePush = { t: t, lang: lang, isIOS: isIOS, standalone: standalone, supported: supported, serverKey: serverKey,
    subscribe: subscribe, unsubscribe: unsubscribe };

  // A link's page.
  var match = location.pathname.match(/^\/s\/([A-Za-z0-9_-]{16,64})$/);
  if (!match) return;
  var scope = '/s/' + match[1];
  var manifest = document.createElement('link');
  manifest.rel = 'manifest';
  manifest.href = scope + '/manifest.webmanifest';
  document.head.appendChild(manifest);
  if (!('serviceWorker' in navigator)) return;
  var api = '/api/v1/view/' + match[1] + '/push';
  var box = document.createElement('section');
  box.className = 'push';
  box.id = 'push';
  box.hidden = true;
  var button = document.createElement('button');
  button.type = 'button';
  button.className = 'btn';
  button.id = 'notify';
  var note = document.createElement('p');
  note.className = 'locate-status';
  note.id = 'notify-status';
  note.setAttribute('aria-live', 'polite');
  box.appendChild(button);
  box.appendChild(note);
  var anchor = document.getElementById('answers-box');
  if (anchor && anchor.parentNode) anchor.parentNode.insertBefore(box, anchor);

  var reg = null, key = null, on = false;
  // The page's first title is the share's name (the server's); the viewer soon makes it "<name> — live location".
  var shareName = document.title && document.title !== 'Flare' ? document.title : null;
  function name() { return shareName; }
  function render(message) {
    button.textContent = on ? t('off_button') : name() ? t('notify', { name: name() }) : t('notify_anyone');
    note.textContent = message || (on ? t('on') : '');
    note.hidden = !note.textContent;
  }
  function ended() { return document.body.getAttribute('data-state') === 'ended'; }

  navigator.serviceWorker.register('/viewer/sw.js', { scope: scope }).then(function (registration) {
    reg = registration;
    if (!supported()) {
      if (isIOS() && !standalone()) { box.hidden = false; button.hidden = true; render(t('ios')); }
      return;
    }
    return serverKey().then(function (found) {
      key = found;
      if (!key || ended()) return;
      return reg.pushManager.getSubscription().then(function (sub) {
        on = !!sub && Notification.permission === 'granted';
        box.hidden = false;
        render();
      });
    });
  }).catch(function () {});

  button.addEventListener('click', function () {
    if (!reg || !key) return;
    button.disabled = true;
    render(t('working'));
    var done = on ? unsubscribe(reg, api).then(function () { on = false; render(); })
      : subscribe(reg, key, api).then(function () { on = true; render(); });
    done.catch(function (why) { render(t(why === 'denied' || why === 'full' ? why : 'failed')); })
      .then(function () { button.disabled = false; });
  });
  document.getElementById('lang') && document.getElementById('lang').addEventListener('change', function () {
    setTimeout(function () { render(); }, 0);
  });
})();
