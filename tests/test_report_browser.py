"""report.html in a real browser: headless Chromium through selenium and Debian's chromium-driver.

At 1280x800 and 390 px wide: no element wider than the viewport outside a scroll box, every image loaded,
no console error, and (at 1280x800) the verdict visible without scrolling. Skips, saying why, where
Chromium, its driver or selenium is missing (`.ci/run` installs them)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from reports.build import build_report
from reports.load import load

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "reports" / "example-cpu-2core"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install selenium)")
pytestmark = pytest.mark.skipif(not (CHROMIUM and DRIVER), reason="no Chromium or chromium-driver installed "
                                "(apt-get install chromium chromium-driver)")

OVERFLOWING = """
const width = document.documentElement.clientWidth;
const inScroll = e => { for (let p = e.parentElement; p; p = p.parentElement) {
  const s = getComputedStyle(p).overflowX; if (s === 'auto' || s === 'scroll') return true; } return false; };
return [...document.body.querySelectorAll('*')].filter(e => e.getBoundingClientRect().right > width + 1
  && !inScroll(e)).map(e => e.tagName + ' ' + (e.id || e.textContent.slice(0, 40)));
"""
BROKEN_IMAGES = "return [...document.images].filter(i => !i.complete || i.naturalWidth === 0).map(i => i.alt);"
VERDICT_TOP = "const h = document.getElementById('verdict'); return h ? h.getBoundingClientRect().top : -1;"


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report")
    build_report(load([EXAMPLE / f"{n}.jsonl" for n in ("sweep", "verify", "fidelity", "what_if", "plan")]), out)
    return out / "report.html"


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Chromium's temporary files (its profile's singleton socket folder): pytest's to remove, not left in /tmp
    (a hundred such folders after a day of test runs)."""
    return tmp_path_factory.mktemp("chromium")


def _browser(width: int, height: int, scratch: Path) -> object:
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 f"--window-size={width},{height}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    options.add_argument(f"--user-data-dir={scratch / f'profile-{width}'}")
    return webdriver.Chrome(service=Service(DRIVER, env={**os.environ, "TMPDIR": str(scratch)}), options=options)


@pytest.mark.parametrize(("width", "height"), [(1280, 800), (390, 844)])
def test_the_report_reads_in_a_browser(page: Path, scratch: Path, width: int, height: int) -> None:
    browser = _browser(width, height, scratch)
    try:
        browser.set_window_size(width, height)
        browser.get(page.as_uri())
        assert browser.execute_script(OVERFLOWING) == []
        assert browser.execute_script("return document.images.length") >= 5
        assert browser.execute_script(BROKEN_IMAGES) == []
        errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
        assert errors == []
        if width == 1280:
            top = browser.execute_script(VERDICT_TOP)
            assert 0 <= top < browser.execute_script("return window.innerHeight") - 100  # heading and a line
            browser.save_screenshot(str(page.parent / "screenshot.png"))
    finally:
        browser.quit()
