// Flare viewer: the page a family member opens from the SMS link /s/<view_token>.
// Plain ES2017, no build step. Runs under a CSP without 'unsafe-inline': no inline scripts, no style
// attributes; the only styling from script is Leaflet's own CSSOM use and SVG attributes.
// The token is read from location.pathname and only ever sent back to this origin's API.
(function () {
  'use strict';

  var doc = document;
  var root = doc.documentElement;
  var body = doc.body;
  var $ = function (id) { return doc.getElementById(id); };

  // ---- configuration from the server (data-* on <html>), filled in from flared's settings ----
  // No defaults here: flared's settings table is their one home. A page whose template lacks a setting goes
  // without what it configures (no map, no staleness warning) rather than guess, and says so in the console.
  function cfg(name) {
    var v = root.getAttribute('data-' + name);
    return v && v.indexOf('{{') < 0 ? v : null;
  }
  var STALE_AFTER_S = parseInt(cfg('stale-after'), 10);
  if (!(STALE_AFTER_S > 0)) STALE_AFTER_S = Infinity;
  var TILE_URL = cfg('tile-url');
  var TILE_ATTRIBUTION = cfg('tile-attribution') || '';
  var POLL_MS = 3000;
  // an EventSource that stays unopened this long counts as failed
  var SSE_OPEN_TIMEOUT_MS = 8000;
  // while polling, try SSE again this long after it failed
  var SSE_RETRY_AFTER_MS = 30000;
  var ANNOUNCE_EVERY_MS = 30000;    // screen readers hear "position updated" at most this often
  var TRAIL_MAX = 500;

  // ---- strings ----
  var select = $('lang');
  // The language list is the switcher's <option>s; a page without one (not-found) trusts the server.
  var LANGS = select ? Array.prototype.map.call(select.options, function (o) { return o.value; })
    : [(cfg('lang') || 'en')].filter(function (c) { return /^[A-Za-z]{2,3}(-[A-Za-z0-9]{2,8})*$/.test(c); });
  var i18nReady = false;
  // English: fallback for keys a translation lacks
  var base = {};
  var strings = {};
  var lang = pickLang();

  function pickLang() {
    var q = new URLSearchParams(location.search).get('lang');
    var want = [q, (cfg('lang') || 'en'), 'en'];
    for (var i = 0; i < want.length; i++) {
      if (!want[i]) continue;
      for (var j = 0; j < LANGS.length; j++) if (LANGS[j].toLowerCase() === want[i].toLowerCase()) return LANGS[j];
    }
    return 'en';
  }
  function fetchStrings(code) {
    return fetch('/viewer/i18n/' + encodeURIComponent(code) + '.json', { credentials: 'same-origin' })
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
      i18nReady = true;
      applyStatic();
      body.setAttribute('data-i18n', 'ready');
    });
  }
  function t(key, vars) {
    var s = strings[key] != null ? strings[key] : base[key];
    if (s == null) return key;
    return vars ? String(s).replace(/\{(\w+)\}/g, function (m, k) { return vars[k] != null ? vars[k] : m; }) : s;
  }
  function applyStatic() {
    Array.prototype.forEach.call(doc.querySelectorAll('[data-t]'), function (el) {
      // dynamic, set by render()
      if (el.id === 'title' || el.id === 'status') return;
      el.textContent = t(el.getAttribute('data-t'));
    });
    Array.prototype.forEach.call(doc.querySelectorAll('[data-t-aria]'), function (el) {
      el.setAttribute('aria-label', t(el.getAttribute('data-t-aria')));
    });
    if (select) select.setAttribute('aria-label', t('language'));
  }

  // ---- formatting ----
  var fmtCache = {};
  function nf(opts) {
    var k = 'n' + JSON.stringify(opts);
    return fmtCache[k] || (fmtCache[k] = new Intl.NumberFormat(lang, opts));
  }
  function timeText(ms) {
    var sameDay = new Date(ms).toDateString() === new Date(serverNow()).toDateString();
    var k = sameDay ? 'time' : 'datetime';
    if (!fmtCache[k]) {
      var o = { hour: 'numeric', minute: '2-digit', second: '2-digit' };
      if (!sameDay) { o.month = 'short'; o.day = 'numeric'; }
      fmtCache[k] = new Intl.DateTimeFormat(lang, o);
    }
    return fmtCache[k].format(new Date(ms));
  }
  function duration(sec, precise) {
    sec = Math.max(0, Math.floor(sec));
    var d = Math.floor(sec / 86400), h = Math.floor(sec % 86400 / 3600), m = Math.floor(sec % 3600 / 60), s = sec % 60;
    if (d) return t('dur_d', { d: d, h: h });
    if (h) return t('dur_h', { h: h, m: m });
    if (m) return precise ? t('dur_ms', { m: m, s: s }) : t('dur_m', { m: m });
    return t('dur_s', { s: s });
  }
  function coordText(f) { return f.lat.toFixed(5) + ', ' + f.lon.toFixed(5); }
  function accuracyText(acc) {
    return acc >= 1000 ? t('accuracy_km', { n: nf({ maximumFractionDigits: 1 }).format(acc / 1000) })
      : t('accuracy_m', { n: nf({ maximumFractionDigits: 0 }).format(acc) });
  }
  function num(v) { return typeof v === 'number' && isFinite(v) ? v : null; }

  // ---- state ----
  var m = location.pathname.match(/^\/s\/([A-Za-z0-9_~.%-]+)\/?$/);
  var TOKEN = m ? m[1] : null;
  var API = TOKEN ? '/api/v1/view/' + TOKEN : null;
  // A random id this browser keeps, so the person sharing learns how many opened the link (the server keeps only a
  // hash of it with the share): '?v=' on the view and its live stream.
  var Q = (function () {
    try {
      var v = localStorage.getItem('flare-viewer');
      if (!/^[A-Za-z0-9_-]{22}$/.test(v || '')) {
        var b = new Uint8Array(16);
        crypto.getRandomValues(b);
        v = btoa(String.fromCharCode.apply(null, b)).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
        localStorage.setItem('flare-viewer', v);
      }
      return '?v=' + v;
    } catch (e) { return ''; }
  })();
  var S = {
    // loading | active | ended | notfound
    state: 'loading',
    // connecting | live | polling | reconnecting | closed
    conn: 'connecting',
    name: null, expiresAt: null, endedAt: null, reason: null,
    last: null, trail: [],
    tracker: null,      // the server's tracker report: state live|stale|offline, since, battery, locate_*
    locateNote: null,   // what the last "locate now" press got back, until the tracker says more
    // server clock minus device clock, ms
    skew: 0,
    follow: true, fresh: 'none', lastAnnounce: 0, firstShown: false,
  };
  function serverNow() { return Date.now() + S.skew; }

  function normFix(f) {
    if (!f || typeof f !== 'object') return null;
    var lat = num(f.lat), lon = num(f.lon), tst = num(f.tst);
    if (lat == null || lon == null || tst == null || Math.abs(lat) > 90 || Math.abs(lon) > 180) return null;
    return { lat: lat, lon: lon, tst: tst, acc: num(f.acc), alt: num(f.alt), vel: num(f.vel), cog: num(f.cog), batt: num(f.batt), bs: num(f.bs) };
  }
  // Merge one fix into trail/last; idempotent, so gap-filling from the view JSON can overlap SSE.
  // Returns true when it became the newest position.
  function addFix(raw) {
    var f = normFix(raw);
    if (!f) return false;
    var tr = S.trail, i = tr.length;
    while (i > 0 && tr[i - 1].tst > f.tst) i--;
    if (i > 0 && tr[i - 1].tst === f.tst) {
      var same = tr[i - 1].lat === f.lat && tr[i - 1].lon === f.lon;
      tr[i - 1] = f;
      if (same) { if (S.last && S.last.tst === f.tst) S.last = f; return false; }
    } else {
      tr.splice(i, 0, f);
      if (tr.length > TRAIL_MAX) tr.splice(0, tr.length - TRAIL_MAX);
    }
    if (!S.last || f.tst >= S.last.tst) { S.last = f; return true; }
    return false;
  }

  // ---- end-to-end encrypted shares ----
  // Their part of the page (e2e/viewer-e2e.js, with TweetNaCl and strings of its own) loads only for such a share.
  var E2E = null, e2eWaiting = [], e2eLoading = false;
  function addSealed(list) {
    if (E2E) { E2E.add(list); return; }
    e2eWaiting = e2eWaiting.concat(list);
    if (e2eLoading) return;
    e2eLoading = true;
    var s = doc.createElement('script');
    s.src = '/viewer/e2e/viewer-e2e.js';
    s.onload = function () {
      E2E = window.flareE2E({ addFix: addFix, render: render, $: $, setText: setText, body: body, lang: function () { return lang; },
        replied: function (ms) { if (!(S.replied >= ms)) S.replied = ms; } });
      E2E.add(e2eWaiting);
    };
    doc.head.appendChild(s);
  }

  function applyView(j, t0, t1) {
    if (j.server_time) {
      var st = Date.parse(j.server_time);
      // server_time has whole seconds: take the middle of that second, and ignore changes under a
      // second so the ticking "ago" never steps backwards between polls.
      var skew = st + 500 - (t0 + t1) / 2;
      if (!isNaN(st) && (!S.skewKnown || Math.abs(skew - S.skew) > 1000)) { S.skew = skew; S.skewKnown = true; }
    }
    if (typeof j.name === 'string' && j.name) S.name = j.name;
    // A missed check-in: the page opens with it (the server sends it only once it was missed).
    if (j.checkin && j.checkin.state === 'missed' && j.checkin.due_at) S.checkinDue = Date.parse(j.checkin.due_at) || null;
    var newest = false;
    (Array.isArray(j.trail) ? j.trail : []).forEach(function (f) { newest = addFix(f) || newest; });
    if (j.last) newest = addFix(j.last) || newest;
    if (j.e2e) addSealed(Array.isArray(j.sealed) ? j.sealed : []);
    if (j.tracker) setTracker(j.tracker);
    if (Array.isArray(j.answers)) j.answers.forEach(function (a) { addAnswer(a, false); });
    if (j.state === 'ended') {
      setEnded(j);
    } else {
      if (j.expires_at) S.expiresAt = Date.parse(j.expires_at) || S.expiresAt;
      if (S.state === 'loading') S.state = 'active';
    }
    render(newest);
  }

  // The family's answers (ids increase), from the view, live events and this page; names are text, never markup.
  function addAnswer(a, live) {
    var L = S.answers = S.answers || [];
    if (!a || typeof a.id !== 'string' || L.some(function (x) { return x.id === a.id; })) return;
    L.push(a);
    L.sort(function (x, y) { return x.id - y.id; });
    if (L.length > 20) L.shift();
    if (live && a.id !== S.ownAnswer) announce(answerText(a), false);
    renderAnswers();
  }
  function answerText(a) {
    return t('answer_line', { name: a.name || t('answer_someone'), what: t('answer_kind_' + a.kind), time: timeText(Date.parse(a.at)) });
  }
  // The name in a box of its own (.answer-who), clipped to one line: a name at its limit, or one of letters with
  // combining marks stacked high, must not draw over the rest of the page.
  function answerItem(a) {
    var li = doc.createElement('li'), hole = '\u0000';
    var parts = String(t('answer_line', { name: hole, what: t('answer_kind_' + a.kind), time: timeText(Date.parse(a.at)) })).split(hole);
    li.appendChild(doc.createTextNode(parts[0]));
    if (parts.length > 1) {
      var who = li.appendChild(doc.createElement('span'));
      who.className = 'answer-who';
      who.textContent = a.name || t('answer_someone');
      li.appendChild(doc.createTextNode(parts.slice(1).join('')));
    }
    return li;
  }
  function renderAnswers() {
    var list = $('answers'), answers = S.answers || [];
    if (answers.map(answerText).join('\n') === Array.prototype.map.call(list.children, function (li) { return li.textContent; }).join('\n')) return;
    list.textContent = '';
    answers.forEach(function (a) { list.appendChild(answerItem(a)); });
  }
  // ---- responder ----
  // "Show my distance": this browser's own position, used only here and never sent, gives distance and bearing.
  function toggleDistance() {
    var on = S.watchID == null;
    $('distance').setAttribute('aria-pressed', on ? 'true' : 'false');
    if (!on) {
      navigator.geolocation.clearWatch(S.watchID);
      S.watchID = null; S.me = null;
      if (meMarker) meMarker.remove();
      $('distance-text').hidden = true;
      return;
    }
    S.meNote = t('distance_asking');
    S.watchID = navigator.geolocation ? navigator.geolocation.watchPosition(function (p) {
      S.me = { lat: p.coords.latitude, lon: p.coords.longitude };
      S.meNote = null;
      render(false);
    }, function () { S.me = null; S.meNote = t('distance_denied'); render(false); }, { enableHighAccuracy: true, maximumAge: 10000 }) : -1;
    if (S.watchID === -1) S.meNote = t('distance_denied');
    render(false);
  }
  function renderDistance() {
    var f = S.last, me = S.me, el = $('distance-text');
    el.hidden = S.watchID == null;
    if (el.hidden) return;
    if (!me || !f) { setText('distance-text', S.meNote || ''); return; }
    var r = Math.PI / 180, la1 = me.lat * r, la2 = f.lat * r, dl = (f.lon - me.lon) * r;
    var h = Math.sin((la2 - la1) / 2) * Math.sin((la2 - la1) / 2) + Math.cos(la1) * Math.cos(la2) * Math.sin(dl / 2) * Math.sin(dl / 2);
    var m = 12742000 * Math.asin(Math.min(1, Math.sqrt(h)));
    var deg = (Math.atan2(Math.sin(dl) * Math.cos(la2), Math.cos(la1) * Math.sin(la2) - Math.sin(la1) * Math.cos(la2) * Math.cos(dl)) / r + 360) % 360;
    setText('distance-text', t('distance_text', { d: accuracyText(m).replace(/^±\s?/, ''), dir: String(t('compass')).split(',')[Math.round(deg / 45) % 8], deg: Math.round(deg) }));
    if (map && window.L) {
      if (!meMarker) meMarker = window.L.circleMarker([me.lat, me.lon], { radius: 8, weight: 3, color: '#188038', fillOpacity: 0.5, interactive: false });
      meMarker.setLatLng([me.lat, me.lon]).addTo(map);
    }
  }
  // Degrees, minutes, seconds: what a dispatcher's form may ask for.
  function dms(v, pos, neg) {
    var s10 = Math.round(Math.abs(v) * 36000), d = Math.floor(s10 / 36000), m = Math.floor(s10 % 36000 / 600);
    return d + '° ' + m + '′ ' + (s10 % 600 / 10).toFixed(1) + '″ ' + (v < 0 ? neg : pos);
  }
  function renderDispatch() {
    var f = S.last;
    if (!f) return;
    setText('dispatch-dec', coordText(f));
    setText('dispatch-dms', dms(f.lat, 'N', 'S') + ', ' + dms(f.lon, 'E', 'W'));
    setText('dispatch-acc', t('dispatch_acc', { acc: f.acc != null ? accuracyText(f.acc) : '—', time: timeText(f.tst * 1000) }));
  }

  function sendAnswer(kind) {
    var name = $('answer-name').value.trim().slice(0, 40), bs = doc.querySelectorAll('.answer-buttons button');
    var busy = function (on) { Array.prototype.forEach.call(bs, function (b) { b.disabled = on; }); };
    var say = function (s) { $('answer-status').hidden = !s; setText('answer-status', s); if (s) announce(s, false); };
    try { localStorage.setItem('flare-answer-name', name); } catch (e) {}
    busy(true);
    fetch(API + '/answers', { method: 'POST', cache: 'no-store', credentials: 'same-origin',
      headers: { Accept: 'application/json', 'Content-Type': 'application/json' }, body: JSON.stringify({ kind: kind, name: name }) })
      .then(function (res) {
        if (res.status === 201) return res.json().then(function (a) { S.ownAnswer = a.id; addAnswer(a); say(t('answer_sent')); });
        if (res.status === 410) return refreshView();
        say(res.status === 429 ? t('answer_too_soon', { s: parseInt(res.headers.get('Retry-After'), 10) || 10 }) : t('answer_failed'));
      })
      .catch(function () { say(t('answer_failed')); })
      .then(function () { busy(false); });
  }

  function setTracker(d) {
    if (!d || typeof d.state !== 'string') return;
    var before = S.tracker;
    S.tracker = {
      state: d.state, since: Date.parse(d.since) || null, transport: d.transport || null,
      battery: num(d.battery), batteryLow: d.battery_low === true, charging: d.battery_status === 'charging',
      asked: Date.parse(d.locate_requested_at) || null, answered: Date.parse(d.locate_answered_at) || null,
    };
    if (d.state === 'offline' && (!before || before.state !== 'offline')) announce(t('announce_offline', { time: timeText(S.tracker.since) }), true);
    if (S.tracker.asked && (!before || before.asked !== S.tracker.asked)) S.locateNote = null;
    body.setAttribute('data-tracker', d.state);
    // The duress PIN was entered: the phone says stopped, the page goes on (never taken back; #checkin says so).
    if (d.duress) S.duress = true;
  }

  // "Locate now": asks the phone for a fresh position. The answer shows through the tracker report (every viewer
  // sees that the phone was asked, and when it answered).
  function locate() {
    var btn = $('locate');
    btn.disabled = true;
    S.locateNote = { key: 'locate_asking' };
    tick();
    fetch(API + '/locate', { method: 'POST', cache: 'no-store', credentials: 'same-origin', headers: { Accept: 'application/json' } })
      .then(function (res) {
        if (res.status === 202) return res.json().then(function (j) {
          if (S.tracker) S.tracker.asked = Date.parse(j.requested_at) || serverNow();
          S.locateNote = null;
        });
        if (res.status === 409) { S.locateNote = { key: 'locate_live' }; return; }
        if (res.status === 429) {
          var s = Math.max(1, parseInt(res.headers.get('Retry-After'), 10) || 30);
          S.locateNote = { key: 'locate_too_soon', until: Date.now() + s * 1000 };
          return;
        }
        if (res.status === 410) { refreshView(); S.locateNote = null; return; }
        S.locateNote = { key: 'locate_failed' };
      })
      .catch(function () { S.locateNote = { key: 'locate_failed' }; })
      .then(function () { btn.disabled = false; announce(locateText(), false); tick(); });
  }
  function locateText() {
    var n = S.locateNote, tr = S.tracker;
    if (n) {
      if (n.until) {
        var left = Math.ceil((n.until - Date.now()) / 1000);
        return left > 0 ? t(n.key, { s: left }) : '';
      }
      return t(n.key);
    }
    if (!tr || !tr.asked) return '';
    var answered = tr.answered;
    // An end-to-end encrypted share's answer is known here only, once opened; it arrived in that second or later.
    if (!answered && S.replied > tr.asked - 1000) answered = Math.max(S.replied, tr.asked);
    if (answered && answered >= tr.asked) {
      // Said for ten minutes after the answer; the position's own time says how old it is.
      if (serverNow() - answered > 600000) return '';
      return t('locate_answered', { time: timeText(answered), fix: S.last ? timeText(S.last.tst * 1000) : '—' });
    }
    if (serverNow() - tr.asked > 600000) return '';
    return t('locate_waiting', { time: timeText(tr.asked) });
  }

  function setEnded(d) {
    if (S.state !== 'ended') {
      S.state = 'ended';
      S.reason = d && d.reason || S.reason;
      S.endedAt = d && d.ended_at ? Date.parse(d.ended_at) : serverNow();
      stopLive();
      setConn('closed');
      announce(t('ended_title'), true);
    } else if (d && d.reason) {
      S.reason = d.reason;
      if (d.ended_at) S.endedAt = Date.parse(d.ended_at);
    }
    if (S.reason === 'withdrawn') {
      // The link no longer shows where the sender is: nothing of what it showed stays on the page.
      S.last = null; S.trail = []; S.name = null;
      if (map && marker && map.hasLayer(marker)) { map.removeLayer(marker); map.removeLayer(accCircle); map.removeLayer(trailLine); }
    }
    render(false);
  }
  function setNotFound() {
    if (S.state === 'notfound') return;
    S.state = 'notfound';
    S.last = null; S.trail = [];
    stopLive();
    setConn('closed');
    render(false);
  }

  // ---- talking to the server ----
  // One fetch of the view JSON: initial load, each poll, after an SSE reconnect (fills the gap),
  // when the page becomes visible again, and to confirm the end.
  var inflight = null;
  function refreshView() {
    if (inflight) return inflight;
    var t0 = Date.now();
    inflight = fetch(API + Q, { cache: 'no-store', credentials: 'same-origin', headers: { Accept: 'application/json' } })
      .then(function (res) {
        var t1 = Date.now();
        if (res.status === 429) {
          return { ok: false, retryAfter: Math.max(1, parseInt(res.headers.get('Retry-After'), 10) || 10) };
        }
        if (res.status === 404) { setNotFound(); return { ok: false, final: true }; }
        if (res.status !== 200 && res.status !== 410) return { ok: false };
        return res.json().then(function (j) {
          applyView(j, t0, t1);
          return { ok: true, final: S.state === 'ended' };
        });
      })
      .catch(function () { return { ok: false, network: true }; })
      .then(function (r) { inflight = null; return r; });
    return inflight;
  }

  var es = null, esTimer = null, pollTimer = null, polling = false;
  var sseFails = 0, sseFailedAt = 0, wasDown = false;

  function setConn(c) {
    if (S.conn === c) return;
    var prev = S.conn;
    S.conn = c;
    body.setAttribute('data-conn', c);
    if (c === 'reconnecting') { wasDown = true; announce(t('announce_reconnecting'), false); }
    else if ((c === 'live' || c === 'polling') && prev === 'reconnecting') announce(t('announce_reconnected'), false);
    renderStatus();
  }
  function canTrySSE() {
    return typeof window.EventSource === 'function' && navigator.onLine !== false &&
      sseFails < 3 && Date.now() - sseFailedAt >= SSE_RETRY_AFTER_MS;
  }
  function stopLive() {
    if (es) { es.close(); es = null; }
    clearTimeout(esTimer); esTimer = null;
    clearTimeout(pollTimer);
    polling = false;
  }
  function terminal() { return S.state === 'ended' || S.state === 'notfound'; }

  function openSSE() {
    stopLive();
    var src = new EventSource(API + '/events' + Q);
    es = src;
    // Counted from the first failure, not re-armed by each retry: a stream that errors every few
    // seconds must still give way to polling.
    var armTimer = function () {
      esTimer = setTimeout(function () { esTimer = null; if (es === src && src.readyState !== 1) sseFailed(); }, SSE_OPEN_TIMEOUT_MS);
    };
    armTimer();
    src.onopen = function () {
      if (es !== src) return;
      clearTimeout(esTimer); esTimer = null;
      sseFails = 0;
      setConn('live');
      // fill whatever we missed while away
      if (wasDown) { wasDown = false; refreshView(); }
    };
    src.addEventListener('status', function (e) {
      var d = parseJSON(e.data);
      if (!d) return;
      if (d.state === 'ended') { setEnded(d); refreshView(); return; }
      if (d.expires_at) S.expiresAt = Date.parse(d.expires_at) || S.expiresAt;
      setConn('live');
      tick();
    });
    src.addEventListener('tracker', function (e) {
      var d = parseJSON(e.data);
      if (!d || terminal()) return;
      setTracker(d);
      render(false);
    });
    src.addEventListener('answer', function (e) { addAnswer(parseJSON(e.data), true); });
    src.addEventListener('fix', function (e) {
      var d = parseJSON(e.data);
      if (!d || terminal()) return;
      setConn('live');
      render(addFix(d));
    });
    src.addEventListener('sealed', function (e) {
      var d = parseJSON(e.data);
      if (!d || terminal()) return;
      setConn('live');
      addSealed([d]);
    });
    src.addEventListener('ended', function (e) {
      var d = parseJSON(e.data) || {};
      setEnded(d);
      // the final last/trail
      refreshView();
    });
    src.onerror = function () {
      if (es !== src) return;
      if (terminal()) { stopLive(); return; }
      if (src.readyState === 2) { sseFailed(); return; }  // HTTP error or not an event stream: won't retry
      // the browser retries by itself; give up on it after a while
      setConn('reconnecting');
      if (esTimer == null) armTimer();
    };
  }
  function sseFailed() {
    if (es) { es.close(); es = null; }
    clearTimeout(esTimer); esTimer = null;
    sseFails++;
    sseFailedAt = Date.now();
    startPolling(0);
  }
  function startPolling(delay) {
    clearTimeout(pollTimer);
    polling = true;
    pollTimer = setTimeout(poll, delay);
  }
  function poll() {
    if (!polling) return;
    refreshView().then(function (r) {
      if (!polling || terminal()) return;
      if (r.ok) {
        if (canTrySSE()) { openSSE(); return; }
        setConn('polling');
        startPolling(POLL_MS);
      } else if (r.retryAfter) {
        setConn('reconnecting');
        S.retryUntil = Date.now() + r.retryAfter * 1000;
        startPolling(r.retryAfter * 1000);
      } else {
        setConn('reconnecting');
        startPolling(POLL_MS);
      }
    });
  }
  function parseJSON(s) { try { return JSON.parse(s); } catch (e) { return null; } }

  // ---- map ----
  var map = null, marker = null, arrow = null, accCircle = null, trailLine = null, markerEl = null, meMarker = null;
  var tileLoads = 0, tileErrors = 0;
  function initMap() {
    var L = window.L;
    if (!TILE_URL && window.console) console.error('flare viewer: the page sets no data-tile-url (FLARE_TILE_URL)');
    if (!L || !$('map') || !TILE_URL) { body.setAttribute('data-tiles', 'none'); $('mapnote').hidden = false; return; }
    // No view until the first fix: no tiles are fetched for a position we do not have.
    map = L.map('map', { worldCopyJump: true, zoomSnap: 0.5 });
    map.attributionControl.setPrefix(false);
    var tiles = L.tileLayer(TILE_URL, { attribution: TILE_ATTRIBUTION, maxZoom: 19, detectRetina: false });
    tiles.on('tileload', function () {
      tileLoads++;
      body.setAttribute('data-tiles', 'ok');
      $('mapnote').hidden = true;
    });
    tiles.on('tileerror', function () {
      tileErrors++;
      if (!tileLoads) { body.setAttribute('data-tiles', 'failed'); $('mapnote').hidden = false; }
    });
    tiles.addTo(map);
    L.control.scale({ imperial: false }).addTo(map);
    map.on('dragstart', function () { setFollow(false); });

    var NS = 'http://www.w3.org/2000/svg';
    var svg = doc.createElementNS(NS, 'svg');
    svg.setAttribute('width', '44'); svg.setAttribute('height', '44'); svg.setAttribute('viewBox', '0 0 44 44');
    svg.setAttribute('aria-hidden', 'true');
    var halo = doc.createElementNS(NS, 'circle');
    halo.setAttribute('cx', '22'); halo.setAttribute('cy', '22'); halo.setAttribute('r', '20'); halo.setAttribute('class', 'fl-halo');
    arrow = doc.createElementNS(NS, 'path');
    arrow.setAttribute('d', 'M22 0 L30 13 L22 10 L14 13 Z');
    arrow.setAttribute('class', 'fl-arrow');
    var dot = doc.createElementNS(NS, 'circle');
    dot.setAttribute('cx', '22'); dot.setAttribute('cy', '22'); dot.setAttribute('r', '9'); dot.setAttribute('class', 'fl-dot');
    svg.appendChild(halo); svg.appendChild(arrow); svg.appendChild(dot);
    markerEl = svg;
    marker = L.marker([0, 0], {
      icon: L.divIcon({ html: svg, className: 'fl-marker no-heading', iconSize: [44, 44], iconAnchor: [22, 22] }),
      keyboard: false, interactive: false,
    });
    accCircle = L.circle([0, 0], { radius: 1, interactive: false, weight: 1, color: '#0b57d0', fillColor: '#0b57d0', fillOpacity: 0.12 });
    trailLine = L.polyline([], { interactive: false, weight: 4, color: '#0b57d0', opacity: 0.55, lineJoin: 'round' });
  }
  function hasHeading(f) { return f.cog != null && (f.vel == null || f.vel >= 1); }
  function updateMap(newest) {
    if (!map || !S.last) return;
    var f = S.last, ll = [f.lat, f.lon];
    if (!S.firstShown) { recentre(false); S.firstShown = true; }
    else if (S.follow && newest) map.panTo(ll, { animate: true });
    if (!map.hasLayer(marker)) { trailLine.addTo(map); accCircle.addTo(map); marker.addTo(map); }
    marker.setLatLng(ll);
    accCircle.setLatLng(ll);
    accCircle.setRadius(f.acc != null && f.acc > 0 ? f.acc : 1);
    trailLine.setLatLngs(S.trail.map(function (p) { return [p.lat, p.lon]; }));
    var icon = marker.getElement();
    if (icon) icon.classList.toggle('no-heading', !hasHeading(f));
    if (hasHeading(f)) arrow.setAttribute('transform', 'rotate(' + f.cog + ' 22 22)');
  }
  function recentre(animate) {
    if (!map || !S.last) return;
    var ll = [S.last.lat, S.last.lon];
    if (S.last.acc && S.last.acc > 50) map.fitBounds(window.L.latLng(ll).toBounds(S.last.acc * 2.2), { maxZoom: 17, animate: animate });
    else map.setView(ll, S.firstShown && map.getZoom() > 16 ? map.getZoom() : 16, { animate: animate });
  }
  function setFollow(on) {
    S.follow = on;
    $('follow').setAttribute('aria-pressed', on ? 'true' : 'false');
    if (on) recentre(true);
  }

  // ---- rendering ----
  function setText(id, s) { var el = $(id); if (el && el.textContent !== s) el.textContent = s; }
  function renderStatus() {
    var k = S.state === 'ended' ? 'status_ended' : S.state === 'notfound' ? 'status_notfound'
      : S.conn === 'reconnecting' ? 'status_reconnecting'
      : (S.conn === 'live' || S.conn === 'polling') ? 'status_live' : 'status_connecting';
    setText('status', t(k));
  }
  function link(id, href) {
    var a = $(id);
    if (href) { a.href = href; a.removeAttribute('aria-disabled'); }
    else { a.removeAttribute('href'); a.setAttribute('aria-disabled', 'true'); }
  }
  function fact(id, text) {
    $('f-' + id).hidden = text == null;
    if (text != null) setText(id, text);
  }
  function render(newest) {
    renderAnswers();
    renderDistance();
    renderDispatch();
    // called again once the strings are in
    if (!i18nReady) return;
    body.setAttribute('data-state', S.state);
    var title = S.name ? t('title_named', { name: S.name }) : t('title');
    setText('title', title);
    doc.title = title;
    renderStatus();

    if (E2E) E2E.banner();


    var missed = S.checkinDue != null && S.reason !== 'withdrawn';
    $('checkin').hidden = !missed;
    if (missed) {
      var who = S.name || t('someone');
      setText('checkin-title', t('checkin_missed', { name: who, time: timeText(S.checkinDue) }));
      setText('checkin-last', S.last ? t('checkin_last', { time: timeText(S.last.tst * 1000), acc: S.last.acc != null ? accuracyText(S.last.acc) : '' })
        : t('checkin_no_position'));
    }
    // Under duress the same alert says so (an SOS share has no check-in to miss).
    if (S.duress && S.state === 'active') {
      $('checkin').hidden = false;
      setText('checkin-title', t('duress_title', { name: S.name || t('someone') }));
      setText('checkin-last', t('duress_advice'));
    }

    var ended = S.state === 'ended';
    $('ended').hidden = !ended;
    $('notfound').hidden = S.state !== 'notfound';
    if (ended) {
      // A personal link withdrawn by the sender: its own words, and no position (the server sends none).
      var withdrawn = S.reason === 'withdrawn';
      setText('ended-title', withdrawn ? t('withdrawn_title') : t('ended_title'));
      setText('ended-reason', S.reason === 'expired' ? t('ended_expired') : S.reason === 'stopped' ? t('ended_stopped')
        : withdrawn ? t('ended_withdrawn') : '');
      setText('ended-at', S.endedAt && !withdrawn ? t('ended_at', { time: timeText(S.endedAt) }) : '');
      $('ended-last').hidden = withdrawn || !S.last;
    }

    var f = S.last;
    if (f) {
      var c = coordText(f), q = f.lat.toFixed(5) + ',' + f.lon.toFixed(5);
      setText('coords', c);
      link('nav-apple', 'https://maps.apple.com/?daddr=' + q);
      link('nav-google', 'https://www.google.com/maps/dir/?api=1&destination=' + q);
      link('nav-geo', 'geo:' + q);
      $('copy').disabled = false;
      setText('accuracy', f.acc != null ? accuracyText(f.acc) : '—');
      fact('speed', f.vel != null ? t('speed_kmh', { n: nf({ maximumFractionDigits: 0 }).format(f.vel) }) : null);
      var charging = f.bs === 2 || (f.bs == null && S.tracker && S.tracker.charging);
      var pct = f.batt != null ? nf({ style: 'percent' }).format(f.batt / 100) : null;
      fact('battery', pct == null ? null : charging ? t('battery_charging', { n: pct }) : pct);
      var dirs = String(t('compass')).split(',');
      fact('heading', hasHeading(f) ? t('heading', { deg: Math.round(f.cog) % 360, dir: dirs[Math.round(f.cog / 45) % 8] || '' }) : null);
      fact('altitude', f.alt != null ? t('altitude_m', { n: nf({ maximumFractionDigits: 0 }).format(f.alt) }) : null);
      updateMap(newest);
      if (newest && S.state === 'active') {
        var now = Date.now();
        if (!S.announced) { S.announced = true; S.lastAnnounce = now; announce(t('announce_first', { ago: duration(ageSeconds()), acc: f.acc != null ? accuracyText(f.acc) : '—' }), false); }
        else if (now - S.lastAnnounce >= ANNOUNCE_EVERY_MS) { S.lastAnnounce = now; announce(t('announce_update'), false); }
      }
    } else {
      setText('coords', '—');
      ['nav-apple', 'nav-google', 'nav-geo'].forEach(function (id) { link(id, null); });
      $('copy').disabled = true;
    }
    tick();
  }
  function ageSeconds() { return S.last ? Math.max(0, (serverNow() - S.last.tst * 1000) / 1000) : 0; }

  // Runs every second: freshness, stale warning, countdown.
  function tick() {
    var f = S.last, fresh = 'none';
    if (!i18nReady) return;
    if (S.state === 'notfound') { setText('updated', ''); setText('detail', ''); setText('countdown', ''); return; }
    if (S.state === 'loading') {
      setText('updated', '\u200b');
      setText('detail', S.conn !== 'reconnecting' ? '\u200b' : S.retryUntil > Date.now()
        ? t('rate_limited', { s: Math.ceil((S.retryUntil - Date.now()) / 1000) }) : t('reconnecting_detail'));
    } else if (f) {
      var age = ageSeconds();
      setText('updated', age < 5 ? t('updated_just_now') : t('updated_ago', { ago: duration(age, age < 120) }));
      var tr = S.state === 'active' ? S.tracker : null;
      // Stale by the position's age, or by the server's word that nothing arrived (a phone whose clock is behind
      // sends fresh positions that look old; one whose reports stopped sends none). Offline is said on its own line.
      fresh = S.state === 'active' && (age > STALE_AFTER_S || (tr && tr.state === 'stale')) ? 'stale' : 'fresh';
      var detail = t('fix_time', { time: timeText(f.tst * 1000) });
      if (f.acc != null) detail += ' · ' + accuracyText(f.acc);
      if (fresh === 'stale') detail = age > STALE_AFTER_S ? t('tracker_stale', { ago: duration(age) }) : t('stale_warning');
      else if (S.conn === 'reconnecting') detail = S.retryUntil > Date.now()
        ? t('rate_limited', { s: Math.ceil((S.retryUntil - Date.now()) / 1000) }) : t('reconnecting_detail');
      setText('detail', detail);
    } else if (S.state === 'ended' && S.reason === 'withdrawn') {
      // Nothing to wait for: the ended box above says what happened.
      setText('updated', '');
      setText('detail', '');
    } else {
      setText('updated', t('waiting_first_fix'));
      setText('detail', S.state === 'ended' ? '' : t('waiting_detail'));
    }
    renderTracker(fresh);
    if (fresh !== S.fresh) {
      if (fresh === 'stale') announce(t('announce_stale', { ago: duration(ageSeconds()) }), true);
      S.fresh = fresh;
      body.setAttribute('data-fresh', fresh);
    }

    var cd = '';
    if (S.state === 'active' && S.expiresAt) {
      var left = (S.expiresAt - serverNow()) / 1000;
      if (left > 0) cd = t('ends_in', { d: duration(left, true) });
      else {
        cd = t('ending_now');
        // The end event may have been missed (or is late): ask, at most every 5 s.
        if (S.state === 'active' && Date.now() - (S.endCheck || 0) > 5000) { S.endCheck = Date.now(); refreshView(); }
      }
    }
    setText('countdown', cd);
  }

  // The phone's own state under the freshness line: offline (with when), how it reports, a low battery, and
  // "locate now" while it is stale or offline. Nothing at all while it is live and its battery is fine.
  function renderTracker(fresh) {
    var tr = S.state === 'active' ? S.tracker : null, note = '';
    if (tr && tr.state === 'offline') note = t('tracker_offline', { time: timeText(tr.since) });
    else if (fresh === 'stale' && tr && tr.transport === 'http') note = t('tracker_http_note');
    $('tracker').hidden = !note;
    setText('tracker', note);
    var low = tr && tr.batteryLow && tr.battery != null;
    $('battery-note').hidden = !low;
    setText('battery-note', low ? t('battery_low', { n: nf({ style: 'percent' }).format(tr.battery / 100) }) : '');
    var offer = S.state === 'active' && !!API && (fresh === 'stale' || (tr && tr.state !== 'live'));
    $('locate').hidden = !offer;
    var said = S.state === 'active' ? locateText() : '';
    $('locate-status').hidden = !said;
    setText('locate-status', said);
  }

  // ---- announcements, copy ----
  function announce(msg, urgent) {
    var el = $(urgent ? 'alert' : 'announce');
    if (!el || !msg) return;
    el.textContent = '';
    setTimeout(function () { el.textContent = msg; }, 60);
  }
  function copyCoords() {
    if (!S.last) return;
    var text = coordText(S.last), btn = $('copy');
    var done = function (ok) {
      btn.textContent = ok ? t('copied') : t('copy_failed');
      announce(btn.textContent, false);
      setTimeout(function () { btn.textContent = t('copy'); }, 2500);
    };
    var legacy = function () {
      var ta = doc.createElement('textarea');
      ta.value = text; ta.className = 'copy-buffer'; ta.setAttribute('readonly', '');
      body.appendChild(ta); ta.select();
      var ok = false;
      try { ok = doc.execCommand('copy'); } catch (e) { ok = false; }
      body.removeChild(ta);
      done(ok);
    };
    if (navigator.clipboard && navigator.clipboard.writeText) navigator.clipboard.writeText(text).then(function () { done(true); }, legacy);
    else legacy();
  }

  // ---- start ----
  function startNotFoundPage() {
    loadLang(lang).then(function () { doc.title = t('notfound_title'); });
  }
  function start() {
    if (select) {
      select.value = lang;
      select.addEventListener('change', function () {
        var code = select.value;
        loadLang(code).then(function () {
          render(false);
          var u = new URL(location.href);
          u.searchParams.set('lang', code);
          history.replaceState(null, '', u.pathname + u.search + u.hash);
        });
      });
    }
    $('copy').addEventListener('click', copyCoords);
    $('locate').addEventListener('click', locate);
    $('distance').addEventListener('click', toggleDistance);
    Array.prototype.forEach.call(doc.querySelectorAll('.answer-buttons button'), function (b) {
      b.addEventListener('click', function () { sendAnswer(b.getAttribute('data-kind')); });
    });
    try { $('answer-name').value = localStorage.getItem('flare-answer-name') || ''; } catch (e) {}
    $('follow').addEventListener('click', function () { setFollow(!S.follow); });
    var ready = loadLang(lang);
    try { initMap(); } catch (e) { map = null; body.setAttribute('data-tiles', 'none'); $('mapnote').hidden = false; }
    if (!API) { ready.then(setNotFound); return; }
    setInterval(tick, 1000);
    ready.then(function () { render(false); });
    refreshView().then(function (r) {
      return ready.then(function () {
        render(false);
        if (terminal()) return;
        if (r.ok && canTrySSE()) openSSE();
        else if (r.ok) { setConn('polling'); startPolling(POLL_MS); }
        else { setConn('reconnecting'); S.retryUntil = r.retryAfter ? Date.now() + r.retryAfter * 1000 : 0; startPolling(r.retryAfter ? r.retryAfter * 1000 : POLL_MS); }
      });
    });

    window.addEventListener('offline', function () { if (!terminal()) setConn('reconnecting'); });
    window.addEventListener('online', function () {
      if (terminal()) return;
      sseFails = 0; sseFailedAt = 0;      // the failures were the network's, not SSE's
      // the stream survived
      if (es && es.readyState === 1) { setConn('live'); refreshView(); }
      else if (!es || es.readyState === 2) startPolling(0);
    });
    doc.addEventListener('visibilitychange', function () {
      if (doc.visibilityState === 'visible' && !terminal() && S.state !== 'loading') refreshView();
    });
  }

  if (body.getAttribute('data-page') === 'notfound') startNotFoundPage();
  else start();
})();
