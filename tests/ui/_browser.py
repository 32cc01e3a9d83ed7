"""A headless Chromium (Debian's ``chromium`` + ``chromium-driver``) driven by Selenium, and a
``theseus ui`` server on a free loopback port, for the browser tests and the ui bench."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import free_port, wait_for_port

REPO = Path(__file__).resolve().parents[2]
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1400,1000")


def chromium_paths() -> tuple[str, str] | None:
    """``(chromium, chromedriver)`` when both are installed, else None."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver") or (os.path.exists("/usr/bin/chromedriver") and "/usr/bin/chromedriver")
    return (browser, driver) if browser and driver else None


@contextlib.contextmanager
def browser(downloads: str | None = None) -> Iterator:
    """A Selenium Chrome driver over headless Chromium with a fresh profile (removed afterwards)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser_path, driver_path = chromium_paths()
    profile = tempfile.mkdtemp(prefix="theseus-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = browser_path
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    if downloads:
        options.add_experimental_option("prefs", {"download.default_directory": downloads,
                                                  "download.prompt_for_download": False})
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@contextlib.contextmanager
def ui_server(root: str, stale_after: float | None = None) -> Iterator[str]:
    """``theseus ui ROOT`` in a subprocess on 127.0.0.1; yields its URL, stops it afterwards."""
    with ui_process(root, stale_after) as (url, _):
        yield url


@contextlib.contextmanager
def ui_process(root: str, stale_after: float | None = None) -> Iterator[tuple[str, subprocess.Popen]]:
    """Like :func:`ui_server`, yielding ``(url, process)`` (the bench reads the process's CPU time)."""
    port = free_port()
    command = [sys.executable, "-m", "theseus.cli", "ui", root, "--port", str(port)]
    if stale_after is not None:
        command += ["--stale-after", str(stale_after)]
    log = tempfile.NamedTemporaryFile(prefix="theseus-ui-", suffix=".log", delete=False)
    proc = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for_port(port, proc, 120, "theseus ui", log.name)
        yield f"http://127.0.0.1:{port}", proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        os.unlink(log.name)


def wait_for(driver, script: str, timeout: float = 20.0, every: float = 0.05):
    """Poll the JS expression ``script`` (returned) until truthy; returns its value or raises naming it."""
    deadline = time.time() + timeout
    while True:
        value = driver.execute_script(f"return {script}")
        if value:
            return value
        if time.time() > deadline:
            raise TimeoutError(f"waited {timeout} s for `{script}`")
        time.sleep(every)
