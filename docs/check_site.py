"""The built site in a real browser (headless Chromium, `make docs`): every page opens, every image on
it decodes (the site's checks.js writes what the browser saw onto <body>), every link inside the site
answers, and a screenshot of the home page goes to build/site-home.png. Exits 1 naming each problem.

    python docs/check_site.py build/site
"""

from __future__ import annotations

import functools
import http.server
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def serve(site: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


def chromium(*args: str, profile: Path) -> str:
    run = subprocess.run(
        ["chromium", *FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=8000", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if run.returncode != 0:
        raise RuntimeError(f"chromium {' '.join(args)} failed: {run.stderr[-500:]}")
    return run.stdout


def check(site: Path, screenshot: Path) -> list[str]:
    server, root = serve(site)
    profile = site.parent / ".chromium-profile"
    problems, links, pages = [], set(), sorted(site.rglob("*.html"))
    try:
        for page in pages:
            if page.name == "404.html":
                continue
            url = urllib.parse.urljoin(root, str(page.relative_to(site)))
            dom = chromium("--dump-dom", url, profile=profile)
            body = re.search(r"<body([^>]*)>", dom)
            attributes = body.group(1) if body else ""
            if "data-images=" not in attributes:
                problems.append(f"{url}: the page did not finish loading in the browser (no checks.js mark)")
            broken = re.search(r'data-broken-images="([^"]*)"', attributes)
            if broken and broken.group(1).strip():
                problems.append(f"{url}: images that did not load: {broken.group(1)}")
            for href in re.findall(r'<a [^>]*href="([^"#]+)', dom):
                target = urllib.parse.urljoin(url, href)
                if target.startswith(root):
                    links.add((url, target))
        for source, target in sorted(links):
            try:
                urllib.request.urlopen(target, timeout=10).close()
            except urllib.error.URLError as err:
                problems.append(f"{source}: broken link {target} ({err})")
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        chromium(f"--screenshot={screenshot.resolve()}", "--window-size=1280,1600", root, profile=profile)
        if not screenshot.is_file() or screenshot.stat().st_size < 1000:
            problems.append(f"{screenshot}: no screenshot of the home page was written")
    finally:
        server.shutdown()
    print(
        f"{len(pages)} pages opened in Chromium, {len(links)} links inside the site followed, "
        f"screenshot {screenshot}: {len(problems)} problem(s)"
    )
    return problems


if __name__ == "__main__":
    start = time.time()
    site = Path(sys.argv[1] if len(sys.argv) > 1 else "build/site")
    found = check(site, site.parent / "site-home.png")
    print("\n".join(found) or f"every page, image and link good ({time.time() - start:.0f} s)")
    sys.exit(1 if found else 0)
