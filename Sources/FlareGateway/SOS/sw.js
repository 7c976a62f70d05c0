// Flare SOS page's service worker (served at /sos-sw.js, scope /sos): the page's shell offline, so the home-screen
// app opens, shows its button and offers the SMS fallback without a network. Network first (the server's copy is
// always the newest; the cache is the copy of the last one seen), a cached copy when the network fails or is slow.
// The API is never cached nor even touched here: its requests go to the network as the page made them.
var CACHE = 'flare-sos-1';
var SHELL = ['/sos', '/sos/sos.js', '/sos/sos.css', '/sos/i18n/en.json', '/sos/i18n/zh-CN.json', '/sos/manifest.webmanifest', '/sos/icon.svg'];
// a network slower than this serves the cached copy (and the network's answer still refreshes the cache)
var NETWORK_WAIT_MS = 4000;

self.addEventListener('install', function (event) {
  event.waitUntil(caches.open(CACHE).then(function (cache) {
    return Promise.all(SHELL.map(function (url) {
      return fetch(url, { cache: 'no-cache', credentials: 'same-origin' }).then(function (res) {
        if (res.ok) return cache.put(url, res);
      }).catch(function () {});
    }));
  }).then(function () { return self.skipWaiting(); }));
});

self.addEventListener('activate', function (event) {
  event.waitUntil(caches.keys().then(function (keys) {
    return Promise.all(keys.filter(function (k) { return k !== CACHE && k.indexOf('flare-sos') === 0; })
      .map(function (k) { return caches.delete(k); }));
  }).then(function () { return self.clients.claim(); }));
});

self.addEventListener('fetch', function (event) {
  var req = event.request;
  if (req.method !== 'GET') return;
  var url = new URL(req.url);
  if (url.origin !== self.location.origin || url.pathname.indexOf('/api/') === 0) return;
  // The page under any ?lang= is one entry: the page picks its language itself.
  var key = url.pathname === '/sos' || url.pathname === '/sos/' ? '/sos' : SHELL.indexOf(url.pathname) >= 0 ? url.pathname : null;
  if (!key) return;
  var fromNetwork = fetch(req).then(function (res) {
    if (res.ok) {
      var copy = res.clone();
      event.waitUntil(caches.open(CACHE).then(function (cache) { return cache.put(key, copy); }));
    }
    return res;
  });
  var cached = function () { return caches.match(key, { ignoreSearch: true }); };
  event.respondWith(new Promise(function (resolve) {
    var done = false;
    var settle = function (res) { if (!done && res) { done = true; resolve(res); } };
    var timer = setTimeout(function () { cached().then(settle); }, NETWORK_WAIT_MS);
    fromNetwork.then(function (res) {
      clearTimeout(timer);
      // A server error is answered from the cache when there is a copy; else as it is.
      if (res.ok) settle(res);
      else cached().then(function (hit) { settle(hit || res); });
    }, function () {
      clearTimeout(timer);
      cached().then(function (hit) { settle(hit || Response.error()); });
    });
  }));
});
