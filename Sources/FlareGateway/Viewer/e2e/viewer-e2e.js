// The viewer's part for end-to-end encrypted shares, loaded by viewer.js only for one (a plain share's page never
// fetches it). The key is the link's fragment (#k=…), which a browser never sends to a server. TweetNaCl (flared serves
// Debian's node-tweetnacl) opens each message; one that does not open is counted, never shown.
window.flareE2E = function (page) {
  'use strict';
  var doc = document;
  // `held`: what came before the key was typed in (a reload of the bare link), opened once it is.
  var S = { key: keyOf(takeFragmentKey()), opened: 0, failed: 0, lib: null, loading: false, missing: false, waiting: [], seen: {}, held: [] };
  var HELD_MAX = 2000;
  var strings = {};
  // Its banner and styles, above everything else the page says.
  var style = doc.createElement('link');
  style.rel = 'stylesheet';
  style.href = '/viewer/e2e/viewer-e2e.css';
  doc.head.appendChild(style);
  var section = doc.createElement('section');
  section.id = 'e2e';
  section.className = 'e2e';
  section.setAttribute('role', 'status');
  section.appendChild(doc.createElement('p')).id = 'e2e-text';
  // What the server cannot do for such a share, one tap away: on a phone the map and the time of the last position
  // come first.
  var more = section.appendChild(doc.createElement('details'));
  more.appendChild(doc.createElement('summary')).id = 'e2e-more';
  var off = more.appendChild(doc.createElement('p'));
  off.id = 'e2e-off';
  off.className = 'off';
  // A link without its key (a reload once the key has left the address bar): the page asks for it, and keeps it only
  // while it is open.
  var form = section.appendChild(doc.createElement('form'));
  form.id = 'e2e-ask';
  form.hidden = true;
  form.setAttribute('autocomplete', 'off');
  var label = form.appendChild(doc.createElement('label'));
  label.id = 'e2e-ask-label';
  label.htmlFor = 'e2e-key';
  var input = form.appendChild(doc.createElement('input'));
  input.id = 'e2e-key';
  input.type = 'password';
  input.setAttribute('autocomplete', 'off');
  input.setAttribute('autocapitalize', 'off');
  input.spellcheck = false;
  var button = form.appendChild(doc.createElement('button'));
  button.id = 'e2e-open';
  button.type = 'submit';
  form.addEventListener('submit', function (e) {
    e.preventDefault();
    var k = keyOf(input.value.trim());
    if (!k) return;
    input.value = '';
    S.key = k;
    S.failed = 0;
    var held = S.held;
    S.held = [];
    held.forEach(function (item) { if (item && typeof item.data === 'string') delete S.seen[item.data]; });
    add(held);
  });
  page.$('main').insertBefore(section, page.$('main').firstChild);

  // The passphrase in the link's fragment, taken out of the address bar at once (history.replaceState): it stays in
  // this page's memory only, so it is not in the browser's history, a bookmark, a screenshot of the address bar or a
  // link copied from it. Nil without one.
  function takeFragmentKey() {
    var m = /(?:^#|&)k=([^&]*)/.exec(location.hash), pass = null;
    if (!m) return null;
    try { pass = decodeURIComponent(m[1]); } catch (e) { pass = null; }
    var rest = location.hash.slice(1).split('&').filter(function (p) { return p && p.slice(0, 2) !== 'k='; }).join('&');
    try { history.replaceState(history.state, '', location.pathname + location.search + (rest ? '#' + rest : '')); } catch (e) {}
    return pass;
  }
  // The OwnTracks apps' key: the passphrase's UTF-8 bytes, whole characters only, zero-padded to 32.
  function keyOf(pass) {
    if (!pass) return null;
    var enc = new TextEncoder(), k = new Uint8Array(32), n = 0;
    for (var ch of pass) { var b = enc.encode(ch); if (n + b.length > 32) break; k.set(b, n); n += b.length; }
    return k;
  }
  function withNacl(fn) {
    if (S.lib) { fn(); return; }
    S.waiting.push(fn);
    if (S.loading) return;
    S.loading = true;
    var s = doc.createElement('script');
    s.src = '/vendor/tweetnacl/nacl-fast.min.js';
    s.onload = function () {
      S.lib = window.nacl && window.nacl.secretbox ? window.nacl : null;
      if (!S.lib) { s.onerror(); return; }
      var w = S.waiting; S.waiting = [];
      w.forEach(function (f) { f(); });
    };
    s.onerror = function () { S.missing = true; page.render(false); };
    doc.head.appendChild(s);
  }
  function open(item) {
    if (!item || typeof item.data !== 'string' || S.seen[item.data]) return null;
    S.seen[item.data] = 1;
    try {
      var bin = atob(item.data), box = new Uint8Array(bin.length);
      for (var i = 0; i < bin.length; i++) box[i] = bin.charCodeAt(i);
      var plain = box.length > 40 && S.lib.secretbox.open(box.subarray(24), box.subarray(0, 24), S.key);
      if (!plain) throw 0;
      var j = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(plain));
      S.opened++;
      return j && (j._type === undefined || j._type === 'location') ? j : null;  // a transition, say, is no position
    } catch (e) {
      // Kept for a key typed in later (this one may be wrong).
      S.held = S.held.concat([item]).slice(-HELD_MAX);
      S.failed++;
      return null;
    }
  }
  function add(list) {
    if (!S.key) {
      S.held = S.held.concat(list).slice(-HELD_MAX);
      page.render(false);
      return;
    }
    withNacl(function () {
      var newest = false;
      list.forEach(function (item) {
        var f = open(item);
        if (!f) return;
        // The phone's answer to "locate now" (t:"r"): the server cannot see it, so the page tells its notice, by
        // when the message arrived.
        if (f.t === 'r' && typeof item.tst === 'number') page.replied(item.tst * 1000);
        newest = page.addFix(f) || newest;
        // For the page's "Download track": the server cannot write this share's GPX, the page can from what it opened.
        doc.dispatchEvent(new CustomEvent('flare-e2e-fix', { detail: f }));
      });
      page.render(newest);
    });
  }
  function t(k, vars) {
    var s = (strings[page.lang()] || strings.en || {})[k] || '';
    return vars ? s.replace(/\{(\w+)\}/g, function (m, v) { return vars[v] != null ? vars[v] : m; }) : s;
  }
  function load(code) {
    if (strings[code]) return;
    strings[code] = {};
    fetch('/viewer/e2e/' + encodeURIComponent(code) + '.json', { credentials: 'same-origin' })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (j) { if (j) { strings[code] = j; page.render(false); } }, function () {});
  }
  // Said plainly, and what is wrong when the positions cannot be opened.
  function banner() {
    load('en');
    load(page.lang());
    var state = !S.key ? 'no-key' : S.missing ? 'no-library' : S.failed && !S.opened ? 'wrong-key' : 'open';
    page.body.setAttribute('data-e2e', state);
    page.$('e2e').hidden = false;
    page.setText('e2e-text', state === 'no-key' ? t('no_key') : state === 'no-library' ? t('no_library') : state === 'wrong-key' ? t('wrong_key')
      : t('note') + (S.failed ? ' ' + t(S.failed === 1 ? 'skipped_one' : 'skipped', { count: S.failed }) : ''));
    page.$('e2e-ask').hidden = state !== 'no-key' && state !== 'wrong-key';
    page.setText('e2e-ask-label', t('ask_key'));
    page.setText('e2e-open', t('open'));
    page.setText('e2e-more', t('more'));
    page.setText('e2e-off', t('off'));
  }
  return { add: add, banner: banner };
};
