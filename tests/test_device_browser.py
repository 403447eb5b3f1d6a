"""The playground's "on this device" modes in Debian's Chromium: the page privatizes with the
JavaScript client, and the browser's own network log (CDP performance log) shows that no
request URL or body leaving the page holds any input word. The server mode is the twin:
there the same check must find the words (so the check can fail)."""

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

from _device_helpers import service_app  # noqa: E402

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
    srv = uvicorn.Server(uvicorn.Config(service_app(), host="127.0.0.1", port=port, log_level="warning"))
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


def privatize(driver: Any, server: str, mechanism: str, where: str, epsilon: str) -> str:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    driver.get(server + "/")
    wait = WebDriverWait(driver, 30)
    wait.until(lambda d: Select(d.find_element(By.ID, "mechanism")).options)
    Select(driver.find_element(By.ID, "mechanism")).select_by_value(mechanism)
    Select(driver.find_element(By.ID, "where")).select_by_value(where)
    eps = driver.find_element(By.ID, "epsilon")
    eps.clear()
    eps.send_keys(epsilon)
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
    eps = "1000" if mechanism == "brr" else "1000000"  # near-identity: the output shows the words were found
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
    privatize(driver, server, "madlib", "server", "5")
    assert "championship" in leaks(requests_sent(driver))
