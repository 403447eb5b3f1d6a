"""Shared by the on-device tests (tests/test_device_*.py, tests/test_js_*.py): Node, the JS
harness (clients/js/tools/harness.mjs) and small prepared web artefacts."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
HARNESS = ROOT / "clients" / "js" / "tools" / "harness.mjs"
#: The test vocabulary: the most frequent words of the default GloVe (a few thousand: fast tests).
VOCAB = 3000


def node_path() -> str:
    node = shutil.which("node") or shutil.which("nodejs")
    if node is None:
        pytest.skip("needs Node (Debian's nodejs: apt-get install -y nodejs)")
    return node


class Harness:
    """One Node process answering JSON lines (kept for the test module)."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [node_path(), str(HARNESS)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, encoding="utf-8"
        )

    def __call__(self, op: str, **request: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"op": op, **request}) + "\n")
        self.proc.stdin.flush()
        out: dict[str, Any] = json.loads(self.proc.stdout.readline())
        assert "error" not in out, out.get("error")
        return out

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=10)


def b64(arr: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(arr).tobytes()).decode()


def unb64(s: str, dtype: Any) -> np.ndarray:
    return np.frombuffer(base64.b64decode(s), dtype=dtype)


@cache
def small_embedding() -> Any:
    from deniable import load_embedding

    return load_embedding(vocab_size=VOCAB)


@cache
def mechanisms() -> dict[str, Any]:
    """A prepared brr (256-bit SimHash codes) and madlib (exact decode) on the test vocabulary."""
    from deniable.mechanisms import make_mechanism

    emb = small_embedding()
    brr = make_mechanism("brr", emb, 1.0, bits=256, binarizer="simhash", show_progress=False).prepare()
    madlib = make_mechanism("madlib", emb, 1.0, index="exact").prepare()
    return {"brr": brr, "madlib": madlib}


def export(folder: Path) -> dict[str, Path]:
    """Write both web artefacts under ``folder``; ``{"brr": dir, "madlib": dir}``."""
    from deniable.binarize.device import save_web_artefact, web_artefact_of

    out = {}
    for name, mech in mechanisms().items():
        save_web_artefact(folder / name, web_artefact_of(mech))
        out[name] = folder / name
    return out


#: What the test service offers (both device mechanisms, two epsilons each).
OFFER = {
    "brr": {"epsilons": [1, 3], "options": {"bits": 256, "binarizer": "simhash"}},
    "madlib": {"epsilons": [5, 10], "options": {"index": "exact"}},
}


@cache
def service_app() -> Any:
    """The service on the test vocabulary, built once per test session (start-up prepares every instance)."""
    pytest.importorskip("fastapi")
    from deniable.service import create_app, load_config

    mechanisms()  # the codes trained once, in this process's cache
    return create_app(small_embedding(), load_config(environ={}, mechanisms=OFFER))
