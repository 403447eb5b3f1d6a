"""The service as deployed: a real uvicorn process on 127.0.0.1 (SIGTERM, workers) and the playground in a browser."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from _browser import chromium

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

SRC = str(Path(__file__).resolve().parents[1] / "src")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(emb_dir: Path, *args: str, config: dict[str, Any] | None = None) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    cfg = config or {"mechanisms": {"madlib": {"epsilons": [1, 10]}, "tem": {"epsilons": [10]}}}
    path = emb_dir.parent / f"service-{port}.json"
    path.write_text(json.dumps(cfg))
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [
        sys.executable,
        "-c",
        "from deniable.cli import main; main()",
        "serve",
        "--config",
        str(path),
        "--embedding",
        str(emb_dir),
    ]
    proc = subprocess.Popen(
        [*cmd, "--port", str(port), *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    # every worker prepares its own mechanisms and answers 503 until then; one ready answer
    # speaks for one worker only, so with --workers wait for a run of ready answers, each on a
    # new connection (the workers share the listening socket: a new connection may go to either)
    needed = 20 if "--workers" in args else 1
    ready = 0
    while time.monotonic() < deadline:
        try:
            ready = ready + 1 if httpx.get(url + "/readyz", timeout=1).status_code == 200 else 0
        except httpx.HTTPError:
            ready = 0
        if ready >= needed:
            return proc, url
        if ready:  # ready so far: ask again at once, on a new connection
            continue
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    proc.kill()
    out = proc.communicate(timeout=10)[0].decode(errors="replace")
    raise AssertionError(f"the server did not become ready:\n{out}")


@pytest.fixture(scope="module")
def server(emb_dir: Path) -> Iterator[str]:
    proc, url = start(emb_dir)
    yield url
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=15)


def test_sigterm_stops_within_seconds_even_during_requests(emb_dir: Path) -> None:
    proc, url = start(emb_dir)
    results: list[int] = []

    def load() -> None:
        with httpx.Client(timeout=10) as c:
            for _ in range(200):
                try:
                    results.append(
                        c.post(url + "/v1/privatize", json={"texts": ["hockey game"] * 50, "epsilon": 10}).status_code
                    )
                except httpx.HTTPError:
                    return

    threads = [threading.Thread(target=load, daemon=True) for _ in range(3)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert time.monotonic() - t0 < 10
    for t in threads:
        t.join(timeout=15)
    assert results and set(results) <= {200, 503}
    out = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
    assert "hockey" not in out


def test_two_workers_serve(emb_dir: Path) -> None:
    proc, url = start(emb_dir, "--workers", "2")
    try:
        with httpx.Client(timeout=10) as c:
            codes = {
                c.post(url + "/v1/privatize", json={"texts": ["hockey"], "epsilon": 1}).status_code for _ in range(10)
            }
        assert codes == {200}
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_busy_port_is_an_error_naming_it_before_serving(emb_dir: Path, workers: str) -> None:
    # issue 40: "serving on ..." was printed, then the server failed to bind
    path = emb_dir.parent / "service-busy.json"
    path.write_text(json.dumps({"mechanisms": {"madlib": {"epsilons": [1]}}}))
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        cmd = [sys.executable, "-c", "from deniable.cli import main; main()", "serve", "--config", str(path)]
        cmd += ["--embedding", str(emb_dir), "--port", port, "--workers", workers]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    out = done.stdout + done.stderr
    assert done.returncode == 2, out
    assert "--port" in out and port in out and "serving on" not in out and "Traceback" not in out
    bad = subprocess.run([*cmd[:-4], "--host", "no-such-host.invalid"], env=env, capture_output=True, text=True)
    assert bad.returncode == 2 and "--host" in bad.stderr and "Traceback" not in bad.stderr + bad.stdout


def browser() -> Any:
    return chromium()


def test_playground_page_in_a_browser(server: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import Select, WebDriverWait

    driver = browser()
    try:
        driver.get(server + "/")
        wait = WebDriverWait(driver, 20)
        wait.until(lambda d: Select(d.find_element(By.ID, "mechanism")).options)
        # it opens at a readable epsilon (madlib offers 1 and 10: not 1), and says what epsilon means
        assert driver.find_element(By.ID, "epsilon").get_attribute("value") == "10"
        assert "more privacy" in driver.find_element(By.ID, "epsilon-help").text
        Select(driver.find_element(By.ID, "mechanism")).select_by_value("tem")
        text = driver.find_element(By.ID, "text")
        text.clear()
        text.send_keys("The hockey game was great, and the rocket launch too.")
        driver.find_element(By.ID, "run").click()
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#output .w"))
        words = driver.find_elements(By.CSS_SELECTOR, "#output .w")
        assert len(words) == 10 and "epsilon" in driver.find_element(By.ID, "guarantee").text
        words[1].click()
        wait.until(ec.text_to_be_present_in_element((By.ID, "explain"), "N_w"))
        assert "likely output" in driver.find_element(By.ID, "explain").text
        driver.save_screenshot("/tmp/playground.png")
        # epsilon is a select of the offered levels (no invalid value to type): an over-long text errs
        driver.execute_script("document.getElementById('text').value = 'word '.repeat(3000)")
        driver.find_element(By.ID, "run").click()
        wait.until(ec.text_to_be_present_in_element((By.ID, "error"), "too long"))
        assert driver.find_element(By.ID, "output").text == ""
    finally:
        driver.quit()
