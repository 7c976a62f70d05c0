// Flare viewer: a track to hand over. "Download track (GPX)" (the whole route so far, which mountain rescue or the
// police load into CalTopo, Garmin BaseCamp or any GPS tool) and "Copy live feed for rescue tools" (a KML link Google
// Earth and CalTopo/SARTopo refresh by themselves). Loaded after the page: nothing here is needed to see where the
// person is. For an end-to-end encrypted share the server cannot write the GPX: the page writes it from the positions
// it decrypted (the feed is not offered).
(function () {
  'use strict';
  var STRINGS = {
    en: {
      download: 'Download track (GPX)',
      download_note: 'The whole route so far, as a file for mountain rescue or the police (CalTopo, Garmin BaseCamp, any GPS tool).',
      feed: 'Copy live feed for rescue tools',
      feed_note: 'A link Google Earth and CalTopo/SARTopo refresh by themselves. Like this page\'s link, it shows where the person is: give it only to rescuers.',
      copied: 'Copied: {url}',
      copy_failed: 'Copy this link: {url}',
      failed: 'The track could not be downloaded. Try again in a moment.',
      none: 'No position to download yet.'
    },
    'zh-CN': {
      download: '下载轨迹（GPX）',
      download_note: '目前为止的完整路线文件，可交给山地救援或警方（CalTopo、Garmin BaseCamp 或任何 GPS 工具）。',
      feed: '复制实时轨迹链接（供救援工具使用）',
      feed_note: 'Google Earth 和 CalTopo/SARTopo 会自动刷新此链接。它和本页链接一样能显示其位置：只交给救援人员。',
      copied: '已复制：{url}',
      copy_failed: '请复制此链接：{url}',
      failed: '无法下载轨迹，请稍后重试。',
      none: '还没有可下载的位置。'
    }
  };
  var match = location.pathname.match(/^\/s\/([A-Za-z0-9_-]{16,64})$/);
  if (!match) return;
  var token = match[1];
  function lang() {
    var code = document.documentElement.lang || 'en';
    return STRINGS[code] ? code : /^zh/i.test(code) ? 'zh-CN' : 'en';
  }
  function t(key, vars) {
    var text = STRINGS[lang()][key] || STRINGS.en[key];
    Object.keys(vars || {}).forEach(function (k) { text = text.split('{' + k + '}').join(vars[k]); });
    return text;
  }

  // What an end-to-end share's page opened, for its GPX.
  var opened = [];
  document.addEventListener('flare-e2e-fix', function (e) {
    var f = e.detail;
    if (f && typeof f.lat === 'number' && typeof f.lon === 'number' && typeof f.tst === 'number' && opened.length < 200000) opened.push(f);
  });

  var box = document.createElement('section');
  box.className = 'push';
  box.id = 'track';
  function add(tag, className, id) {
    var element = box.appendChild(document.createElement(tag));
    element.className = className;
    if (id) element.id = id;
    if (tag === 'button') element.type = 'button';
    return element;
  }
  var download = add('button', 'btn', 'track-download');
  var downloadNote = add('p', 'locate-status');
  var feed = add('button', 'btn', 'track-feed');
  var feedNote = add('p', 'locate-status');
  var status = add('p', 'locate-status', 'track-status');
  status.setAttribute('aria-live', 'polite');
  status.hidden = true;
  var anchor = document.getElementById('answers-box');
  if (anchor && anchor.parentNode) anchor.parentNode.insertBefore(box, anchor);

  var endToEnd = false;
  function render() {
    endToEnd = endToEnd || !!document.getElementById('e2e');
    download.textContent = t('download');
    downloadNote.textContent = t('download_note');
    feed.textContent = t('feed');
    feedNote.textContent = t('feed_note');
    feed.hidden = feedNote.hidden = endToEnd;
    var state = document.body.getAttribute('data-state');
    box.hidden = state === 'notfound' || state === 'loading';
  }
  function say(text) {
    status.textContent = text;
    status.hidden = !text;
  }
  function save(blob, name) {
    var url = URL.createObjectURL(blob);
    var a = document.createElement('a');
    a.href = url;
    a.download = name;
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(function () { URL.revokeObjectURL(url); }, 60000);
  }
  function xml(text) {
    return String(text).replace(/[<>&"]/g, function (c) { return { '<': '&lt;', '>': '&gt;', '&': '&amp;', '"': '&quot;' }[c]; });
  }
  // GPX 1.1 from the positions this page decrypted, oldest first.
  function localGPX() {
    var seen = {}, fixes = opened.filter(function (f) {
      var k = f.tst + ':' + f.lat + ':' + f.lon;
      if (seen[k]) return false;
      seen[k] = true;
      return true;
    }).sort(function (a, b) { return a.tst - b.tst; });
    var name = xml(document.title || 'Flare track');
    var out = ['<?xml version="1.0" encoding="UTF-8"?>\n<gpx version="1.1" creator="Flare (this page)" xmlns="http://www.topografix.com/GPX/1/1">\n',
      '<metadata><name>' + name + '</name></metadata>\n<trk><name>' + name + '</name><trkseg>\n'];
    fixes.forEach(function (f) {
      out.push('<trkpt lat="' + f.lat + '" lon="' + f.lon + '">' + (typeof f.alt === 'number' ? '<ele>' + f.alt + '</ele>' : '') +
        '<time>' + new Date(f.tst * 1000).toISOString().replace('.000Z', 'Z') + '</time></trkpt>\n');
    });
    out.push('</trkseg></trk>\n</gpx>\n');
    return { count: fixes.length, blob: new Blob(out, { type: 'application/gpx+xml' }) };
  }

  download.addEventListener('click', function () {
    download.disabled = true;
    say('');
    fetch('/api/v1/view/' + token + '/track.gpx', { cache: 'no-store' }).then(function (res) {
      if (res.status === 409) {
        endToEnd = true;
        render();
        var local = localGPX();
        if (!local.count) return say(t('none'));
        return save(local.blob, 'flare-track.gpx');
      }
      if (!res.ok) throw res.status;
      return res.blob().then(function (blob) { save(blob, 'flare-track.gpx'); });
    }).catch(function () { say(t('failed')); }).then(function () { download.disabled = false; });
  });
  feed.addEventListener('click', function () {
    var url = location.origin + '/s/' + token + '/feed.kml';
    var copy = navigator.clipboard && navigator.clipboard.writeText ? navigator.clipboard.writeText(url) : Promise.reject();
    copy.then(function () { say(t('copied', { url: url })); }, function () { say(t('copy_failed', { url: url })); });
  });
  render();
  new MutationObserver(render).observe(document.body, { attributes: true, attributeFilter: ['data-state'] });
  new MutationObserver(render).observe(document.documentElement, { attributes: true, attributeFilter: ['lang'] });
})();
