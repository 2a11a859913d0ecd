"""Open the built book in headless Chromium and check what a reader would see (make browser-check).

For every page in the table of contents: it loads, its images are not broken, and its math is
typeset by MathJax (served from the book itself, so this works offline). The left navigation
lists every chapter; every chapter page has an "Open in Colab" link to its own notebook and at
least one figure (the static lab figure), folded solutions that are closed when the page
loads, and no code cell or output that scrolls sideways at a 1280 px window; a folded
solution and a folded answer open on a click. Screenshots go to
_build/browser/.

Exit codes: 0 all checks passed, 1 a check failed, 3 no Chromium here (make decides whether
that is a skip or, in CI, a failure).
"""

from __future__ import annotations

import functools
import http.server
import re
import shutil
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HTML = ROOT / "_build" / "html"
SHOTS = ROOT / "_build" / "browser"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")


def toc_pages() -> list[str]:
    text = (ROOT / "_toc.yml").read_text()
    root = re.search(r"^root:\s*(\S+)", text, re.MULTILINE).group(1)
    return [root, *re.findall(r"file:\s*(\S+)", text)]


def serve(directory: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", f"--window-size={WIDTH},1600"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(DRIVER), options=options)


def wait_for(driver, script: str, timeout: float = 20.0) -> bool:
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        WebDriverWait(driver, timeout).until(lambda d: d.execute_script(script))
        return True
    except TimeoutException:
        return False


BROKEN_IMAGES = """return Array.from(document.images)
    .filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.getAttribute('src'));"""
HAS_MATH = "return document.querySelectorAll('.math, span.math, div.math').length;"
# Every code cell's input and output block must fit its column: the longest line of each
# block that scrolls is reported.
SCROLLING = """return Array.from(document.querySelectorAll('div.cell pre, div.cell_output pre'))
    .filter(p => p.scrollWidth > p.clientWidth + 1)
    .map(p => p.textContent.split('\\n').reduce((a, b) => b.length > a.length ? b : a, '')
         .slice(0, 90));"""
SOLUTIONS = """const all = document.querySelectorAll('details.anatomy-solution');
    return {total: all.length, open: Array.from(all).filter(d => d.open).length};"""
WIDTH = 1280
MATH_DONE = ("return document.querySelectorAll('mjx-container').length > 0 && "
             "document.querySelectorAll('mjx-merror').length === 0;")


def check_page(driver, base: str, page: str, problems: list[str]) -> None:
    driver.get(f"{base}/{page}.html")
    if not wait_for(driver, "return document.readyState === 'complete';"):
        problems.append(f"{page}: did not finish loading")
        return
    if "404" in driver.title or not driver.find_elements("css selector", "h1"):
        problems.append(f"{page}: no page (title {driver.title!r})")
    broken = driver.execute_script(BROKEN_IMAGES)
    if broken:
        problems.append(f"{page}: broken images {broken}")
    if driver.execute_script(HAS_MATH) and not wait_for(driver, MATH_DONE):
        problems.append(f"{page}: math is not typeset by MathJax")


def check_chapter(driver, base: str, page: str, chapters: list[str], problems: list[str]):
    driver.get(f"{base}/{page}.html")
    wait_for(driver, "return document.readyState === 'complete';")
    nav = {a.get_attribute("href").split("#")[0].removeprefix(base + "/").removesuffix(".html")
           for a in driver.find_elements("css selector", ".bd-sidebar-primary a[href]")}
    missing = [c for c in chapters if c not in nav]
    if missing:
        problems.append(f"{page}: the left navigation does not list {missing}")
    colab = [a.get_attribute("href") for a in driver.find_elements("css selector", "a[href]")
             if "colab.research.google.com" in (a.get_attribute("href") or "")]
    if not any(href.endswith(f"/{page}.ipynb") for href in colab):
        problems.append(f"{page}: no Open-in-Colab link to {page}.ipynb (found {colab})")
    figures = driver.execute_script(
        "return document.querySelectorAll('.cell_output img').length;")
    if not figures:
        problems.append(f"{page}: no figure in the cell outputs (the static lab figure?)")
    for text in driver.execute_script(SCROLLING):
        problems.append(f"{page}: a code cell or output scrolls sideways at "
                        f"{WIDTH} px: {text!r}")
    solutions = driver.execute_script(SOLUTIONS)
    if not solutions["total"]:
        problems.append(f"{page}: no folded solution (details.anatomy-solution)")
    elif solutions["open"]:
        problems.append(f"{page}: {solutions['open']} solutions are open when the page loads")


def check_folded(driver, base: str, page: str, selector: str, expect: str, shot: str,
                 problems: list[str]) -> None:
    """Click the first folded block matching ``selector``; it must open and show ``expect``."""
    import time

    driver.get(f"{base}/{page}.html")
    wait_for(driver, MATH_DONE)
    folded = driver.find_elements("css selector", f"{selector}:not([open]) > summary")
    if not folded:
        problems.append(f"{page}: no folded block {selector}")
        return
    summary = folded[0]
    driver.execute_script("arguments[0].scrollIntoView({block: 'start'});", summary)
    summary.click()
    time.sleep(0.5)  # let the page settle before the screenshot
    details = summary.find_element("xpath", "..")
    if details.get_attribute("open") is None:
        problems.append(f"{page}: {selector} did not open on click")
    elif expect not in details.text:
        problems.append(f"{page}: the opened {selector} does not show {expect!r}")
    driver.save_screenshot(str(SHOTS / f"{page.replace('/', '_')}_{shot}.png"))


def main() -> int:
    if not (CHROMIUM and DRIVER):
        print("browser-check: Chromium or chromedriver is not installed "
              "(apt-get install chromium chromium-driver)")
        return 3
    if not (HTML / "index.html").exists():
        print("browser-check: no built book in _build/html (run make book first)")
        return 1
    SHOTS.mkdir(parents=True, exist_ok=True)
    pages = toc_pages()
    chapters = [p for p in pages if p.startswith("chapters/")]
    server, base = serve(HTML)
    driver = browser()
    problems: list[str] = []
    try:
        for page in pages:
            check_page(driver, base, page, problems)
            driver.save_screenshot(str(SHOTS / f"{page.replace('/', '_')}.png"))
        for page in chapters:
            check_chapter(driver, base, page, chapters, problems)
        for page in chapters[:1]:
            # A folded library solution and a folded interview answer.
            check_folded(driver, base, page, "details.anatomy-solution", "def ",
                         "solution_open", problems)
            check_folded(driver, base, page, "details:not(.hide)", "", "answer_open", problems)
    finally:
        driver.quit()
        server.shutdown()
    for problem in problems:
        print(f"browser-check: {problem}")
    print(f"browser-check: {len(pages)} pages, {len(chapters)} chapters, "
          f"{len(problems)} problems; screenshots in _build/browser/")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
