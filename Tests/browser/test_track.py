"""A track to hand over, on the viewer page: "Download track (GPX)" saves the server's file of every stored position (an
end-to-end share's, written by the page from what it decrypted), and "Copy live feed for rescue tools" gives the
feed's URL. Headless Chromium saves downloads into a directory the test names (`Browser.setDownloadBehavior`)."""
import os
import tempfile

from selenium.webdriver.common.by import By
from test_viewer import body_attr, shot, text, wait_coords, wait_for

from conftest import BASE_URL


def downloads(d):
    folder = tempfile.mkdtemp(prefix='flare-downloads-')
    d.execute_cdp_cmd('Browser.setDownloadBehavior', {'behavior': 'allow', 'downloadPath': folder})
    return folder


def saved(folder, name='flare-track.gpx'):
    path = os.path.join(folder, name)
    return open(path).read() if os.path.exists(path) else None


def test_the_page_downloads_every_position_as_gpx_and_gives_the_live_feed(flare, viewer):
    share = flare.create(name='Anna')
    sent = [flare.publish(share, flare.fix()) for _ in range(3)]
    d = viewer()
    folder = downloads(d)
    d.get(share.url())
    wait_coords(d, sent[-1])
    wait_for(d, lambda drv: drv.find_element(By.ID, 'track-download').is_displayed(), 'the download button')
    assert text(d, '#track-download') == 'Download track (GPX)' and text(d, '#track-feed') == 'Copy live feed for rescue tools'
    d.execute_script("document.getElementById('track').scrollIntoView({block: 'center'})")
    shot(d, 'viewer-track.png')
    d.find_element(By.ID, 'track-download').click()
    wait_for(d, lambda drv: saved(folder) and saved(folder).rstrip().endswith('</gpx>'), 'the GPX saved')
    gpx = saved(folder)
    assert gpx.count('<trkpt ') == 3 and all(f'lat="{f["lat"]}" lon="{f["lon"]}"' in gpx for f in sent), gpx[:400]
    d.find_element(By.ID, 'track-feed').click()
    feed = f'{BASE_URL}{share.path}/feed.kml'
    wait_for(d, lambda drv: text(drv, '#track-status') in (f'Copied: {feed}', f'Copy this link: {feed}'), 'the feed given')


def test_an_end_to_end_shares_page_writes_its_gpx_from_what_it_decrypted(flare, viewer):
    share, passphrase = flare.create_e2e()
    sent = [flare.publish_sealed(share, flare.fix(), passphrase) for _ in range(2)]
    d = viewer()
    folder = downloads(d)
    d.get(share.url() + '#k=' + passphrase)
    wait_coords(d, sent[-1])
    wait_for(d, lambda drv: body_attr(drv, 'e2e') == 'open', 'the page to open the positions')
    assert not d.find_element(By.ID, 'track-feed').is_displayed(), 'no feed the server cannot write'
    d.find_element(By.ID, 'track-download').click()
    wait_for(d, lambda drv: saved(folder) and saved(folder).rstrip().endswith('</gpx>'), 'the GPX written by the page')
    gpx = saved(folder)
    assert 'creator="Flare (this page)"' in gpx and all(f'lat="{f["lat"]}" lon="{f["lon"]}"' in gpx for f in sent), gpx[:400]
