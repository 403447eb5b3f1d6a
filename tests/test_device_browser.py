"""The playground in Debian's Chromium.

The "on this device" modes: the page privatizes with the JavaScript client, and the browser's
own network log (CDP performance log) shows that no request URL or body leaving the page holds
any input word. The server mode is the twin: there the same check must find the words (so the
check can fail).

The page itself (issue 42): all three modes clicked through with the privacy level chosen from
the offered ones (a select: no free-text epsilon), its strength and the guarantee stated in
plain words with a working link, errors shown in place as a sentence (never the service's raw
field message) without moving the result, and no console error or failed request (favicon)."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from _browser import chromium

pytest.importorskip("fastapi")
uvicorn = pytest.importorskip("uvicorn")
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (dev extra)")

from _device_helpers import mechanisms, small_embedding  # noqa: E402

#: The test service's offer: both device mechanisms, each with a near-identity epsilon (its output
#: shows the words were found) beside two ordinary ones.
OFFER = {
    "brr": {"epsilons": [1, 3, 1000], "options": {"bits": 256, "binarizer": "simhash"}},
    "madlib": {"epsilons": [5, 10, 1000000], "options": {"index": "exact"}},
}


def playground_app() -> Any:
    from deniable.service import create_app, load_config

    mechanisms()  # the codes trained once, in this process's cache
    return create_app(small_embedding(), load_config(environ={}, mechanisms=OFFER))


#: Input words of four letters or more (a shorter one could appear by chance inside base64).
TEXT = "Hockey players celebrated their championship, Zqxjvwkt said. Police arrested eleven people yesterday."


def input_words() -> set[str]:
    words = set(re.findall(r"[^\W_]{4,}", TEXT))
    return words | {w.lower() for w in words}


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    srv = uvicorn.Server(uvicorn.Config(playground_app(), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not srv.started and time.monotonic() < deadline:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    srv.should_exit = True
    thread.join(timeout=10)


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    d = chromium(performance_log=True)
    yield d
    d.quit()


def requests_sent(driver: Any) -> list[tuple[str, str, str]]:
    """(method, url, body) of every request the page sent since the last call (CDP Network events)."""
    out = []
    for entry in driver.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg.get("method") != "Network.requestWillBeSent":
            continue
        req = msg["params"]["request"]
        body = req.get("postData", "")
        if req.get("hasPostData") and not body:
            try:
                body = driver.execute_cdp_cmd("Network.getRequestPostData", {"requestId": msg["params"]["requestId"]})[
                    "postData"
                ]
            except Exception:  # noqa: BLE001 - a body we cannot read is a failure below
                body = "<unreadable body>"
        out.append((req["method"], req["url"], body))
    return out


def privatize(driver: Any, server: str, mechanism: str, where: str, epsilon: float) -> str:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    driver.get(server + "/")
    wait = WebDriverWait(driver, 30)
    wait.until(lambda d: Select(d.find_element(By.ID, "mechanism")).options)
    Select(driver.find_element(By.ID, "mechanism")).select_by_value(mechanism)
    Select(driver.find_element(By.ID, "where")).select_by_value(where)
    Select(driver.find_element(By.ID, "epsilon")).select_by_value(json.dumps(epsilon))
    text = driver.find_element(By.ID, "text")
    text.clear()
    text.send_keys(TEXT)
    requests_sent(driver)  # forget the page's own loading
    driver.find_element(By.ID, "run").click()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#output .w") or d.find_element(By.ID, "error").text)
    assert driver.find_element(By.ID, "error").text == ""
    return str(driver.find_element(By.ID, "output").text)


def leaks(sent: list[tuple[str, str, str]]) -> list[str]:
    return sorted({w for _, url, body in sent for w in input_words() if w in url or w in body})


@pytest.mark.parametrize(
    ("mechanism", "where"), [("brr", "local"), ("brr", "split"), ("madlib", "local"), ("madlib", "split")]
)
def test_on_device_modes_send_no_input_word(driver: Any, server: str, mechanism: str, where: str) -> None:
    eps = 1000 if mechanism == "brr" else 1000000  # near-identity: the output shows the words were found
    out = privatize(driver, server, mechanism, where, eps)
    assert "Hockey players" in out and "championship" in out and "." in out
    sent = requests_sent(driver)
    assert leaks(sent) == []
    paths = [url.split("/", 3)[3] for _, url, _ in sent]
    assert not any(p.startswith(("v1/privatize", "v1/explain", "privatize")) for p in paths)
    posts = [p for (m, _, _), p in zip(sent, paths, strict=True) if m == "POST"]
    assert posts == (["v1/decode"] if where == "split" else [])
    # the artefact was downloaded whole (manifest and files) on this first load, not per word
    gets = [p for (m, _, _), p in zip(sent, paths, strict=True) if m == "GET" and p.startswith("v1/device/")]
    assert len(gets) <= 6


def test_the_check_finds_words_in_server_mode(driver: Any, server: str) -> None:
    """The twin: the server mode sends the text, and the same check sees it."""
    privatize(driver, server, "madlib", "server", 5)
    assert "championship" in leaks(requests_sent(driver))


# -- the page itself (issue 42) --


def page_events(driver: Any) -> tuple[list[tuple[str, int]], list[str]]:
    """(url, status) of every response the page received, and the URLs it failed to load, since the last call."""
    responses, failed, urls = [], [], {}
    for entry in driver.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        params = msg.get("params", {})
        if msg.get("method") == "Network.requestWillBeSent":
            urls[params["requestId"]] = params["request"]["url"]
        elif msg.get("method") == "Network.responseReceived":
            responses.append((params["response"]["url"], int(params["response"]["status"])))
        elif msg.get("method") == "Network.loadingFailed":
            failed.append(urls.get(params["requestId"], params["requestId"]))
    return responses, failed


def console_errors(driver: Any) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def open_page(driver: Any, server: str) -> Any:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    driver.get(server + "/")
    wait = WebDriverWait(driver, 30)
    wait.until(lambda d: Select(d.find_element(By.ID, "mechanism")).options)
    wait.until(lambda d: Select(d.find_element(By.ID, "epsilon")).options)
    return wait


def offered_privacy(server: str, mechanism: str, epsilon: float) -> dict[str, Any]:
    from urllib.request import urlopen

    with urlopen(server + "/v1/mechanisms") as r:
        offer = json.load(r)["mechanisms"][mechanism]
    return dict(next(p for p in offer["privacy"] if p["offered"] == epsilon))


def offered_unchanged(server: str, mechanism: str, epsilon: float) -> float:
    return float(offered_privacy(server, mechanism, epsilon)["expected_unchanged"])


def test_playground_clicks_through_three_modes(driver: Any, server: str, tmp_path: Any) -> None:
    from urllib.request import urlopen

    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    console_errors(driver)
    page_events(driver)  # forget what came before
    wait = open_page(driver, server)
    # the privacy level is a select of exactly the offered epsilons: no value outside the offer can be made
    eps = driver.find_element(By.ID, "epsilon")
    assert eps.tag_name == "select"
    assert not driver.find_elements(By.CSS_SELECTOR, "input#epsilon, input[list]")
    values = [json.loads(str(o.get_attribute("value"))) for o in Select(eps).options]
    assert values == OFFER["madlib"]["epsilons"]
    # the guarantee in plain words, with a link to a page the service serves
    form = driver.find_element(By.ID, "form").text
    assert "hard to tell apart from the words near it in the embedding" in form and "d_euclidean" not in form
    link = str(driver.find_element(By.ID, "guarantee-link").get_attribute("href"))
    assert link.endswith("/static/guarantee.html#madlib")
    with urlopen(link.split("#")[0]) as r:
        assert r.status == 200 and "the closer two words, the harder" in r.read().decode()
    for where in ("server", "local", "split"):
        Select(driver.find_element(By.ID, "where")).select_by_value(where)
        Select(driver.find_element(By.ID, "epsilon")).select_by_value("10")
        # the strength beside the control, in the service's own numbers, and no CLI command for a browser user
        share = round(100 * offered_unchanged(server, "madlib", 10))
        help_text = driver.find_element(By.ID, "epsilon-help").text
        assert f"About {share}% of the words of a typical text come out unchanged" in help_text
        # beside it, the attacker's recovery (issue 41), in the service's own numbers
        recovered = round(100 * offered_privacy(server, "madlib", 10)["recovered"])
        assert f"An attacker who knows the mechanism recovers about {recovered}% of the words (" in help_text
        assert "deniable " not in help_text and "--" not in help_text
        if where != "server":  # the artefact's size is said before anything is downloaded
            wait.until(lambda d: "MB" in d.find_element(By.ID, "device-note").text)
            note = driver.find_element(By.ID, "device-note").text
            said = "downloads the madlib vocabulary once" if where == "local" else "vocabulary (0.6 MB) is loaded"
            assert said in note
        driver.execute_script("document.getElementById('output').textContent = ''")
        driver.find_element(By.ID, "run").click()
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#output .w") or d.find_element(By.ID, "error").text)
        assert driver.find_element(By.ID, "error").text == ""
        summary = driver.find_element(By.ID, "guarantee").text
        assert "at epsilon 10" in summary and "changed" in summary and "Not protected" in summary
        assert ("on this device" in summary) == (where != "server")
        driver.save_screenshot(str(tmp_path / f"playground-{where}.png"))
    assert (tmp_path / "playground-split.png").stat().st_size > 0
    responses, failed = page_events(driver)
    assert responses and all(status < 400 for _, status in responses), [r for r in responses if r[1] >= 400]
    assert failed == []
    assert not any("favicon" in url for url, _ in responses)  # the icon is inline: never requested
    assert console_errors(driver) == []


def test_playground_errors_in_place(driver: Any, server: str, tmp_path: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    wait = open_page(driver, server)

    def layout() -> tuple[int, int]:
        out = driver.find_element(By.ID, "output").rect
        return int(out["y"]), int(driver.find_element(By.ID, "guarantee").rect["y"])

    def run_and_read() -> str:
        driver.find_element(By.ID, "run").click()
        wait.until(lambda d: d.find_element(By.ID, "error").text)
        return str(driver.find_element(By.ID, "error").text)

    before = layout()
    # a text over the service's words-per-text limit (2,048): a sentence with the limit, in place
    driver.execute_script("document.getElementById('text').value = 'word '.repeat(2100)")
    msg = run_and_read()
    assert "too long" in msg and "2,048" in msg and "Split it" in msg
    assert layout() == before  # the error's room was reserved: nothing moved
    driver.save_screenshot(str(tmp_path / "playground-error.png"))
    assert driver.find_element(By.ID, "output").text == ""
    # a level the service does not offer (only a tampered page can send one): its 422 as a sentence,
    # never pydantic's "epsilon: Value error, epsilon: not offered (see /v1/mechanisms)"
    driver.execute_script(
        "const s = document.getElementById('epsilon'); const o = document.createElement('option');"
        "o.value = '7'; s.appendChild(o); s.value = '7';"
        "document.getElementById('text').value = 'The hockey game was great.';"
    )
    msg = run_and_read()
    assert msg == "This privacy level is not offered by the service. Reload the page to see the current offer."
    assert layout() == before
    # choosing another level and mode moves nothing either (the strength and device lines keep their room)
    Select(driver.find_element(By.ID, "epsilon")).select_by_value("5")
    Select(driver.find_element(By.ID, "where")).select_by_value("local")
    wait.until(lambda d: "MB" in d.find_element(By.ID, "device-note").text)
    assert layout() == before
    # the guarantee's page, linked from the form line, opens at the mechanism's section
    driver.get(server + "/static/guarantee.html#madlib")
    assert "the closer two words, the harder" in driver.find_element(By.TAG_NAME, "body").text
    driver.save_screenshot(str(tmp_path / "guarantee.png"))


def test_madlib_on_the_device_offers_8bit_vectors(driver: Any, server: str, tmp_path: Any) -> None:
    """Issue 43: the 8-bit artefact (madlib over its quantized embedding) is chosen in the vectors select;
    the guarantee line says so, and nothing but the artefact is fetched (no input word anywhere)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    wait = open_page(driver, server)
    box = driver.find_element(By.ID, "vectors-box")
    assert box.value_of_css_property("visibility") == "hidden"  # on the server: no choice to make
    Select(driver.find_element(By.ID, "where")).select_by_value("local")
    wait.until(lambda d: d.find_element(By.ID, "vectors-box").value_of_css_property("visibility") == "visible")
    sel = Select(driver.find_element(By.ID, "vectors"))
    labels = [o.text for o in sel.options]
    assert len(labels) == 2 and any(t.startswith("8-bit") for t in labels) and any("float32" in t for t in labels)
    # the test vocabulary's float32 artefact fits 16 MB: it is the default; choose the 8-bit one
    assert "float32" in sel.first_selected_option.text
    sel.select_by_index(next(i for i, t in enumerate(labels) if t.startswith("8-bit")))
    wait.until(lambda d: "0.2 MB" in d.find_element(By.ID, "device-note").text)
    Select(driver.find_element(By.ID, "epsilon")).select_by_value("1000000")
    text = driver.find_element(By.ID, "text")
    text.clear()
    text.send_keys(TEXT)
    requests_sent(driver)
    driver.find_element(By.ID, "run").click()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#output .w") or d.find_element(By.ID, "error").text)
    assert driver.find_element(By.ID, "error").text == ""
    assert "Hockey players" in driver.find_element(By.ID, "output").text
    summary = driver.find_element(By.ID, "guarantee").text
    assert "8-bit vectors of the 3,000 most common words" in summary
    assert "the guarantee holds exactly in these vectors' distances" in summary
    driver.save_screenshot(str(tmp_path / "playground-8bit.png"))
    sent = requests_sent(driver)
    assert leaks(sent) == []
    assert [m for m, _, _ in sent if m == "POST"] == []
    assert any("qvectors.bin" in url for _, url, _ in sent)
