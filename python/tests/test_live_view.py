"""The live view page in headless Chromium (Debian's chromium + chromedriver, driven by
Selenium; nothing is downloaded): it loads from the real ``remora daq serve``, its counters move
while a run goes on, the image and the profile render, and start and stop work from its
buttons. A screenshot is saved to python/tests/artifacts/live_view.png."""
import os
import pathlib
import shutil
import subprocess
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXE = pathlib.Path(os.environ.get("REMORA_EXE", ROOT / "target" / "release" / "remora"))
ARTIFACTS = pathlib.Path(__file__).resolve().parent / "artifacts"

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


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        p = shutil.which(name)
        if p:
            return p
    return None


@pytest.fixture
def server(tmp_path):
    if not EXE.exists():
        pytest.skip(f"{EXE} is not built (make build)")
    cfg = tmp_path / "live.toml"
    cfg.write_text(CONFIG)
    p = subprocess.Popen([str(EXE), "daq", "serve", "--listen", "127.0.0.1:0", str(cfg)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    line = p.stdout.readline()
    assert line.startswith("serving on "), (line, p.stderr.read())
    yield line.split()[-1]
    p.terminate()
    try:
        p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


@pytest.fixture
def browser():
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    exe, driver = chromium(), shutil.which("chromedriver")
    if not exe or not driver:
        pytest.skip("no chromium and chromedriver (Debian: chromium chromium-driver)")
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
    d.get(server + "/")
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

    d.find_element(By.ID, "stop").click()
    wait_for("state configured again", lambda: text("state").lower() == "configured", timeout=30)
    assert "stopped" in text("message"), text("message")
    assert d.find_element(By.ID, "start").is_enabled()
