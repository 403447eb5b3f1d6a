"""The JavaScript client's WebAssembly kernels are what their source builds (reproducible).

``clients/js/src/kernels.wasm.js`` inlines the wasm that ``clients/js/tools/build_wasm.sh``
builds from ``clients/js/wasm/kernels.c`` with Debian's clang-14 and lld-14; this test
rebuilds it and compares byte for byte (skipped where that toolchain is missing: CI installs
it with ``apt-get install clang lld``). That the kernels give the typed-array kernels' results
is clients/js/test/kernels.test.js; that those match the Python decoders is
tests/test_device_decode.py.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

CLIENT = Path(__file__).resolve().parents[1] / "clients" / "js"


@pytest.mark.skipif(
    shutil.which("clang-14") is None or shutil.which("wasm-ld") is None, reason="needs clang-14 and lld (wasm-ld)"
)
def test_kernels_wasm_is_built_from_source() -> None:
    got = subprocess.run(
        ["sh", str(CLIENT / "tools" / "build_wasm.sh"), "--check"], capture_output=True, text=True, timeout=120
    )
    assert got.returncode == 0, got.stdout + got.stderr
