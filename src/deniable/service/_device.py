"""The service's side of privatizing on the device (clients/js, docs/device.md).

:func:`install_device_routes` adds to the application:

- ``GET /v1/device``: the web artefacts this service offers (one per offered ``brr`` /
  ``madlib`` code book or vector set, and for madlib also one over its 8-bit embedding of the
  most frequent words: :func:`deniable.mechanisms.laplace.quantized_madlib`), each with its
  content address, fixed URL, ``vectors`` (madlib: ``float32`` / ``uint8``) and ``default``
  (the one a device downloads: the exact one within 16 MB, else the 8-bit one);
- ``GET /v1/device/{id}/{file}``: the files of :func:`deniable.binarize.device.web_artefact`,
  the same bytes ``deniable export-device --format web`` writes, with immutable cache
  headers (the URL is the content address: a new artefact gets a new id);
- ``GET /v1/device/client/{file}``: the JavaScript client (``deniable.js``, ``unicode.js``,
  ``kernels.wasm.js``, the ``.d.ts``);
- ``POST /v1/decode``: split mode. The device sends only noisy codes (BRR) or noisy float32
  vectors (madlib), base64, never a word; the service decodes them through the offered
  mechanism's own decoder (``HammingDecoder.decode``, ``MultivariateLaplace.decode``: the
  same code the Python mechanisms use; an 8-bit madlib artefact's: madlib over those 8-bit
  vectors, decoded exactly) and returns word ids and words. Decoding is
  post-processing of an already private value: no privacy cost. Nothing is logged. With
  the operator's ``prior`` (never a client's) it is that prior's posterior mode at the
  ``epsilon`` the body names.

A device downloads an artefact whole; no route serves a part of one (a per-word fetch
would reveal the word).

May import: FastAPI (the 'serve' extra), the library (binarize.device, _random), ``._errors``
and ``._state`` (for its type).
"""

from __future__ import annotations

import base64
import binascii
import functools
import threading
from importlib.resources import files as package_files
from typing import TYPE_CHECKING, Any

import numpy as np
from fastapi import Request  # this module is imported by create_app only (the 'serve' extra is there)
from fastapi.responses import JSONResponse, Response

from ._errors import error, not_ready

if TYPE_CHECKING:
    from collections.abc import Callable

    from fastapi import FastAPI

    from ._state import State

__all__ = ["CLIENT_FILES", "DECODE_PATH", "install_device_routes"]

DECODE_PATH = "/v1/decode"
#: The client's files served at /v1/device/client/<name> (from clients/js/src, shipped with the package).
CLIENT_FILES = {
    "deniable.js": "text/javascript",
    "unicode.js": "text/javascript",
    "kernels.wasm.js": "text/javascript",  # the WebAssembly SIMD decode kernels (clients/js/wasm/kernels.c)
    "deniable.d.ts": "text/plain",
}
_IMMUTABLE = "public, max-age=31536000, immutable"


class _Artefacts:
    """The web artefacts of the offered mechanisms, built once on first request (public data only)."""

    def __init__(self, state: Any) -> None:
        self.state = state
        self.lock = threading.Lock()
        self.by_id: dict[str, tuple[Any, dict[str, bytes]]] | None = None
        #: artefact id -> epsilon -> the offered instance (a decode with a non-uniform prior depends on epsilon)
        self.by_epsilon: dict[str, dict[float, Any]] = {}
        #: the artefact a device downloads by default, per mechanism and prior: the exact one when it
        #: fits DEVICE_BUDGET_BYTES, else madlib's 8-bit one
        self.defaults: set[str] = set()

    def get(self) -> dict[str, tuple[Any, dict[str, bytes]]]:
        if self.by_id is None:
            from ..binarize.device import (
                DEVICE_BUDGET_BYTES,
                QUANTIZED_VOCAB,
                web_artefact_id,
                web_artefact_of,
            )
            from ..embedding import quantize
            from ..mechanisms.laplace import quantized_madlib

            with self.lock:
                if self.by_id is None:
                    found: dict[str, tuple[Any, dict[str, bytes]]] = {}
                    seen: dict[tuple[Any, ...], str] = {}
                    quantized: dict[int, Any] = {}  # id(embedding) -> its 8-bit subset (one for every epsilon)
                    pairs: dict[str, str] = {}  # float32 madlib artefact id -> its 8-bit sibling's

                    def add(key: tuple[Any, ...], mech: Any, files: Callable[[], dict[str, bytes]]) -> str:
                        if key not in seen:
                            built = files()
                            seen[key] = web_artefact_id(built)
                            found.setdefault(seen[key], (mech, built))
                        self.by_epsilon.setdefault(seen[key], {}).setdefault(float(mech.epsilon), mech)
                        return seen[key]

                    for mech, _ in self.state.mechanisms.values():
                        if mech.name not in ("brr", "madlib") or getattr(mech, "joint_decode", False):
                            continue  # a contextual prior (ngram:PATH) decodes whole texts: no device artefact
                        # one artefact per code book / vector set and decode prior (every epsilon shares it)
                        key = (
                            mech.name,
                            id(mech.embedding),
                            *(getattr(mech, a, None) for a in ("bits", "binarizer", "seed", "prior")),
                        )
                        exact = add(key, mech, functools.partial(web_artefact_of, mech))
                        if mech.name != "madlib":
                            continue
                        # madlib also over its 8-bit embedding (docs/device.md): the same words from the
                        # device, /v1/decode and the Python library; the default where float32 is too big
                        emb = mech.embedding
                        if id(emb) not in quantized:
                            quantized[id(emb)] = quantize(emb.subset(QUANTIZED_VOCAB))
                        small = quantized_madlib(mech, quantized=quantized[id(emb)])
                        if small is not None:
                            pairs[exact] = add(("uint8", *key), small, functools.partial(web_artefact_of, small))
                    for aid in found:
                        if aid in pairs.values():
                            continue
                        big = sum(len(b) for b in found[aid][1].values()) > DEVICE_BUDGET_BYTES
                        self.defaults.add(pairs[aid] if big and aid in pairs else aid)
                    # the 8-bit ones first (the small download), then the exact ones in the offer's order
                    small_ids = set(pairs.values())
                    self.by_id = dict(sorted(found.items(), key=lambda kv: kv[0] not in small_ids))
        return self.by_id


def install_device_routes(app: FastAPI, state: State) -> None:
    """Add the device routes (see the module docstring) to ``app``, built by ``create_app``.

    The decode is work: ``create_app`` gives :data:`DECODE_PATH` a concurrency slot like ``/v1/privatize``.
    """
    import anyio
    from fastapi import HTTPException

    from .._random import secure_generator

    artefacts = _Artefacts(state)

    def ready() -> dict[str, tuple[Any, dict[str, bytes]]]:
        if not state.ready.is_set():
            raise not_ready()
        return artefacts.get()

    @app.get("/v1/device", tags=["device"], response_model=None)
    def device_index() -> JSONResponse:
        """The web artefacts offered for on-device privatization, and the client's URL."""
        import json

        out = []
        for aid, (mech, files) in ready().items():
            manifest = json.loads(files["manifest.json"])
            entry = {
                "id": aid,
                "mechanism": mech.name,
                "url": f"/v1/device/{aid}/",
                "vocab_size": manifest["vocab_size"],
                "prior": manifest.get("prior", "uniform"),  # the decode's prior (issue 44)
                "bytes": sum(len(b) for b in files.values()),
                "default": aid in artefacts.defaults,  # what a device downloads unless told otherwise
            }
            if mech.name == "madlib":  # float32 (the offered mechanism itself) or uint8 (its 8-bit embedding)
                entry["vectors"] = "uint8" if manifest.get("dtype") == "uint8" else "float32"
                if "max_error" in manifest:
                    entry["max_error"] = manifest["max_error"]
            out.append(entry)
        body = {"artefacts": out, "client": "/v1/device/client/deniable.js", "decode": DECODE_PATH}
        return JSONResponse(body, headers={"Cache-Control": "no-cache"})

    @app.get("/v1/device/client/{name}", tags=["device"], include_in_schema=False, response_model=None)
    def client_file(name: str) -> Response:
        if name not in CLIENT_FILES:
            raise HTTPException(404, [{"loc": ["path"], "msg": "no such file", "type": "not_found"}])
        data = package_files(__package__).joinpath("static", "client", name).read_bytes()
        return Response(data, media_type=CLIENT_FILES[name], headers={"Cache-Control": "no-cache"})

    @app.get("/v1/device/{artefact}/{name}", tags=["device"], response_model=None)
    def artefact_file(artefact: str, name: str) -> Response:
        """One whole file of a web artefact: the bytes `export-device --format web` writes, cached forever."""
        found = ready().get(artefact)
        if found is None or name not in found[1]:
            raise HTTPException(404, [{"loc": ["path"], "msg": "no such artefact file", "type": "not_found"}])
        kind = "application/json" if name.endswith(".json") else "application/octet-stream"
        if name.endswith(".txt"):
            kind = "text/plain; charset=utf-8"
        return Response(found[1][name], media_type=kind, headers={"Cache-Control": _IMMUTABLE, "ETag": f'"{artefact}"'})

    @app.post(DECODE_PATH, tags=["device"], response_model=None)
    async def decode(request: Request) -> JSONResponse:
        """Split mode: decode noisy codes (brr) or noisy float32 vectors (madlib) to words; never receives a word.

        Body: ``{"artefact": id, "codes": base64}`` (packed codes, ``bits / 8`` bytes each) or
        ``{"artefact": id, "vectors": base64}`` (float32 little-endian, ``dim`` each), and
        ``"epsilon"`` (required where the operator set a non-uniform ``prior``: its posterior decode
        depends on epsilon; otherwise optional, any number > 0: the JavaScript client always sends it).
        Answer: ``{"ids": [...], "words": [...]}``, one per row.
        """
        try:
            body = await request.json()
        except ValueError:
            raise error(422, "body", "not valid JSON", "json_invalid") from None
        mech, noisy = _noisy_rows(body, ready, state.config.max_tokens)
        mech = _decoder_at_epsilon(mech, body, artefacts.by_epsilon.get(body["artefact"], {}))

        def work() -> np.ndarray:
            if mech.name == "brr":
                return mech.decode_codes(noisy, secure_generator())  # the operator's prior, if any
            return mech.decode(noisy)

        ids = await anyio.to_thread.run_sync(work)
        return JSONResponse({"ids": [int(i) for i in ids], "words": mech.embedding.words(ids)})


def _decoder_at_epsilon(mech: Any, body: dict[str, Any], by_epsilon: dict[float, Any]) -> Any:
    """The offered instance that decodes: the one at the body's ``epsilon`` (public: the device chose it).

    A nearest-neighbour decode is the same at every epsilon: ``epsilon`` is optional and, when
    sent (the JavaScript client always sends it), only checked to be a number > 0. The posterior
    decode of the operator's non-uniform ``prior`` depends on it: required, and one of the offered.
    """
    eps = body.get("epsilon")
    uniform = getattr(mech, "prior", "uniform") == "uniform"
    number = isinstance(eps, int | float) and not isinstance(eps, bool) and np.isfinite(eps) and eps > 0
    if eps is None:
        if uniform:
            return mech
        raise error(422, "epsilon", "the epsilon the device used (this decode's prior depends on it)", "missing")
    if uniform and number:
        return mech
    found = by_epsilon.get(float(eps)) if number else None
    if found is None:
        offered = ", ".join(f"{e:g}" for e in sorted(by_epsilon))
        raise error(422, "epsilon", f"an offered epsilon of this artefact ({offered})", "not_offered")
    return found


def _noisy_rows(
    body: Any, ready: Callable[[], dict[str, tuple[Any, dict[str, bytes]]]], max_tokens: int
) -> tuple[Any, np.ndarray]:
    """The offered mechanism a decode body names and its noisy rows (codes or float32 vectors); 4xx otherwise.

    ``ready()`` gives the offered artefacts (503 before the service is ready); at most
    ``max_tokens`` rows (413 beyond).
    """
    if not isinstance(body, dict) or set(body) - {"artefact", "codes", "vectors", "epsilon"}:
        raise error(422, "body", "an object with artefact and codes or vectors (and epsilon)", "invalid")
    name = body.get("artefact")
    found = ready().get(name) if isinstance(name, str) else None
    if found is None:
        raise error(422, "artefact", "not an offered artefact (see /v1/device)", "not_offered")
    mech = found[0]
    field = "codes" if mech.name == "brr" else "vectors"
    raw = body.get(field)
    if not isinstance(raw, str) or (set(body) & {"codes", "vectors"}) != {field}:
        raise error(422, field, f"base64 {field} for this artefact", "invalid")
    try:
        data = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        raise error(422, field, "not base64", "invalid") from None
    if mech.name == "brr":
        row = int(mech.bits) // 8
        rows = np.frombuffer(data, dtype=np.uint8)
    else:
        row = int(mech.embedding.dim) * 4
        rows = np.frombuffer(data, dtype="<f4")
    if not data or len(data) % row:
        raise error(422, field, f"a whole number (>= 1) of rows of {row} bytes", "invalid")
    n = len(data) // row
    if n > max_tokens:
        raise error(413, field, f"more than {max_tokens:,} rows in one request", "too_many_tokens")
    if mech.name == "brr":
        noisy = rows.reshape(n, row)
    else:
        noisy = rows.reshape(n, -1).astype(np.float32)
        if not np.isfinite(noisy).all():
            raise error(422, field, "finite numbers", "invalid")
    return mech, noisy
