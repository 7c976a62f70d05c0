// Flare SOS page: one press sends an SOS with the phone's live position (GET /sos, added to the home screen once).
// Plain ES2017, no build step, under a CSP without 'unsafe-inline': no inline scripts or style attributes.
// The device's secret arrives once in the fragment (/sos#d=<secret>), is kept on the phone, and only ever goes to this
// origin's API as `Authorization: Bearer`. Served compacted: no line may begin a string that continues on the next.
// Test hooks on <body>: data-screen setup|idle|countdown|starting|fallback|sharing|pin|stopped, data-i18n pending|ready,
// data-loc none|ok|denied|unavailable, data-queued (positions waiting), data-sent (positions answered),
// data-awake held|none, data-net ok|down.
(function () {
  'use strict';

  var doc = document;
  var root = doc.documentElement;
  var body = doc.body;
  var $ = function (id) { return doc.getElementById(id); };

  var API = '/api/v1/devices';
  // how long a start may take before the SMS fallback shows (it keeps trying behind it)
  var START_TIMEOUT_MS = 5000;
  var POLL_MS = 4000;
  // positions kept while the network is gone: the newest, the oldest dropped and counted
  var QUEUE_MAX = 500;
  var KEY_SECRET = 'flare-sos-secret';
  var KEY_CARD = 'flare-sos-card';
  var KEY_LANG = 'flare-sos-lang';
  // a press whose start Flare has not answered yet: a page closed and opened again (or reloaded) goes on trying
  var KEY_PENDING = 'flare-sos-pending';

  // localStorage can throw (storage blocked): the page then works for this visit with what it holds in memory.
  function load(k) { try { return localStorage.getItem(k); } catch (e) { return null; } }
  function save(k, v) { try { if (v == null) localStorage.removeItem(k); else localStorage.setItem(k, v); } catch (e) {} }

  // ---- strings: the viewer's way (the language menu from the server, English as the fallback table) ----
  var select = $('lang');
  var LANGS = Array.prototype.map.call(select.options, function (o) { return o.value; });
  var base = {}, strings = {}, lang = 'en', fmtCache = {};
  function matchLang(want) {
    if (!want) return null;
    want = String(want).toLowerCase();
    // the exact tag, else the first of the same language ("zh" is zh-CN)
    var same = LANGS.filter(function (c) { return c.toLowerCase().split('-')[0] === want.split('-')[0]; });
    return LANGS.filter(function (c) { return c.toLowerCase() === want; })[0] || same[0] || null;
  }
  // ?lang=, then the choice made in the menu, then what the server chose from Accept-Language, then the browser's.
  function pickLang() {
    var dl = root.getAttribute('data-lang');
    var want = [new URLSearchParams(location.search).get('lang'), load(KEY_LANG), dl && dl.indexOf('{{') < 0 ? dl : null]
      .concat(navigator.languages || [navigator.language]);
    for (var i = 0; i < want.length; i++) { var m = matchLang(want[i]); if (m) return m; }
    return 'en';
  }
  function fetchStrings(code) {
    return fetch('/sos/i18n/' + encodeURIComponent(code) + '.json', { credentials: 'same-origin' })
      .then(function (r) { return r.ok ? r.json() : {}; })
      .catch(function () { return {}; });
  }
  function loadLang(code) {
    var p = base._loaded ? Promise.resolve(base) : fetchStrings('en').then(function (s) { base = s; base._loaded = true; return s; });
    return Promise.all([p, code === 'en' ? p : fetchStrings(code)]).then(function (r) {
      strings = r[1];
      lang = code;
      root.lang = code;
      fmtCache = {};
      applyStatic();
      body.setAttribute('data-i18n', 'ready');
      render();
    });
  }
  function t(key, vars) {
    var s = strings[key] != null ? strings[key] : base[key];
    if (s == null) return key;
    return vars ? String(s).replace(/\{(\w+)\}/g, function (m, k) { return vars[k] != null ? vars[k] : m; }) : s;
  }
  function applyStatic() {
    // A string missing from both tables leaves the page's English in place.
    Array.prototype.forEach.call(doc.querySelectorAll('[data-t]'), function (el) { var k = el.getAttribute('data-t'); if (t(k) !== k) el.textContent = t(k); });
    Array.prototype.forEach.call(doc.querySelectorAll('[data-t-aria]'), function (el) { el.setAttribute('aria-label', t(el.getAttribute('data-t-aria'))); });
    select.setAttribute('aria-label', t('language'));
    doc.title = t('title');
  }

  // ---- formatting ----
  function timeText(ms) {
    if (!fmtCache.time) fmtCache.time = new Intl.DateTimeFormat(lang, { hour: 'numeric', minute: '2-digit' });
    return fmtCache.time.format(new Date(ms));
  }
  function duration(sec) {
    sec = Math.max(0, Math.floor(sec));
    var d = Math.floor(sec / 86400), h = Math.floor(sec % 86400 / 3600), m = Math.floor(sec % 3600 / 60);
    if (d) return t('dur_d', { d: d, h: h });
    if (h) return t('dur_h', { h: h, m: m });
    if (m) return t('dur_m', { m: m });
    return t('dur_s', { s: sec });
  }
  function accuracyText(acc) {
    var nf = new Intl.NumberFormat(lang, { maximumFractionDigits: acc >= 1000 ? 1 : 0 });
    return acc >= 1000 ? t('accuracy_km', { n: nf.format(acc / 1000) }) : t('accuracy_m', { n: nf.format(acc) });
  }
  function namesText(names) {
    if (!names.length) return t('your_contacts');
    try { return new Intl.ListFormat(lang, { style: 'long', type: 'conjunction' }).format(names); } catch (e) { return names.join(', '); }
  }
  function setText(id, s) { var el = $(id); if (el && el.textContent !== s) el.textContent = s; }
  function announce(msg, urgent) {
    var el = $(urgent ? 'alert' : 'announce');
    if (!msg) return;
    el.textContent = '';
    setTimeout(function () { el.textContent = msg; }, 60);
  }

  // ---- state ----
  var S = {
    secret: null,
    // GET /api/v1/devices/me, kept on the phone for a press (and its SMS fallback) without a network
    card: null,
    screen: 'idle',
    // the SOS as last read: GET /api/v1/devices/sos while live
    expiresAt: null, links: null, answers: [],
    // started at least once in this visit: from then on every position is queued and sent until the page closes
    recording: false, live: false, canSend: false,
    watchId: null, lastFix: null, loc: 'none', batt: null,
    sent: 0, netDown: false, lastQueuedTst: 0,
    pin: '', pinBusy: false,
    // bumped by every start and stop: an answer to a request made before one is old news, and ignored
    epoch: 0,
  };

  // ---- the secret ----
  function readSecret() {
    var m = /(?:^#|[#&])d=([A-Za-z0-9_-]{16,128})(?:&|$)/.exec(location.hash);
    if (m) {
      if (load(KEY_SECRET) !== m[1]) save(KEY_CARD, null);
      save(KEY_SECRET, m[1]);
      // Out of the address bar (and its history entry): a screenshot or a shared URL must not carry it.
      history.replaceState(null, '', location.pathname + location.search);
      return m[1];
    }
    return load(KEY_SECRET);
  }

  // ---- the API ----
  // Resolves to {status, body, retryAfter}; status 0 for a network failure or a timeout. Never rejects.
  function api(method, path, payload, timeoutMs) {
    var ctl = typeof AbortController === 'function' ? new AbortController() : null;
    var timer = ctl && timeoutMs ? setTimeout(function () { ctl.abort(); }, timeoutMs) : null;
    var opts = {
      method: method, cache: 'no-store', credentials: 'omit', referrerPolicy: 'no-referrer',
      headers: { Authorization: 'Bearer ' + S.secret },
    };
    if (ctl) opts.signal = ctl.signal;
    if (payload !== undefined) { opts.headers['Content-Type'] = 'application/json'; opts.body = JSON.stringify(payload); }
    return fetch(API + path, opts).then(function (res) {
      return res.text().then(function (text) {
        var j = null;
        try { j = text ? JSON.parse(text) : null; } catch (e) { j = null; }
        return { status: res.status, body: j || {}, retryAfter: parseInt(res.headers.get('Retry-After'), 10) || 0 };
      });
    }).catch(function () { return { status: 0, body: {}, retryAfter: 0 }; }).then(function (r) {
      if (timer) clearTimeout(timer);
      var down = r.status === 0;
      if (down !== S.netDown) { S.netDown = down; body.setAttribute('data-net', down ? 'down' : 'ok'); }
      return r;
    });
  }
  function unknownDevice(r) { return r.status === 404 && r.body.error === 'unknown_device'; }

  function loadCard() {
    return api('GET', '/me').then(function (r) {
      if (r.status === 200 && r.body.device_id) {
        S.card = r.body;
        save(KEY_CARD, JSON.stringify(r.body));
      } else if (unknownDevice(r)) {
        S.secretGone = true;
        show('setup');
      }
      render();
      return r;
    });
  }
  var stateBusy = false;
  function loadState() {
    if (stateBusy) return Promise.resolve(null);
    stateBusy = true;
    var epoch = S.epoch;
    return api('GET', '/sos').then(function (r) {
      stateBusy = false;
      // A poll sent before a stop may be answered after it, still "live": the stop has the last word.
      if (r.status === 200 && epoch === S.epoch) applyState(r.body);
      return r;
    });
  }
  function applyState(j) {
    if (j.status === 'live') {
      if (j.expires_at) S.expiresAt = Date.parse(j.expires_at) || S.expiresAt;
      if (j.audience && Array.isArray(j.audience.links)) S.links = j.audience.links;
      if (Array.isArray(j.answers)) j.answers.forEach(addAnswer);
      // Present while nobody said they are coming or called for help: the ladder alerts everyone again.
      S.ladder = j.escalation || null;
      if (!S.live) becameLive();
    } else if (S.live) {
      stopped(j.stopped_at);
    }
    render();
  }

  // ---- screens ----
  var SCREENS = ['setup', 'idle', 'countdown', 'starting', 'fallback', 'sharing', 'pin', 'stopped'];
  function show(name, focus) {
    S.screen = name;
    body.setAttribute('data-screen', name);
    SCREENS.forEach(function (n) { $('s-' + n).hidden = n !== name; });
    render();
    var el = focus && $(focus);
    if (el) el.focus();
  }

  // ---- the press, the countdown ----
  var countTimer = null, countEnd = 0;
  function countdownSeconds() {
    var n = S.card && typeof S.card.countdown_s === 'number' ? S.card.countdown_s : 5;
    return Math.max(0, Math.min(10, Math.round(n)));
  }
  function press() {
    if (!S.secret || (S.screen !== 'idle' && S.screen !== 'stopped')) return;
    startWatch();
    var n = countdownSeconds();
    if (!n) { beginStart(); return; }
    countEnd = Date.now() + n * 1000;
    show('countdown', 'cancel');
    announce(t('announce_countdown', { n: n }), true);
    countTimer = setInterval(tickCount, 200);
  }
  function countLeft() { return Math.max(0, Math.ceil((countEnd - Date.now()) / 1000)); }
  function tickCount() {
    if (countLeft() > 0) { renderCountdown(); return; }
    clearInterval(countTimer);
    countTimer = null;
    beginStart();
  }
  function cancel() {
    if (countTimer) clearInterval(countTimer);
    countTimer = null;
    // Nothing was sent: the position stops being read too, unless an SOS of this visit still wants it.
    if (!S.recording) stopWatch();
    show('idle', 'press');
    announce(t('announce_cancelled'), false);
  }

  // ---- the start, and its SMS fallback while Flare cannot be reached ----
  var startTimer = null, retryTimer = null, retryAt = 0, backoff = 0, startBusy = false;
  function beginStart() {
    if (S.live) return;
    S.epoch++;
    S.recording = true;
    // Until the start is answered the queue waits: its oldest position goes with the start.
    S.canSend = false;
    S.fallbackWhy = null;
    // What an earlier SOS of this visit showed is not this one's.
    S.links = null; S.answers = []; S.ladder = null; S.answersSeen = false; S.note = null; S.expiresAt = null;
    Q.dropped = 0;
    backoff = 0;
    save(KEY_PENDING, load(KEY_PENDING) || String(Date.now()));
    show('starting', 'start-h');
    // The press shows the fallback after START_TIMEOUT_MS whatever happens, or sooner if the start fails sooner.
    clearTimeout(startTimer);
    startTimer = setTimeout(function () { if (!S.live) showFallback(); }, START_TIMEOUT_MS);
    // A first fix still on its way gets a second; a refused or missing location none.
    var waited = S.lastFix || S.loc === 'denied' || S.loc === 'unavailable' ? 0 : 1000;
    setTimeout(function () {
      if (S.lastFix) enqueue(S.lastFix);
      attemptStart();
    }, waited);
  }
  // The fallback's "do not send": a press by mistake while Flare could not be reached must not arrive later.
  function abandonStart() {
    if (S.live) return;
    clearTimeout(startTimer);
    clearTimeout(retryTimer);
    retryTimer = null;
    save(KEY_PENDING, null);
    S.epoch++;
    S.canSend = S.stoppedAt != null;
    if (!S.canSend) {
      S.recording = false;
      stopWatch();
      Q.items.slice().forEach(function (x) { qRemove(x.n, false); });
    }
    show(S.stoppedAt != null ? 'stopped' : 'idle', S.stoppedAt != null ? 'st-h' : 'press');
  }
  function attemptStart() {
    if (S.live || startBusy || !S.recording || S.canSend) return;
    clearTimeout(retryTimer);
    retryTimer = null;
    // A position on its way to /locations is not also the start's.
    if (sending) { retryTimer = setTimeout(attemptStart, 100); return; }
    startBusy = true;
    var epoch = S.epoch;
    // The oldest waiting position goes with the start (kept with the share); the rest follow in order.
    var first = Q.items[0];
    api('POST', '/sos', first ? first.fix : {}, START_TIMEOUT_MS).then(function (r) {
      startBusy = false;
      if (S.live) return;
      // Started, even if "do not send" was pressed meanwhile: the family was told, and the page says so (Stop is there).
      if (r.status === 201 || r.status === 200) {
        if (first) qRemove(first.n, true);
        S.links = (r.body.links || []).map(function (l) { return { name: l.name, link_id: l.link_id }; });
        if (r.body.expires_at) S.expiresAt = Date.parse(r.body.expires_at) || null;
        becameLive();
        loadState();
        return;
      }
      if ((r.status === 400 || r.status === 413) && first) {
        // That position was refused (a clock far off): start without it.
        qRemove(first.n, false);
        attemptStart();
        return;
      }
      if (epoch !== S.epoch) return;
      S.fallbackWhy = r.status === 429 && r.body.error === 'sos_limit' ? 'limit' : unknownDevice(r) ? 'gone' : 'unreachable';
      showFallback();
      backoff = Math.min(30, backoff ? backoff * 2 : 2);
      retryAt = Date.now() + Math.max(backoff, r.retryAfter || 0) * 1000;
      retryTimer = setTimeout(attemptStart, retryAt - Date.now());
      render();
    });
  }
  function showFallback() {
    if (S.live || S.screen === 'fallback') return;
    show('fallback', 'fb-h');
    announce(t('fallback_title'), true);
  }
  function smsNumbers() {
    return ((S.card && S.card.contacts) || []).filter(function (c) { return c && typeof c.phone === 'string' && c.phone; });
  }
  function round(v, n) { var p = Math.pow(10, n); return Math.round(v * p) / p; }
  function smsBody() {
    var who = (S.card && S.card.name) || t('someone');
    var f = S.lastFix;
    if (!f) return t('sms_body_nopos', { name: who });
    var lat = f.lat.toFixed(5), lon = f.lon.toFixed(5);
    // No "&" in the link: Android's Messaging (AOSP's, and Google's from it) decodes the URI, then ends the body at
    // the first "&" (LaunchConversationActivity.getBody). The map opens centred on the position.
    var map = 'https://www.openstreetmap.org/#map=18/' + lat + '/' + lon;
    return t('sms_body', { name: who, lat: lat, lon: lon, acc: f.acc != null ? accuracyText(f.acc) : '', time: timeText(f.tst * 1000), map: map });
  }
  // RFC 5724's sms:<number>,<number>?body=… for Android (its Messaging splits the numbers at "," or ";":
  // UriUtil.parseRecipientsFromSmsMmsUri); iOS's Messages wants the body after "&" (as iOS builds sms: links itself).
  function smsHref(numbers, text) {
    var ios = /iP(hone|ad|od)/.test(navigator.userAgent) || (navigator.platform === 'MacIntel' && navigator.maxTouchPoints > 1);
    return 'sms:' + numbers.join(',') + (ios ? '&' : '?') + 'body=' + encodeURIComponent(text);
  }

  function becameLive() {
    save(KEY_PENDING, null);
    S.live = true;
    S.canSend = true;
    S.recording = true;
    S.stoppedAt = null;
    if (countTimer) clearInterval(countTimer);
    countTimer = null;
    clearTimeout(startTimer);
    clearTimeout(retryTimer);
    retryTimer = null;
    startWatch();
    holdAwake();
    startPolling();
    if (S.screen !== 'pin') show('sharing', 'sh-h');
    announce(t('announce_sent'), true);
    pump();
  }

  // ---- while sharing ----
  var pollTimer = null;
  function startPolling() {
    if (pollTimer) return;
    pollTimer = setInterval(function () { if (S.live) loadState(); }, POLL_MS);
  }
  function addAnswer(a) {
    if (!a || a.id == null || S.answers.some(function (x) { return x.id === a.id; })) return;
    S.answers.push(a);
    S.answers.sort(function (x, y) { return Number(x.id) - Number(y.id); });
    if (S.answers.length > 50) S.answers.shift();
    if (S.answersSeen) announce(answerText(a), true);
  }
  function answerText(a) {
    return t('answer_line', { name: a.name || t('someone'), what: t('answer_kind_' + a.kind), time: timeText(Date.parse(a.at)) });
  }
  function extend() {
    $('extend').disabled = true;
    var epoch = S.epoch;
    // An hour more than is left (the API's duration counts from now).
    var left = S.expiresAt ? Math.max(0, Math.round((S.expiresAt - Date.now()) / 1000)) : 0;
    api('POST', '/sos/extend', { duration_s: left + 3600 }, 15000).then(function (r) {
      $('extend').disabled = false;
      if (epoch !== S.epoch || !S.live) return;
      if (r.status === 200 && r.body.status === 'live') {
        applyState(r.body);
        S.note = t('extended', { d: duration((S.expiresAt - Date.now()) / 1000) });
      } else if (r.status === 409) {
        stopped(null);
        return;
      } else {
        S.note = t('extend_failed');
      }
      announce(S.note, false);
      render();
    });
  }

  // ---- stop: a PIN pad when the device has a PIN, a confirmation when not ----
  function openStop() {
    S.pin = '';
    S.pinError = '';
    show('pin', 'pin-h');
  }
  function pinKey(k) {
    if (S.pinBusy) return;
    if (k === 'del') S.pin = S.pin.slice(0, -1);
    else if (/^[0-9]$/.test(k) && S.pin.length < 12) S.pin += k;
    S.pinError = '';
    render();
  }
  function submitStop() {
    var hasPin = !!(S.card && S.card.has_pin);
    if (S.pinBusy || (hasPin && S.pin.length < 4)) {
      if (hasPin && S.pin.length < 4) { S.pinError = t('pin_short'); render(); }
      return;
    }
    S.pinBusy = true;
    render();
    api('POST', '/sos/stop', hasPin ? { pin: S.pin } : {}, 15000).then(function (r) {
      S.pinBusy = false;
      S.pin = '';
      if (r.status === 200) { stopped(r.body.stopped_at); return; }
      if (r.status === 403 && r.body.error === 'stop_locked') S.pinError = t('pin_locked', { d: duration(r.retryAfter || 900) });
      else if (r.status === 403) S.pinError = t('pin_wrong');
      else S.pinError = t('stop_failed');
      render();
    });
  }
  // The same for every stop (a duress PIN's included): the positions of this visit keep going out until it closes.
  function stopped(at) {
    S.epoch++;
    S.live = false;
    S.stoppedAt = Date.parse(at || '') || Date.now();
    clearInterval(pollTimer);
    pollTimer = null;
    show('stopped', 'st-h');
    announce(t('stopped_title'), true);
  }

  // ---- positions ----
  function startWatch() {
    if (S.watchId != null) return;
    if (!navigator.geolocation) { setLoc('unavailable'); return; }
    S.watchId = navigator.geolocation.watchPosition(onFix, onFixError, { enableHighAccuracy: true, maximumAge: 0 });
    if (navigator.getBattery) {
      navigator.getBattery().then(function (b) {
        var read = function () { S.batt = Math.round(b.level * 100); };
        read();
        b.addEventListener('levelchange', read);
      }, function () {});
    }
  }
  function stopWatch() {
    if (S.watchId != null && navigator.geolocation) navigator.geolocation.clearWatch(S.watchId);
    S.watchId = null;
  }
  function setLoc(state) {
    S.loc = state;
    body.setAttribute('data-loc', state);
    render();
  }
  function onFix(p) {
    var c = p.coords;
    var fix = { _type: 'location', lat: round(c.latitude, 7), lon: round(c.longitude, 7), tst: Math.floor((p.timestamp || Date.now()) / 1000) };
    if (c.accuracy != null && isFinite(c.accuracy)) fix.acc = Math.round(c.accuracy);
    if (c.altitude != null && isFinite(c.altitude)) fix.alt = Math.round(c.altitude);
    if (c.speed != null && isFinite(c.speed)) fix.vel = Math.round(c.speed * 3.6);
    if (c.heading != null && isFinite(c.heading)) fix.cog = Math.round(c.heading);
    if (S.batt != null) fix.batt = S.batt;
    if (S.loc !== 'ok') setLoc('ok');
    take(fix);
  }
  // One position a second (tst is in seconds): a newer one in the same second waits for the next and goes out then, as
  // where the phone is at that second, unless one of that second came first.
  var laterTimer = null;
  function take(fix) {
    if (S.lastFix && fix.tst <= S.lastFix.tst) {
      clearTimeout(laterTimer);
      laterTimer = setTimeout(function () {
        var now = Math.floor(Date.now() / 1000);
        if (now > S.lastFix.tst) take(Object.assign({}, fix, { tst: now }));
      }, (S.lastFix.tst + 1) * 1000 - Date.now() + 20);
      return;
    }
    clearTimeout(laterTimer);
    S.lastFix = fix;
    if (S.recording) enqueue(fix);
    render();
  }
  function onFixError(e) {
    if (e.code === 1) setLoc('denied');
    else if (!S.lastFix) setLoc('unavailable');
  }

  // ---- the queue: every position in IndexedDB until Flare answered it, sent in order, one at a time ----
  // Memory holds the queue (Q.items, oldest first); IndexedDB a copy that outlives the page (written through).
  // Keys grow across visits (from the clock), so a visit's new positions never take an earlier one's key.
  var Q = { db: null, items: [], seq: Date.now() * 100, dropped: 0 };
  function openQueue() {
    return new Promise(function (resolve) {
      var req;
      try { req = indexedDB.open('flare-sos', 1); } catch (e) { resolve(); return; }
      req.onupgradeneeded = function () { req.result.createObjectStore('fixes', { keyPath: 'n' }); };
      req.onerror = req.onblocked = function () { resolve(); };
      req.onsuccess = function () {
        Q.db = req.result;
        try {
          var all = Q.db.transaction('fixes', 'readonly').objectStore('fixes').getAll();
          all.onsuccess = function () {
            Q.items = (all.result || []).concat(Q.items).sort(function (a, b) { return a.n - b.n; });
            Q.seq = Q.items.reduce(function (m, x) { return Math.max(m, x.n); }, Q.seq);
            resolve();
          };
          all.onerror = function () { resolve(); };
        } catch (e) { resolve(); }
      };
    });
  }
  function qWrite(op, arg) {
    if (!Q.db) return;
    try { Q.db.transaction('fixes', 'readwrite').objectStore('fixes')[op](arg); } catch (e) {}
  }
  function enqueue(fix) {
    // Each position once: the start's own first one too, whether or not the queue still holds it.
    if (fix.tst <= S.lastQueuedTst) return;
    S.lastQueuedTst = fix.tst;
    var item = { n: ++Q.seq, fix: fix };
    Q.items.push(item);
    qWrite('put', item);
    while (Q.items.length > QUEUE_MAX) {
      qWrite('delete', Q.items.shift().n);
      Q.dropped++;
    }
    pump();
  }
  function qRemove(n, sent) {
    Q.items = Q.items.filter(function (x) { return x.n !== n; });
    qWrite('delete', n);
    if (sent) S.sent++;
    render();
  }
  var sending = false, pumpTimer = null, holdUntil = 0, pumpBackoff = 0;
  function pump() {
    if (sending || !S.canSend || !Q.items.length || Date.now() < holdUntil) return;
    clearTimeout(pumpTimer);
    pumpTimer = null;
    sending = true;
    var item = Q.items[0];
    api('POST', '/locations', item.fix, 15000).then(function (r) {
      sending = false;
      if (r.status === 202 || r.status === 200) {
        // 200 not_sharing: the SOS is over (or only seems so): nothing to keep.
        pumpBackoff = 0;
        qRemove(item.n, true);
        pump();
        return;
      }
      if (r.status >= 400 && r.status < 500 && r.status !== 429 && r.status !== 408) {
        if (unknownDevice(r)) { S.canSend = false; render(); return; }
        // Refused for what it is (not for when): sending it again would be refused again.
        qRemove(item.n, false);
        pump();
        return;
      }
      pumpBackoff = Math.min(8, pumpBackoff ? pumpBackoff * 2 : 1);
      var wait = r.retryAfter ? r.retryAfter * 1000 : pumpBackoff * 1000;
      holdUntil = Date.now() + wait;
      pumpTimer = setTimeout(function () { holdUntil = 0; pump(); }, wait);
      render();
    });
  }

  // ---- staying awake ----
  var lock = null;
  function holdAwake() {
    if (lock || !navigator.wakeLock || doc.visibilityState !== 'visible') return;
    navigator.wakeLock.request('screen').then(function (l) {
      lock = l;
      body.setAttribute('data-awake', 'held');
      l.addEventListener('release', function () { lock = null; body.setAttribute('data-awake', 'none'); });
    }, function () {});
  }

  // ---- location permission, before a press ----
  function checkPermission() {
    if (!navigator.permissions || !navigator.permissions.query) return;
    navigator.permissions.query({ name: 'geolocation' }).then(function (st) {
      var apply = function () {
        S.perm = st.state;
        if (st.state === 'denied') setLoc('denied');
        else if (S.loc === 'denied') setLoc('none');
        render();
      };
      apply();
      st.addEventListener('change', apply);
    }, function () {});
  }

  // ---- rendering ----
  function contactNames() {
    var links = (S.links || []).filter(function (l) { return !l.withdrawn_at; }).map(function (l) { return l.name; });
    if (links.length) return links;
    return ((S.card && S.card.contacts) || []).map(function (c) { return c.name; });
  }
  function locSentence() {
    return S.loc === 'denied' ? t('loc_denied') : S.loc === 'unavailable' ? t('loc_unavailable') : '';
  }
  function renderCountdown() {
    var n = countLeft();
    setText('count', String(n));
    setText('count-h', t('countdown_text', { n: n }));
  }
  function render() {
    if (body.getAttribute('data-i18n') !== 'ready') return;
    body.setAttribute('data-queued', String(Q.items.length));
    body.setAttribute('data-sent', String(S.sent));
    var names = namesText(contactNames());
    var sc = S.screen;
    if (sc === 'setup') setText('setup-text', S.secretGone ? t('setup_gone') : t('setup_text'));
    if (sc === 'idle') {
      setText('idle-hint', t('idle_hint', { names: names }));
      var n = countdownSeconds();
      setText('idle-cd', n ? t('idle_countdown', { n: n }) : '');
      var ls = locSentence() || (S.perm === 'prompt' ? t('loc_ask') : '');
      $('loc-idle').hidden = !ls;
      setText('loc-idle', ls);
      setText('device', S.card ? t('device_line', { name: S.card.name }) : '');
    }
    if (sc === 'countdown') renderCountdown();
    if (sc === 'fallback') renderFallback();
    if (sc === 'sharing') renderSharing(names);
    if (sc === 'pin') renderPin();
    if (sc === 'stopped') setText('st-at', S.stoppedAt ? t('stopped_at', { time: timeText(S.stoppedAt) }) : '');
  }
  function renderFallback() {
    var why = S.fallbackWhy === 'limit' ? t('fallback_limit') : S.fallbackWhy === 'gone' ? t('setup_gone') : t('fallback_text');
    setText('fb-why', why);
    var people = smsNumbers(), text = smsBody();
    var all = $('sms-all');
    all.href = smsHref(people.map(function (c) { return c.phone; }), text);
    setText('sms-all', people.length ? t('sms_all', { names: namesText(people.map(function (c) { return c.name; })) }) : t('sms_none'));
    // One link each as well: not every messaging app takes several numbers at once.
    var list = $('sms-each'), want = people.length > 1 ? people : [];
    var sig = want.map(function (c) { return c.name + c.phone; }).join('|') + text + lang;
    if (list.getAttribute('data-sig') !== sig) {
      list.setAttribute('data-sig', sig);
      list.textContent = '';
      want.forEach(function (c) {
        var li = doc.createElement('li'), a = doc.createElement('a');
        a.href = smsHref([c.phone], text);
        a.textContent = t('sms_one', { name: c.name });
        li.appendChild(a);
        list.appendChild(li);
      });
    }
    setText('sms-text', text);
    var left = Math.ceil((retryAt - Date.now()) / 1000);
    setText('fb-retry', S.fallbackWhy === 'gone' ? '' : retryTimer && left > 0 ? t('retry_in', { s: left }) : t('retrying'));
  }
  function renderSharing(names) {
    var left = S.expiresAt ? (S.expiresAt - Date.now()) / 1000 : null;
    setText('sh-line', left == null ? t('sharing_with', { names: names }) : left > 0
      ? t('sharing_until', { names: names, d: duration(left) }) : t('sharing_ending', { names: names }));
    var f = S.lastFix;
    if (f) {
      var age = Math.max(0, Date.now() / 1000 - f.tst);
      var acc = f.acc != null ? accuracyText(f.acc) : '';
      setText('fix-line', age < 5 ? t('fix_now', { acc: acc }) : t('fix_ago', { ago: duration(age), acc: acc }));
    } else {
      setText('fix-line', t('fix_none'));
    }
    var ls = locSentence();
    $('loc-note').hidden = !ls;
    setText('loc-note', ls);
    var q = Q.items.length, qs = '';
    if (S.netDown && q) qs = t('queued_offline', { n: q });
    else if (q > 1) qs = t('queued', { n: q });
    if (Q.dropped) qs += (qs ? ' ' : '') + t('dropped', { n: Q.dropped });
    $('queue-note').hidden = !qs;
    setText('queue-note', qs);
    renderList('opened', (S.links || []).filter(function (l) { return !l.withdrawn_at; }).map(function (l) {
      return { text: l.first_opened_at ? t(l.watching_now ? 'link_watching' : 'link_opened', { name: l.name, time: timeText(Date.parse(l.first_opened_at)) })
        : t('link_not_opened', { name: l.name }) };
    }), t('links_none'));
    var rows = S.answers.map(function (a) { return { text: answerText(a), cls: 'answer' }; });
    if (S.ladder) {
      rows.push({ text: S.ladder.next_at ? t('nobody_yet_next', { time: timeText(Date.parse(S.ladder.next_at)) }) : t('nobody_yet'), cls: 'ladder' });
    }
    renderList('answers', rows, t('answers_none'));
    S.answersSeen = true;
    $('sh-status').hidden = !S.note;
    setText('sh-status', S.note || '');
  }
  function renderList(id, rows, empty) {
    var list = $(id);
    if (!rows.length) rows = [{ text: empty }];
    var sig = rows.map(function (r) { return r.text; }).join('\n');
    if (list.getAttribute('data-sig') === sig) return;
    list.setAttribute('data-sig', sig);
    list.textContent = '';
    rows.forEach(function (r) {
      var li = doc.createElement('li');
      li.textContent = r.text;
      if (r.cls) li.className = r.cls;
      list.appendChild(li);
    });
  }
  function renderPin() {
    var hasPin = !!(S.card && S.card.has_pin);
    body.setAttribute('data-nopin', hasPin ? 'false' : 'true');
    setText('pin-h', hasPin ? t('pin_title') : t('confirm_title'));
    setText('pin-dots', new Array(S.pin.length + 1).join('\u25CF'));
    setText('pin-count', hasPin ? t('pin_count', { n: S.pin.length }) : '');
    setText('pin-error', S.pinError || '');
    $('pin-ok').disabled = S.pinBusy;
  }

  // ---- start ----
  var stringsReady = null;
  function start() {
    // The PIN pad: 1-9, a gap, 0 and delete (its name from the strings).
    '123456789 0<'.split('').forEach(function (k) {
      var b = doc.createElement(k === ' ' ? 'span' : 'button');
      if (k !== ' ') {
        b.type = 'button';
        b.className = 'key';
        b.textContent = k === '<' ? '\u232B' : k;
        if (k === '<') b.setAttribute('data-t-aria', 'pin_delete');
        b.setAttribute('data-key', k === '<' ? 'del' : k);
        b.addEventListener('click', function () { pinKey(b.getAttribute('data-key')); });
      }
      $('pad').appendChild(b);
    });
    lang = pickLang();
    select.value = lang;
    select.addEventListener('change', function () {
      save(KEY_LANG, select.value);
      loadLang(select.value);
    });
    stringsReady = loadLang(lang);
    $('press').addEventListener('click', press);
    $('cancel').addEventListener('click', cancel);
    $('extend').addEventListener('click', extend);
    $('stop').addEventListener('click', openStop);
    $('pin-back').addEventListener('click', function () { show(S.live ? 'sharing' : 'stopped', 'stop'); });
    $('pin-ok').addEventListener('click', submitStop);
    $('again').addEventListener('click', function () { show('idle', 'press'); });
    $('fb-cancel').addEventListener('click', abandonStart);
    doc.addEventListener('keydown', function (e) {
      if (S.screen !== 'pin') return;
      if (/^[0-9]$/.test(e.key)) pinKey(e.key);
      else if (e.key === 'Backspace') pinKey('del');
      else if (e.key === 'Enter' && e.target === body) submitStop();
    });

    try { S.card = JSON.parse(load(KEY_CARD) || 'null'); } catch (e) { S.card = null; }
    var wantPress = takeHash();
    // A setup link or the shortcut opened while the page is open changes only the fragment: the same document.
    window.addEventListener('hashchange', function () {
      var before = S.secret, again = takeHash();
      if (S.secret && S.secret !== before) {
        S.secretGone = false;
        if (before) S.card = null;
        begin(again);
      } else if (again) {
        stringsReady.then(press);
      }
    });
    if (!S.secret) { show('setup'); return; }
    begin(wantPress);
  }
  // The fragment: a setup link's secret (kept, then taken out of the address bar), the shortcut's "press".
  function takeHash() {
    var wantPress = /(?:^#|&)press(?:&|$)/.test(location.hash);
    S.secret = readSecret() || S.secret;
    if (wantPress) history.replaceState(null, '', location.pathname + location.search);
    return wantPress;
  }
  // Once there is a secret: the card, the SOS, the queue, the worker.
  var begun = false;
  function begin(wantPress) {
    if (S.screen === 'setup') show('idle');
    // The home-screen shortcut (/sos#press) presses at once; the countdown still guards it.
    if (wantPress) stringsReady.then(press);
    if (begun) { sync(); return; }
    begun = true;
    checkPermission();
    if ('serviceWorker' in navigator) navigator.serviceWorker.register('/sos-sw.js', { scope: '/sos' }).catch(function () {});
    setInterval(function () { if (S.screen === 'sharing' || S.screen === 'fallback') render(); }, 1000);
    window.addEventListener('online', function () {
      holdUntil = 0;
      if (!synced) sync();
      pump();
      if (!S.live && S.recording && retryTimer) attemptStart();
    });
    // Back on screen: the wake lock again (after a stop too: positions go out as long as the page is open), a
    // fresh look at the SOS, and what waits is tried now.
    doc.addEventListener('visibilitychange', function () {
      if (doc.visibilityState !== 'visible') return;
      if (S.recording) holdAwake();
      if (S.live) loadState();
      else if (S.recording && retryTimer) attemptStart();
      pump();
    });
    openQueue().then(function () {
      Q.items.forEach(function (x) { S.lastQueuedTst = Math.max(S.lastQueuedTst, x.fix.tst); });
      // A press of the last hour still unanswered: it goes on (its positions waited in the queue).
      var pending = parseInt(load(KEY_PENDING), 10);
      if (Date.now() - pending < 3600000 && !S.recording) { startWatch(); beginStart(); }
      sync();
    });
  }
  // The card and the SOS, read until Flare answers (a page opened without a network tries again every 10 s).
  // Positions left from an earlier visit go out once it has (taken into a live SOS, or answered and dropped).
  var synced = false, syncTimer = null;
  function sync() {
    clearTimeout(syncTimer);
    Promise.all([loadCard(), loadState()]).then(function (r) {
      synced = !!(r[1] && r[1].status === 200);
      if (!synced) { syncTimer = setTimeout(sync, 10000); return; }
      if (!S.recording || S.live) { S.canSend = true; pump(); }
      render();
    });
  }

  start();
})();
