"""The web UI of `ft serve` in a real browser: headless Chromium (Debian's
chromium and chromium-driver) driven by Selenium loads the chat page, sends
messages with the keyboard and sees the streamed reply and its metrics
line, then opens the live view and finds the request in its table; at
desktop and phone width, with and without --api-key. Every test ends by
checking that the browser's console has no error.

The small reference model (llama-Q8_0) writes nonsense quickly, which is all
the page needs; one test asks the real Gemma 3 270M for the capital of
France, as README's first example does, and sees "Paris" arrive in pieces.

FT_WEBUI_SCREENSHOTS=DIR saves a PNG of each view there (the README's come
from tools/webui_screenshots.py, with the real model)."""
import json
import os
import shutil
import tempfile
import time

import pytest

from test_serve import Server, tiny_model

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.common.exceptions import TimeoutException  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
PHONE = {"width": 390, "height": 844, "deviceScaleFactor": 2, "mobile": True}
WAIT = 120  # seconds for anything the server computes (a loaded machine is slow)


def make_driver(phone=False):
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.skip("chromium and chromium-driver are not installed (scripts/setup.sh installs them)")
    profile = tempfile.mkdtemp(prefix="ft-webui-chromium-")
    o = webdriver.ChromeOptions()
    o.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--window-size=1280,900", f"--user-data-dir={profile}", "--no-first-run",
              "--disable-background-networking", "--disable-extensions"):
        o.add_argument(a)
    o.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(service=Service(CHROMEDRIVER), options=o)
    d.set_page_load_timeout(60)
    if phone:
        d.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", PHONE)
    d.profile_dir = profile
    return d


@pytest.fixture
def browser():
    d = make_driver()
    yield d
    d.quit()
    shutil.rmtree(d.profile_dir, ignore_errors=True)


@pytest.fixture
def phone():
    d = make_driver(phone=True)
    yield d
    d.quit()
    shutil.rmtree(d.profile_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def srv():
    s = Server(tiny_model(), "-c", "512", "--parallel", "2")
    yield s
    assert s.stop() == 0, s.stderr()


def url(s, path="/"):
    return f"http://127.0.0.1:{s.port}{path}"


def wait(d, cond, what, timeout=WAIT):
    try:
        return WebDriverWait(d, timeout, poll_frequency=0.05).until(lambda _: cond())
    except TimeoutException:
        raise AssertionError(f"timed out waiting for {what}; console: {d.get_log('browser')}") from None


def console_errors(d, allow=()):
    """SEVERE console entries, less those containing one of `allow`."""
    return [e for e in d.get_log("browser") if e["level"] == "SEVERE" and not any(a in e["message"] for a in allow)]


def screenshot(d, name):
    out = os.environ.get("FT_WEBUI_SCREENSHOTS")
    if out:
        os.makedirs(out, exist_ok=True)
        d.save_screenshot(os.path.join(out, name))


def record_fetches(d):
    """Wrap window.fetch so the test can read what the page sent."""
    d.execute_script("""
        window.__sent = [];
        const f = window.fetch;
        window.fetch = (u, o) => { window.__sent.push({url: String(u), body: o && o.body,
                                                      auth: o && o.headers && o.headers.Authorization});
                                   return f(u, o); };""")


def sent(d, path):
    return [x for x in d.execute_script("return window.__sent") if x["url"].endswith(path)]


def watch_reply_text(d):
    """Count the changes of the newest reply's text (one per streamed chunk)."""
    d.execute_script("""
        window.__changes = 0;
        new MutationObserver((ms) => { for (const m of ms) {
            const t = m.target.nodeType === 1 ? m.target : m.target.parentElement;
            if (t && t.closest && t.closest('.msg.assistant .text')) window.__changes++; } })
          .observe(document.getElementById('log'), {childList: true, subtree: true, characterData: true});""")


def last_reply(d):
    replies = d.find_elements(By.CSS_SELECTOR, "#log .msg.assistant")
    return replies[-1] if replies else None


def wait_reply_done(d, n_replies):
    """The n-th reply has its metrics line (the stream has ended)."""
    def done():
        r = d.find_elements(By.CSS_SELECTOR, "#log .msg.assistant")
        return len(r) >= n_replies and r[n_replies - 1].find_elements(By.CSS_SELECTOR, ".metrics")
    wait(d, done, f"reply {n_replies} and its metrics line")
    return d.find_elements(By.CSS_SELECTOR, "#log .msg.assistant")[n_replies - 1]


def metrics_of(reply):
    return {s.get_attribute("data-k"): s.text for s in reply.find_elements(By.CSS_SELECTOR, ".metrics span")}


def open_chat(d, s):
    """The chat page of server s, once it shows the model id."""
    d.get(url(s))
    wait(d, lambda: d.find_element(By.ID, "model").text, "the model id")


def set_field(d, field_id, text):
    """Types text into a settings field in place of its value."""
    f = d.find_element(By.ID, field_id)
    f.clear()
    f.send_keys(text)


def send(d, text):
    box = d.find_element(By.ID, "msg")
    box.send_keys(text)
    box.send_keys(Keys.ENTER)


def check_metrics_line(m):
    for k in ("ttft", "queue", "prefill", "decode", "cached", "itl", "tokens"):
        assert k in m, m
    assert m["ttft"].startswith("TTFT ") and m["ttft"].endswith(("ms", " s")), m
    assert m["queue"].endswith(("ms", " s")), m
    assert m["prefill"].endswith("tok/s") and m["decode"].endswith("tok/s"), m
    assert " of " in m["cached"], m
    assert "p50" in m["itl"] and "p99" in m["itl"], m
    return int(m["tokens"].split()[-1])


# ---- the chat page ---------------------------------------------------------------------

def test_chat_streams_reply_with_metrics(srv, browser):
    d = browser
    d.get(url(srv))
    wait(d, lambda: d.find_element(By.ID, "model").text == "llama-Q8_0", "the model id in the header")
    assert d.title == "FreeToken chat"
    record_fetches(d)
    watch_reply_text(d)
    # Settings go into the request: a system prompt, greedy, 12 tokens at most.
    d.find_element(By.ID, "system").send_keys("You answer briefly.")
    set_field(d, "temperature", "0")
    set_field(d, "max_tokens", "12")
    send(d, "Hello there")
    reply = wait_reply_done(d, 1)
    user = d.find_elements(By.CSS_SELECTOR, "#log .msg.user .text")
    assert [u.text for u in user] == ["Hello there"]
    assert reply.find_element(By.CSS_SELECTOR, ".text").text.strip(), "an empty reply"
    n_tokens = check_metrics_line(metrics_of(reply))
    assert 1 <= n_tokens <= 12
    # Streamed: the reply's text changed once per chunk.
    assert d.execute_script("return window.__changes") >= 2
    body = json.loads(sent(d, "/v1/chat/completions")[0]["body"])
    assert body["stream"] is True and body["performance_metrics"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["messages"] == [{"role": "system", "content": "You answer briefly."},
                                {"role": "user", "content": "Hello there"}]
    assert body["temperature"] == 0 and body["max_tokens"] == 12 and "seed" not in body
    # A second turn carries the first one.
    send(d, "And then?")
    wait_reply_done(d, 2)
    body = json.loads(sent(d, "/v1/chat/completions")[1]["body"])
    assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant", "user"]
    assert body["messages"][2]["content"] == reply.find_element(By.CSS_SELECTOR, ".text").text
    # The second prompt starts with the first: the prefix cache served part of it.
    cached = metrics_of(last_reply(d))["cached"].split()
    assert int(cached[1]) > 0 and int(cached[1]) <= int(cached[3]), cached
    screenshot(d, "chat-desktop.png")
    assert console_errors(d) == []


def test_keyboard(srv, browser):
    d = browser
    open_chat(d, srv)
    # Tab order from the top of a fresh page: skip link, pages, key button,
    # settings (open at this width), ..., the message box, Send.
    order = []
    for _ in range(30):
        ActionChains(d).send_keys(Keys.TAB).perform()
        a = d.switch_to.active_element
        order.append(a.get_attribute("id") or a.tag_name + ":" + (a.text or a.get_attribute("href") or ""))
        if order[-1] == "send":
            break
    assert order[0].startswith("a:") and "Skip" in order[0], order
    idx = {k: i for i, k in enumerate(order)}
    for earlier, later in (("key-btn", "system"), ("system", "temperature"), ("seed", "new-chat"),
                           ("new-chat", "msg"), ("msg", "send")):
        assert idx[earlier] < idx[later], order
    # Every control has a label.
    unlabelled = d.execute_script("""
        return [...document.querySelectorAll('input, textarea, select')]
          .filter((e) => !e.labels.length && !e.getAttribute('aria-label')).map((e) => e.id);""")
    assert unlabelled == []
    # Shift+Enter is a new line, Enter sends.
    box = d.find_element(By.ID, "msg")
    box.send_keys("line one")
    box.send_keys(Keys.SHIFT, Keys.ENTER)
    box.send_keys("line two")
    assert box.get_attribute("value") == "line one\nline two"
    assert d.find_elements(By.CSS_SELECTOR, "#log .msg") == []
    box.send_keys(Keys.ENTER)
    wait_reply_done(d, 1)
    assert d.find_element(By.CSS_SELECTOR, "#log .msg.user .text").text == "line one\nline two"
    assert box.get_attribute("value") == ""
    assert d.switch_to.active_element == box  # focus back in the box for the next message
    assert console_errors(d) == []


def test_user_text_is_not_markup(srv, browser):
    d = browser
    open_chat(d, srv)
    set_field(d, "max_tokens", "4")
    hostile = '<img src=x onerror="window.__pwned=1"><b>bold</b>'
    send(d, hostile)
    wait_reply_done(d, 1)
    assert d.find_element(By.CSS_SELECTOR, "#log .msg.user .text").text == hostile
    assert d.find_elements(By.CSS_SELECTOR, "#log img, #log .text b") == []
    assert d.execute_script("return window.__pwned") is None
    # New chat forgets the conversation.
    record_fetches(d)
    d.find_element(By.ID, "new-chat").click()
    assert d.find_elements(By.CSS_SELECTOR, "#log .msg") == []
    send(d, "Fresh start")
    wait_reply_done(d, 1)
    body = json.loads(sent(d, "/v1/chat/completions")[0]["body"])
    assert body["messages"] == [{"role": "user", "content": "Fresh start"}]
    assert console_errors(d) == []


def test_error_shown(srv, browser):
    """A request the server refuses: its message in the alert, the question can be sent again."""
    d = browser
    open_chat(d, srv)
    set_field(d, "temperature", "-3")
    send(d, "hi")
    err = d.find_element(By.ID, "error")
    wait(d, lambda: err.is_displayed() and err.text, "the error message")
    assert "temperature" in err.text
    assert d.find_element(By.CSS_SELECTOR, "#log .msg.assistant .metrics").text.startswith("No metrics")
    assert d.find_element(By.ID, "msg").get_attribute("value") == "hi"  # given back to send again
    # The server's 400 is the only console entry (Chrome logs every failed resource).
    assert console_errors(d, allow=["status of 400"]) == []


# ---- the live view ---------------------------------------------------------------------

def table(d):
    """The live view's table, newest first, as lists of cell texts (read in
    one go: the page replaces the rows at every update)."""
    return d.execute_script("return [...document.querySelectorAll('#recent-rows tr')]"
                            ".map((tr) => [...tr.cells].map((td) => td.textContent))")


def test_dashboard_shows_requests(srv, browser):
    d = browser
    open_chat(d, srv)
    send(d, "Count to three")
    reply = wait_reply_done(d, 1)
    n_tokens = check_metrics_line(metrics_of(reply))
    newest = json.loads(srv.request("GET", "/v1/requests/recent?limit=1")[2])["data"][0]
    assert newest["completion_tokens"] == n_tokens and newest["stream"] is True
    # Through the nav link, as a user would.
    d.find_element(By.LINK_TEXT, "Live view").click()
    wait(d, lambda: d.title == "FreeToken live view", "the live view")
    wait(d, lambda: any(r[1] == newest["id"] for r in table(d)), "the request in the table")
    cells = next(r for r in table(d) if r[1] == newest["id"])
    assert cells[2] == "chat" and cells[3] == "200"
    assert cells[6] == str(n_tokens)
    assert cells[8].endswith(("ms", " s"))  # TTFT
    assert d.find_element(By.ID, "g-running").text.isdigit()
    assert d.find_element(By.ID, "g-waiting").text.isdigit()
    assert d.find_element(By.ID, "g-kv").text.endswith("%")
    assert int(d.find_element(By.ID, "g-total").text) >= 1
    assert d.find_element(By.ID, "status").text.startswith("Live")
    # The charts drew the request (their labels say what they show).
    wait(d, lambda: "latest" in d.find_element(By.ID, "c-ttft").get_attribute("aria-label"), "the TTFT chart")
    for c in ("c-itl", "c-queue", "c-tps", "c-sched", "c-kv"):
        assert "latest" in d.find_element(By.ID, c).get_attribute("aria-label"), c
    # Live: a request from another client shows up without a reload.
    before = len(table(d))
    st, r = srv.post("/v1/completions", {"prompt": "one two", "max_tokens": 3})
    assert st == 200
    wait(d, lambda: any(x[1] == r["id"] for x in table(d)), "the new request in the table")
    rows = table(d)
    assert len(rows) == before + 1 and rows[0][1] == r["id"]  # newest first
    # Pause stops the updates; the button says so.
    pause = d.find_element(By.ID, "pause")
    pause.click()
    assert pause.get_attribute("aria-pressed") == "true" and pause.text == "Resume"
    srv.post("/v1/completions", {"prompt": "three", "max_tokens": 2})
    time.sleep(2.5)
    assert len(table(d)) == before + 1
    pause.click()
    wait(d, lambda: len(table(d)) == before + 2, "the updates after Resume")
    screenshot(d, "dashboard-desktop.png")
    assert console_errors(d) == []


# ---- phone width -----------------------------------------------------------------------

def overflow(d):
    """How far the page is wider than the screen (0: no sideways scrolling)."""
    return d.execute_script("return document.documentElement.scrollWidth - window.innerWidth")


def test_phone_width(srv, phone):
    d = phone
    d.get(url(srv))
    assert d.execute_script("return window.innerWidth") == PHONE["width"]
    wait(d, lambda: d.find_element(By.ID, "model").text, "the model id")
    # Settings fold away on a phone; the message box and Send are on screen.
    assert d.find_element(By.ID, "settings").get_attribute("open") is None
    assert overflow(d) <= 0
    send(d, "Hi from a phone")
    reply = wait_reply_done(d, 1)
    check_metrics_line(metrics_of(reply))
    assert overflow(d) <= 0
    right = d.execute_script("return Math.max(...[...document.querySelectorAll('#log *, #composer *')]"
                             ".map((e) => e.getBoundingClientRect().right))")
    assert right <= PHONE["width"], right
    send_btn = d.find_element(By.ID, "send")
    assert send_btn.is_displayed() and send_btn.rect["x"] + send_btn.rect["width"] <= PHONE["width"]
    screenshot(d, "chat-phone.png")
    assert console_errors(d) == []

    d.get(url(srv, "/dashboard"))
    wait(d, lambda: table(d), "the table")
    assert overflow(d) <= 0  # the wide table scrolls inside its own box
    wrap = d.find_element(By.CSS_SELECTOR, ".table-wrap")
    assert wrap.rect["width"] <= PHONE["width"]
    assert d.execute_script("return arguments[0].scrollWidth > arguments[0].clientWidth", wrap)
    for c in d.find_elements(By.TAG_NAME, "canvas"):
        assert c.rect["x"] + c.rect["width"] <= PHONE["width"]
    screenshot(d, "dashboard-phone.png")
    assert console_errors(d) == []


# ---- --api-key -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def srv_key():
    s = Server(tiny_model(), "-c", "512", "--api-key", "webui-secret")
    yield s
    assert s.stop() == 0, s.stderr()


def test_api_key_prompt(srv_key, browser):
    """The page loads without the key (it holds no data), asks for it on
    the first 401, and sends it as a Bearer token from then on, the live
    view too (same tab: sessionStorage)."""
    d = browser
    d.get(url(srv_key))
    dlg = d.find_element(By.ID, "key-dialog")
    wait(d, lambda: dlg.get_attribute("open") is not None, "the API key dialog")
    assert "requires an API key" in d.find_element(By.ID, "key-why").text
    assert d.switch_to.active_element.get_attribute("id") == "key"  # focus in the key field
    # A wrong key: the next 401 opens the dialog again.
    d.switch_to.active_element.send_keys("wrong", Keys.ENTER)
    wait(d, lambda: dlg.get_attribute("open") is not None, "the dialog again after a wrong key")
    key = d.find_element(By.ID, "key")
    key.clear()
    key.send_keys("webui-secret", Keys.ENTER)
    wait(d, lambda: dlg.get_attribute("open") is None and d.find_element(By.ID, "model").text == "llama-Q8_0",
         "the model id once the key is right")
    record_fetches(d)
    send(d, "Hello with a key")
    reply = wait_reply_done(d, 1)
    check_metrics_line(metrics_of(reply))
    assert sent(d, "/v1/chat/completions")[0]["auth"] == "Bearer webui-secret"
    d.get(url(srv_key, "/dashboard"))
    wait(d, lambda: table(d), "the live view's table with the key")
    assert d.find_element(By.ID, "key-dialog").get_attribute("open") is None
    # Only the expected refusals: the first /v1/models and the wrong key's.
    assert console_errors(d, allow=["status of 401"]) == []


# ---- the real model --------------------------------------------------------------------

@pytest.fixture(scope="module")
def gemma(real_model):
    s = Server(real_model, "-c", "1024", "--parallel", "2")
    yield s
    assert s.stop() == 0, s.stderr()


def test_real_model_paris(gemma, browser):
    """README's first example through the page: greedy, "Paris", arriving in pieces."""
    d = browser
    d.get(url(gemma))
    wait(d, lambda: d.find_element(By.ID, "model").text == "gemma-3-270m-q4_k_m", "the model id")
    set_field(d, "temperature", "0")
    set_field(d, "max_tokens", "12")
    d.execute_script("""
        window.__texts = [];
        new MutationObserver(() => { const r = document.querySelector('#log .msg.assistant .text');
                                     if (r) window.__texts.push(r.textContent); })
          .observe(document.getElementById('log'), {childList: true, subtree: true, characterData: true});""")
    send(d, "What is the capital of France?")
    reply = wait_reply_done(d, 1)
    assert "Paris" in reply.find_element(By.CSS_SELECTOR, ".text").text
    texts = [x for x in d.execute_script("return window.__texts") if x]
    assert len(set(texts)) >= 3, texts  # the text grew piece by piece
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:])), texts
    check_metrics_line(metrics_of(reply))
    assert console_errors(d) == []
