// A contact's alerts page (/alerts#c=<alerts secret>): they allow notifications once, and from then on every SOS,
// repeated press, duress and missed check-in of the person who chose them reaches this browser at once, with their
// personal link. The secret stays in the fragment (never in a request line, so never in a log) and goes only as
// `Authorization: Bearer` to /api/v1/alerts. It is kept in this browser so that the page opened from the home screen
// (which starts at /alerts, without it) still knows whose alerts it holds.
(function () {
  'use strict';
  var P = window.FlarePush;
  var STRINGS = {
    en: {
      title: 'Flare alerts',
      intro: 'Hello {name}. Allow notifications once, and you are alerted at once when someone who chose you presses SOS or misses a check-in, with the link to see where they are.',
      on_button: 'Allow alerts on this device',
      off_button: 'Stop these alerts',
      on: 'Alerts are on for this device. Keep this page on your home screen; you need not open it again.',
      off: 'Alerts are off for this device.',
      unknown: 'This alerts link no longer works. Ask for a new one.',
      missing: 'Open the alerts link from your mail on this device.',
      push_off: 'This Flare server does not send notifications; you are alerted by mail.',
      store: 'Flare cannot answer right now. Try again in a moment.'
    },
    'zh-CN': {
      title: 'Flare 警报',
      intro: '{name}，你好。只需允许一次通知：当选择你的人按下 SOS 或错过报平安时，你会立即收到警报，并附上查看其位置的链接。',
      on_button: '在此设备上允许警报',
      off_button: '停止这些警报',
      on: '此设备已开启警报。请把此页面保留在主屏幕上，无需再打开。',
      off: '此设备已关闭警报。',
      unknown: '此警报链接已失效，请索取新的链接。',
      missing: '请在此设备上打开邮件中的警报链接。',
      push_off: '此 Flare 服务器不发送通知，你会通过邮件收到警报。',
      store: 'Flare 暂时无法响应，请稍后重试。'
    }
  };
  function t(key, vars) {
    var table = STRINGS[P.lang()] || STRINGS.en;
    var text = table[key] || STRINGS.en[key] || key;
    Object.keys(vars || {}).forEach(function (k) { text = text.split('{' + k + '}').join(vars[k]); });
    return text;
  }
  function $(id) { return document.getElementById(id); }
  function state(name, text) {
    document.body.setAttribute('data-state', name);
    $('alerts-text').textContent = text;
  }
  function status(text) {
    $('alerts-status').textContent = text || '';
    $('alerts-status').hidden = !text;
  }

  var fromLink = new URLSearchParams(location.hash.slice(1)).get('c');
  var secret = fromLink;
  try {
    if (fromLink) localStorage.setItem('flare-alerts', fromLink);
    else secret = localStorage.getItem('flare-alerts');
  } catch (e) { /* private mode: the link's fragment alone */ }
  $('alerts-title').textContent = t('title');
  document.title = t('title');
  if (!secret) return state('unknown', t('missing'));
  var auth = { Authorization: 'Bearer ' + secret };
  var api = '/api/v1/alerts/push';
  var reg = null, key = null;

  function show(on) {
    $('alerts-on').hidden = on;
    $('alerts-off').hidden = !on;
    $('alerts-on').textContent = t('on_button');
    $('alerts-off').textContent = t('off_button');
    status(on ? t('on') : '');
    document.body.setAttribute('data-state', on ? 'on' : 'ready');
  }

  fetch('/api/v1/alerts', { headers: auth, cache: 'no-store' }).then(function (res) {
    if (res.status === 404) {
      return res.json().then(function (j) {
        if (j.error === 'push_off') state('push-off', t('push_off'));
        else state('unknown', t('unknown'));
      }, function () { state('unknown', t('unknown')); });
    }
    if (!res.ok) return state('loading', t('store'));
    return res.json().then(function (card) {
      state('ready', t('intro', { name: card.name }));
      if (!P.supported()) {
        state('unsupported', P.isIOS() && !P.standalone() ? P.t('ios') : P.t('unsupported'));
        return;
      }
      return navigator.serviceWorker.register('/viewer/sw.js', { scope: '/alerts' }).then(function (registration) {
        reg = registration;
        return P.serverKey();
      }).then(function (found) {
        key = found;
        return reg.pushManager.getSubscription();
      }).then(function (sub) { show(!!sub && Notification.permission === 'granted'); });
    });
  }).catch(function () { state('loading', t('store')); });

  $('alerts-on').addEventListener('click', function () {
    if (!reg || !key) return;
    $('alerts-on').disabled = true;
    P.subscribe(reg, key, api, auth).then(function () { show(true); }, function (why) {
      status(P.t(why === 'denied' || why === 'full' ? why : 'failed'));
    }).then(function () { $('alerts-on').disabled = false; });
  });
  $('alerts-off').addEventListener('click', function () {
    if (!reg) return;
    $('alerts-off').disabled = true;
    P.unsubscribe(reg, api, auth).then(function () { show(false); status(t('off')); document.body.setAttribute('data-state', 'off'); },
      function () { status(P.t('failed')); }).then(function () { $('alerts-off').disabled = false; });
  });
})();
