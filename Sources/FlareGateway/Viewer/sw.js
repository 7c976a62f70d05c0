// Flare's service worker for a link's page (scope /s/<token>) and a contact's alerts page (scope /alerts). It shows
// the Web Push notifications Flare sends: the browser has decrypted them (RFC 8291) into a small JSON object with the
// words to show ({type, title, body, tag, urgent, url?, at}), never a position (a lock screen is seen by others). A
// tap opens the person's link: the one in the message (a contact's alerts), else the link this page was opened at.
// It caches nothing: a link's page shows live data or says it cannot.
self.addEventListener('install', function () { self.skipWaiting(); });
self.addEventListener('activate', function (event) { event.waitUntil(self.clients.claim()); });
// Present so that the page can be added to the home screen; every request goes to the network as the page made it.
self.addEventListener('fetch', function () {});

self.addEventListener('push', function (event) {
  var data = {};
  try { data = event.data ? event.data.json() : {}; } catch (e) { data = {}; }
  var url = data.url || self.registration.scope;
  event.waitUntil(self.registration.showNotification(data.title || 'Flare', {
    body: data.body || '',
    tag: data.tag || 'flare',
    // A newer state of the same share replaces the older one, and still rings.
    renotify: true,
    // An alarm stays until it is seen.
    requireInteraction: !!data.urgent,
    icon: '/viewer/icon.svg',
    timestamp: data.at ? Date.parse(data.at) : Date.now(),
    data: { url: url, type: data.type || '' }
  }));
});

self.addEventListener('notificationclick', function (event) {
  event.notification.close();
  var url = (event.notification.data && event.notification.data.url) || self.registration.scope;
  event.waitUntil(self.clients.matchAll({ type: 'window', includeUncontrolled: true }).then(function (windows) {
    for (var i = 0; i < windows.length; i++) {
      if (windows[i].url.split('#')[0] === url.split('#')[0] && 'focus' in windows[i]) return windows[i].focus();
    }
    return self.clients.openWindow(url);
  }));
});
