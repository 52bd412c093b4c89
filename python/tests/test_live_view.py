"""The live view page in headless Chromium (Debian's chromium + chromium-driver, driven by
Selenium; nothing is downloaded): it loads from the real ``remora daq serve`` at the address it
prints (with its token), its counters move while a run goes on, the image and the profile
render, and start and stop work from its buttons; without the token it shows the refusal. A
screenshot is saved to python/tests/artifacts/live_view.png.

``REMORA_LIVE_VIEW_MOCK=1`` runs it against mock_daq_server.py instead (for work on the page
without a Rust build); by default it needs the real binary and skips without it."""
import contextlib
import os
import pathlib
import queue
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
TARGET = pathlib.Path(os.environ.get("CARGO_TARGET_DIR") or ROOT / "target")
EXE = pathlib.Path(os.environ.get("REMORA_EXE") or TARGET / "release" / "remora")
MOCK = os.environ.get("REMORA_LIVE_VIEW_MOCK", "") not in ("", "0")
ARTIFACTS = pathlib.Path(__file__).resolve().parent / "artifacts"
STARTUP_S = 120
TOKEN = "s3cret-token"

CONFIG = """
[detector]
modules = 2
[source]
distinct = 4
[acquisition]
frames = 400
rate_hz = 40
bunch = 4
deadline_ms = 10000
[pipeline]
bins = 200
"""

# Whether an element's canvas (or an image drawn into one) holds more than one colour.
NOT_BLANK = """
const el = arguments[0];
let cv = el;
if (el.tagName === "IMG") {
  if (!el.complete || !el.naturalWidth) return false;
  cv = document.createElement("canvas");
  cv.width = el.naturalWidth; cv.height = el.naturalHeight;
  cv.getContext("2d").drawImage(el, 0, 0);
}
const d = cv.getContext("2d").getImageData(0, 0, cv.width, cv.height).data;
for (let i = 4; i < d.length; i += 4) {
  if (d[i] !== d[0] || d[i + 1] !== d[1] || d[i + 2] !== d[2] || d[i + 3] !== d[3]) return true;
}
return false;
"""


def browser_parts():
    """Selenium's webdriver module, Chromium and its driver, or a skip saying what is missing."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="no selenium (pip install selenium)")
    exe = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)
    driver = shutil.which("chromedriver")
    if not exe or not driver:
        pytest.skip("no chromium and chromedriver (Debian: chromium chromium-driver)")
    return webdriver, exe, driver


def stop(p):
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


@contextlib.contextmanager
def launch(tmp_path, *extra):
    """Runs the service (or the mock) on a free port; yields its base URL."""
    browser_parts()  # skip before starting anything
    cfg = tmp_path / "live.toml"
    cfg.write_text(CONFIG)
    if MOCK:
        cmd = [sys.executable, str(pathlib.Path(__file__).with_name("mock_daq_server.py"))]
    else:
        if not EXE.exists():
            pytest.skip(f"{EXE} is not built (make build)")
        cmd = [str(EXE), "daq", "serve"]
    cmd += ["--listen", "127.0.0.1:0", *extra, str(cfg)]
    log = tmp_path / "server.stderr"
    with open(log, "w") as err:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, cwd=tmp_path)
    try:
        # The first stdout line says where it listens; the rest is read (and dropped) so a chatty
        # server never blocks on a full pipe.
        lines = queue.Queue()

        def drain():
            for line in p.stdout:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=drain, daemon=True).start()
        try:
            line = lines.get(timeout=STARTUP_S)
        except queue.Empty:
            line = None
        assert line and line.startswith("serving on "), (
            f"no 'serving on' line within {STARTUP_S} s: {line!r}; stderr: {log.read_text()[-4000:]}")
        # The page's address as printed: http://ADDR/?token=T (or without a token).
        yield line.split()[-1]
    finally:
        stop(p)


def base_of(url):
    """http://ADDR of a printed address."""
    p = urllib.parse.urlsplit(url)
    return f"{p.scheme}://{p.netloc}"


@pytest.fixture
def server(tmp_path):
    with launch(tmp_path) as url:
        yield url


@pytest.fixture
def server_with_token(tmp_path):
    with launch(tmp_path, "--token", TOKEN) as url:
        yield url


@pytest.fixture
def browser():
    webdriver, exe, driver = browser_parts()
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = exe
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--window-size=1400,1100"):
        opts.add_argument(a)
    d = webdriver.Chrome(service=Service(driver), options=opts)
    yield d
    d.quit()


def wait_for(what, check, timeout=60):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = check()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_the_page_follows_a_run_and_drives_it(server, browser):
    from selenium.webdriver.common.by import By

    d = browser
    d.get(server)
    text = lambda i: d.find_element(By.ID, i).text  # noqa: E731
    wait_for("state configured", lambda: text("state").lower() == "configured")
    assert d.find_element(By.ID, "start").is_enabled()
    assert not d.find_element(By.ID, "stop").is_enabled()

    d.find_element(By.ID, "start").click()
    wait_for("state running", lambda: text("state").lower() == "running")
    updates = lambda: int(d.find_element(By.TAG_NAME, "body").get_attribute("data-updates") or 0)  # noqa: E731
    wait_for("frames done", lambda: text("frames-done") not in ("–", "0"))
    first, u1 = int(text("frames-done")), updates()
    time.sleep(1.6)
    second, u2 = int(text("frames-done")), updates()
    assert second > first, (first, second)
    assert u2 > u1, (u1, u2)
    wait_for("a rate", lambda: text("fps") not in ("–", "0.0"))

    img = d.find_element(By.ID, "image")
    # NOT_BLANK checks naturalWidth too (the page swaps in each new frame, so not separately).
    wait_for("a non-blank image", lambda: d.execute_script(NOT_BLANK, img))
    wait_for("a non-blank profile", lambda: d.execute_script(NOT_BLANK, d.find_element(By.ID, "profile")))
    assert d.execute_script(NOT_BLANK, d.find_element(By.ID, "rate-chart"))
    assert len(d.find_elements(By.CSS_SELECTOR, "#modules span")) == 2
    assert text("kept-ratio").endswith("%")

    ARTIFACTS.mkdir(exist_ok=True)
    d.save_screenshot(str(ARTIFACTS / "live_view.png"))

    assert text("state").lower() == "running", "the run ended before the test could stop it"
    d.find_element(By.ID, "stop").click()
    wait_for("state configured again", lambda: text("state").lower() == "configured", timeout=30)
    assert "stopped" in text("message"), text("message")
    assert d.find_element(By.ID, "start").is_enabled()


def test_the_page_sends_the_token_from_its_address(server_with_token, browser):
    from selenium.webdriver.common.by import By

    d = browser
    text = lambda i: d.find_element(By.ID, i).text  # noqa: E731
    base = base_of(server_with_token)
    # Without the token the page loads, but the service tells it nothing.
    d.get(base + "/")
    wait_for("the refusal shown", lambda: text("message").startswith("401"), timeout=15)
    assert text("state").lower() != "configured"

    # The token typed in after '#', and the address as printed ('?token='): both work.
    for url in (base + "/#token=" + TOKEN, server_with_token):
        d.get(url)
        wait_for("state configured", lambda: text("state").lower() == "configured")
    d.find_element(By.ID, "start").click()
    wait_for("state running", lambda: text("state").lower() == "running", timeout=30)
    img = d.find_element(By.ID, "image")
    wait_for("a non-blank image through ?token=", lambda: d.execute_script(NOT_BLANK, img))
    d.find_element(By.ID, "stop").click()
    wait_for("state configured again", lambda: text("state").lower() == "configured", timeout=30)
