"""Notebooks as a user opens them in JupyterLab, in a real browser (headless Chromium through
playwright, driving Debian's /usr/bin/chromium: no browser download). Starts `jupyter lab` from this
venv on 127.0.0.1 (a free port, a random token), and for each notebook: opens /lab/tree/<path>, checks
that JupyterLab preselected the notebook's kernel ("Python (elsi)") with no kernel-selection or other
dialog, runs every cell (Run > Run All Cells: the command `notebook:run-all-cells`), waits until the
kernel is idle and every code cell has an execution count, then checks that no output is an error and
that at least one inline PNG figure decoded in the browser. A full-page screenshot of each notebook goes
to <out>/<stem>.png, the server's log to <out>/lab-server.log, the browser's errors to
<out>/<stem>.console.log. Notebooks are never saved (autosave off, closed without saving; the
checkpoint lab makes on opening goes to a temporary folder) and their bytes on disk are compared
before and after. `--no-figures` drops the figure check (notebook 00 draws none). Exits 1 naming each
problem (notebook and cell); the lab server, its kernels and the browser are always shut down.

    python docs/check_lab.py notebooks/01_activation_wave.ipynb notebooks/09_families.ipynb [--out build/lab]

Lab runs with an empty settings and workspace folder of its own (JupyterLab's defaults, autosave off,
no news fetching), so a user's own settings neither change nor colour the check.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from check_site import FLAGS as SITE_FLAGS  # docs/ is this script's own folder on sys.path

CHROMIUM = "/usr/bin/chromium"
FLAGS = [f for f in SITE_FLAGS if f != "--headless"]  # the site check's; playwright adds headless itself
# JupyterLab user settings for the check's own (temporary) settings folder
SETTINGS = {
    "@jupyterlab/docmanager-extension/plugin": {"autosave": False},
    "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
}

# the NotebookPanel open on `path` (needs --LabApp.expose_app_in_browser)
PANEL_JS = """
const panelOf = (path) => {
  const app = window.jupyterapp;
  if (!app || !app.shell) return null;
  return Array.from(app.shell.widgets('main')).find(w => w.context && w.context.path === path && w.content) || null;
};
const DIALOG_TEXT = d => d.innerText.split('\\n').map(l => l.trim()).filter(l => l).join(' | ').slice(0, 300);
"""

OPEN_STATE_JS = (
    "(path) => {"
    + PANEL_JS
    + """
  const dialogs = Array.from(document.querySelectorAll('.jp-Dialog')).map(DIALOG_TEXT);
  const w = panelOf(path);
  if (!w) return {app: !!window.jupyterapp, opened: false, dialogs};
  const sc = w.sessionContext;
  const kernel = sc.session && sc.session.kernel;
  const item = w.node.querySelector('[data-jp-item-name="kernelName"]');
  return {
    app: true, opened: true, dialogs,
    ready: !!(w.context.isReady && sc.isReady),
    kernelName: kernel ? kernel.name : null,
    displayName: sc.kernelDisplayName,
    toolbar: item ? item.textContent.trim() : null,
    status: kernel ? kernel.status : null,
    cells: w.content.widgets.length,
  };
}"""
)

RUN_ALL_JS = (
    "(path) => {"
    + PANEL_JS
    + """
  const app = window.jupyterapp, w = panelOf(path);
  app.shell.activateById(w.id);
  if (app.shell.currentWidget !== w) return 'the notebook is not the current widget';
  window.__labcheckRun = {done: false};
  Promise.resolve(app.commands.execute('notebook:run-all-cells')).then(
    ok => { window.__labcheckRun = {done: true, ok}; },
    err => { window.__labcheckRun = {done: true, error: String(err)}; });
  return '';
}"""
)

RUN_STATE_JS = (
    "(path) => {"
    + PANEL_JS
    + """
  const w = panelOf(path);
  const kernel = w.sessionContext.session && w.sessionContext.session.kernel;
  const code = w.content.widgets.filter(c => c.model.type === 'code');
  const dialogs = Array.from(document.querySelectorAll('.jp-Dialog')).map(DIALOG_TEXT);
  return {
    run: window.__labcheckRun || {done: false},
    status: kernel ? kernel.status : 'no kernel',
    code: code.length,
    counted: code.filter(c => c.model.executionCount !== null).length,
    busy: code.filter(c => {
      const p = c.node.querySelector('.jp-InputPrompt');
      return p && p.textContent.includes('*');
    }).length,
    dialogs,
  };
}"""
)

CELLS_JS = (
    "async (path) => {"
    + PANEL_JS
    + """
  const w = panelOf(path);
  const cells = [];
  for (const [i, c] of w.content.widgets.entries()) {
    const source = c.model.sharedModel.getSource();
    const cell = {index: i, type: c.model.type, head: source.split('\\n').find(l => l.trim()) || ''};
    if (c.model.type === 'code') {
      cell.count = c.model.executionCount;
      cell.prompt = ((c.node.querySelector('.jp-InputPrompt') || {}).textContent || '').trim();
      cell.errors = c.model.outputs.toJSON().filter(o => o.output_type === 'error')
        .map(o => `${o.ename}: ${String(o.evalue).split('\\n')[0]}`.slice(0, 300));
      cell.tracebacks = Array.from(c.node.querySelectorAll(
          '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'))
        .filter(n => n.textContent.includes('Traceback'))
        .map(n => n.textContent.trim().split('\\n').filter(l => l.trim()).slice(-1)[0].slice(0, 300));
      const imgs = Array.from(c.node.querySelectorAll('.jp-OutputArea-output img'))
        .filter(img => (img.getAttribute('src') || '').startsWith('data:image/png'));
      await Promise.all(imgs.map(img => img.decode().catch(() => null)));
      cell.images = imgs.length;
      cell.decoded = imgs.filter(img => img.complete && img.naturalWidth > 0).length;
      cell.sizes = imgs.map(img => `${img.naturalWidth}x${img.naturalHeight}`);
    }
    cells.push(cell);
  }
  return cells;
}"""
)

HEIGHT_JS = (
    "(path) => {"
    + PANEL_JS
    + """
  const w = panelOf(path);
  const scroller = w.content.node.querySelector('.jp-WindowedPanel-outer') || w.content.node;
  scroller.scrollTop = 0;
  const cells = w.content.widgets, last = cells.length ? cells[cells.length - 1].node : null;
  const status = document.querySelector('#jp-main-statusbar');
  const bottom = last ? last.getBoundingClientRect().bottom : scroller.getBoundingClientRect().top + scroller.scrollHeight;
  return Math.ceil(bottom + 40 + (status ? status.getBoundingClientRect().height : 0));
}"""
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def children(pid: int) -> list[int]:
    """Every descendant of pid still alive (read from /proc), so that no kernel outlives the check."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            parents[int(stat.parent.name)] = int(fields[1])
        except (OSError, IndexError, ValueError):
            continue
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        kids = [p for p, pp in parents.items() if pp == parent]
        found += kids
        frontier += kids
    return found


class Lab:
    """`jupyter lab` from this interpreter on 127.0.0.1, serving `root`; stopped by stop()."""

    def __init__(self, root: Path, log: Path):
        self.root, self.token, self.port = root, secrets.token_hex(24), free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.tmp = tempfile.TemporaryDirectory(prefix="check-lab-")
        settings = Path(self.tmp.name) / "user-settings"
        for name, values in SETTINGS.items():
            path = settings / f"{name}.jupyterlab-settings"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(values))
        command = [
            sys.executable,
            "-m",
            "jupyter",
            "lab",
            "--no-browser",
            "--ServerApp.open_browser=False",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={self.port}",
            "--ServerApp.port_retries=0",
            f"--ServerApp.root_dir={root}",
            f"--IdentityProvider.token={self.token}",
            "--LabApp.expose_app_in_browser=True",
            f"--LabApp.user_settings_dir={settings}",
            f"--LabApp.workspaces_dir={Path(self.tmp.name) / 'workspaces'}",
            # the checkpoint lab makes on opening a notebook: in the temporary folder, not notebooks/
            f"--FileCheckpoints.checkpoint_dir={Path(self.tmp.name) / 'checkpoints'}",
        ]
        if os.geteuid() == 0:
            command.append("--allow-root")
        env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(Path(self.tmp.name) / "runtime"))
        log.parent.mkdir(parents=True, exist_ok=True)
        self.log_path = log
        self.log = log.open("w")
        self.proc = subprocess.Popen(
            command,
            cwd=root,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C reaches this script, which then shuts lab down itself
        )

    def api(self, method: str, path: str, timeout: float = 10) -> bytes:
        request = urllib.request.Request(
            self.base + path, method=method, headers={"Authorization": f"token {self.token}"}
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.read()

    def wait(self, timeout: float = 300) -> None:
        end = time.time() + timeout
        while time.time() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyter lab exited ({self.proc.returncode}): {self.tail()}")
            try:
                json.loads(self.api("GET", "/api/status", timeout=5))
                json.loads(self.api("GET", "/lab/api/settings", timeout=30))
                return
            except (urllib.error.URLError, OSError, ValueError):
                time.sleep(1)
        raise RuntimeError(f"jupyter lab did not answer within {timeout:.0f} s: {self.tail()}")

    def tail(self) -> str:
        self.log.flush()
        return " | ".join(self.log_path.read_text(errors="replace").strip().splitlines()[-8:])

    def kernelspec(self, name: str) -> dict | None:
        return json.loads(self.api("GET", "/api/kernelspecs"))["kernelspecs"].get(name)

    def close_sessions(self, path: str) -> None:
        """Shut down the kernel of every session on `path` (the notebook itself is never saved)."""
        for session in json.loads(self.api("GET", "/api/sessions")):
            if session.get("path") == path:
                self.api("DELETE", f"/api/sessions/{session['id']}", timeout=60)

    def stop(self) -> None:
        kids = children(self.proc.pid)
        if self.proc.poll() is None:
            try:
                self.api("POST", "/api/shutdown", timeout=30)
                self.proc.wait(timeout=60)
            except (urllib.error.URLError, OSError, subprocess.TimeoutExpired):
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
        end = time.time() + 10
        while time.time() < end and any(Path(f"/proc/{pid}").exists() for pid in kids):
            time.sleep(0.5)
        for pid in kids:  # kernels the server failed to stop
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self.log.close()
        self.tmp.cleanup()


def screenshot(page, rel: str, path: Path, max_height: int, summary: dict) -> None:
    """The whole notebook in one picture: the viewport grown to the notebook's height (capped)."""
    try:
        height = min(page.evaluate(HEIGHT_JS, rel), max_height)
    except Exception:  # noqa: BLE001 - no notebook panel (lab did not open it): the page as it is
        height = 1000
    page.set_viewport_size({"width": 1400, "height": max(height, 1000)})
    page.wait_for_timeout(1500)
    try:
        page.evaluate(HEIGHT_JS, rel)
    except Exception:  # noqa: BLE001
        pass
    page.screenshot(path=str(path), full_page=True)
    summary["screenshot"] = path


def check_notebook(browser, lab: Lab, notebook: Path, out: Path, args) -> list[str]:
    """Open, run and inspect one notebook; returns its problems and prints its result line."""
    start, problems = time.time(), []
    rel = notebook.resolve().relative_to(lab.root).as_posix()
    name = notebook.as_posix()
    before = notebook.read_bytes()
    metadata = json.loads(before).get("metadata", {}).get("kernelspec", {})
    spec = lab.kernelspec(args.kernel)
    expected = (spec or {}).get("spec", {}).get("display_name")
    if metadata.get("name") != args.kernel:
        problems.append(f"{name}: the notebook's metadata names kernel {metadata.get('name')!r}, not {args.kernel!r}")
    if spec is None:
        problems.append(f"{name}: the lab server has no kernel spec {args.kernel!r}")
    summary = {"kernel": "?", "cells": "0/?", "images": 0}
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    console = []
    page.on("pageerror", lambda err: console.append(f"pageerror: {err}"))
    page.on("console", lambda msg: msg.type == "error" and console.append(f"console: {msg.text}"))
    try:
        page.goto(
            f"{lab.base}/lab/tree/{urllib.parse.quote(rel)}?reset&token={lab.token}",
            wait_until="domcontentloaded",
            timeout=120_000,
        )
        # opened: the panel is there, its kernel started and idle; any dialog here is a failure
        end, state = time.time() + args.open_timeout, {}
        while time.time() < end:
            state = page.evaluate(OPEN_STATE_JS, rel)
            if state["dialogs"] or (state.get("ready") and state.get("status") == "idle"):
                break
            page.wait_for_timeout(500)
        for dialog in state.get("dialogs", []):
            problems.append(f"{name}: a dialog appeared on opening (no kernel preselected?): {dialog}")
        if not state.get("opened"):
            problems.append(f"{name}: JupyterLab did not open the notebook within {args.open_timeout:.0f} s")
            return problems
        summary["kernel"] = f"{state.get('displayName')} [{state.get('kernelName')}]"
        if state.get("dialogs") or not state.get("ready") or state.get("status") != "idle":
            if not state.get("dialogs"):
                problems.append(
                    f"{name}: the kernel was not ready within {args.open_timeout:.0f} s "
                    f"(kernel {state.get('kernelName')}, status {state.get('status')})"
                )
            return problems
        if state["kernelName"] != args.kernel or state["displayName"] != expected:
            problems.append(
                f"{name}: JupyterLab preselected kernel {state['displayName']!r} [{state['kernelName']}], "
                f"not {expected!r} [{args.kernel}]"
            )
        if state["toolbar"] != expected:
            problems.append(f"{name}: the toolbar shows kernel {state['toolbar']!r}, not {expected!r}")

        # Run > Run All Cells, then wait for the kernel to go idle with every code cell counted
        error = page.evaluate(RUN_ALL_JS, rel)
        if error:
            problems.append(f"{name}: could not run all cells: {error}")
            return problems
        run_start, last_note, idle_since = time.time(), time.time(), None
        while True:
            page.wait_for_timeout(1000)
            run = page.evaluate(RUN_STATE_JS, rel)
            if run["dialogs"]:
                problems += [f"{name}: a dialog appeared while running: {d}" for d in run["dialogs"]]
                break
            if run["status"] in ("dead", "restarting", "autorestarting", "unknown", "no kernel"):
                problems.append(f"{name}: the kernel is {run['status']} while running the cells")
                break
            settled = run["status"] == "idle" and run["busy"] == 0
            finished = run["run"]["done"] or run["counted"] == run["code"]
            idle_since = (idle_since or time.time()) if settled and finished else None
            if idle_since and time.time() - idle_since >= 2:
                if run["run"].get("error"):
                    problems.append(f"{name}: Run All Cells failed: {run['run']['error']}")
                break
            if time.time() - run_start > args.timeout:
                problems.append(
                    f"{name}: not done after {args.timeout:.0f} s ({run['counted']}/{run['code']} code cells run, "
                    f"kernel {run['status']})"
                )
                break
            if time.time() - last_note >= 60:
                last_note = time.time()
                print(
                    f"  {name}: {time.time() - run_start:.0f} s, {run['counted']}/{run['code']} code cells run, "
                    f"kernel {run['status']}",
                    flush=True,
                )

        # what the run left: counts, errors, tracebacks, figures
        cells = page.evaluate(CELLS_JS, rel)
        code = [c for c in cells if c["type"] == "code"]
        counted = [c for c in code if c["count"] is not None]
        images = sum(c["images"] for c in code)
        summary.update(cells=f"{len(counted)}/{len(code)}", images=images)
        for c in code:
            where = f"{name}: cell {c['index']} ({c['head'][:60]!r})"
            if c["count"] is None:
                problems.append(f"{where}: not run (prompt {c['prompt']!r})")
            problems += [f"{where}: error output {e}" for e in c["errors"]]
            if not c["errors"]:
                problems += [f"{where}: traceback on stderr: {t}" for t in c["tracebacks"]]
            if c["decoded"] < c["images"]:
                problems.append(f"{where}: {c['images'] - c['decoded']} inline image(s) did not decode ({c['sizes']})")
        if images == 0 and not args.no_figures:
            problems.append(f"{name}: no inline PNG figure in any output")

        screenshot(page, rel, out / f"{notebook.stem}.png", args.max_height, summary)
        summary["done"] = True
    finally:
        if "screenshot" not in summary:  # what the page showed when the check gave up
            try:
                screenshot(page, rel, out / f"{notebook.stem}.png", args.max_height, summary)
            except Exception as err:  # noqa: BLE001 - best effort, the problem is already reported
                print(f"  {name}: no screenshot ({type(err).__name__}: {err})")
        try:
            lab.close_sessions(rel)
        except (urllib.error.URLError, OSError) as err:
            problems.append(f"{name}: could not shut down its kernel: {err}")
        context.close()  # closes the page without saving (no beforeunload prompt)
        (out / f"{notebook.stem}.console.log").write_text("\n".join(console) + "\n")
        if notebook.read_bytes() != before:
            problems.append(f"{name}: the file on disk changed while it was open in JupyterLab")
        verdict = f"{len(problems)} problem(s)" if problems else "ok" if summary.get("done") else "interrupted"
        print(
            f"{name}: kernel {summary['kernel']}, {summary['cells']} code cells run, {summary['images']} images seen, "
            f"{time.time() - start:.0f} s: {verdict}"
            + (f" (screenshot {summary['screenshot']})" if "screenshot" in summary else ""),
            flush=True,
        )
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, default=Path("build/lab"), help="screenshots and logs (build/lab)")
    parser.add_argument("--kernel", default="elsi", help="the kernel JupyterLab must preselect (elsi)")
    parser.add_argument("--timeout", type=float, default=1200, help="seconds to run one notebook (1200)")
    parser.add_argument("--open-timeout", type=float, default=300, help="seconds to open it, kernel ready (300)")
    parser.add_argument("--no-figures", action="store_true", help="no inline figure needed (e.g. notebook 00)")
    parser.add_argument("--max-height", type=int, default=16000, help="screenshot height cap in pixels")
    args = parser.parse_args()
    missing = [str(nb) for nb in args.notebooks if not nb.is_file()]
    if missing:
        print(f"no such notebook: {', '.join(missing)}")
        return 1
    from playwright.sync_api import sync_playwright

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # killed: still stop lab and the browser

    start = time.time()
    root = Path(os.path.commonpath([nb.resolve().parent for nb in args.notebooks]))
    args.out.mkdir(parents=True, exist_ok=True)
    problems, lab = [], None
    with sync_playwright() as playwright:
        browser = None
        try:
            lab = Lab(root, args.out / "lab-server.log")
            lab.wait()
            print(f"jupyter lab on {lab.base} serving {root}", flush=True)
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
            for notebook in args.notebooks:
                problems += check_notebook(browser, lab, notebook, args.out, args)
        except Exception as err:  # noqa: BLE001 - reported as a problem, the servers still stopped
            problems.append(f"check_lab: {type(err).__name__}: {err}")
        finally:
            if browser is not None:
                browser.close()
            if lab is not None:
                lab.stop()
    print("\n".join(problems) or f"every notebook opened, ran and drew its figures ({time.time() - start:.0f} s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
