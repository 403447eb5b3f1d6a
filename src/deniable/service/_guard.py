"""One ASGI middleware in front of the application: API keys, body size, concurrency.

Order, per HTTP request to a protected path:

1. **API key** (when keys are configured): ``Authorization: Bearer <key>`` or
   ``X-API-Key: <key>``; none gives 401, a wrong one 403. The key's SHA-256 digest is
   compared with every accepted digest in constant time (``hmac.compare_digest``).
2. **Concurrency** (work paths only): beyond ``max_concurrency`` requests in progress,
   503 with ``Retry-After`` at once (nothing is read or queued).
3. **Body size**: a ``Content-Length`` above the limit is refused before reading; the
   body is then read counting bytes and refused (413) as soon as it passes the limit,
   before anything parses it. The application gets the buffered body, then the
   connection's later messages (so it can see a client that left).

Nothing here logs; the answers name the limit, never a value the client sent.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: Paths anyone may read (no key, no concurrency slot): probes, the page, the offer and the schema.
PUBLIC_PATHS = frozenset(
    {"/", "/livez", "/readyz", "/health", "/docs", "/redoc", "/openapi.json", "/v1/mechanisms", "/mechanisms"}
)


async def send_json(send: Send, status: int, body: dict[str, Any], headers: list[tuple[bytes, bytes]] = ()) -> None:  # type: ignore[assignment]
    payload = json.dumps(body).encode()
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()), *headers]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": payload})


def _error(loc: str, msg: str, kind: str) -> dict[str, Any]:
    return {"detail": [{"loc": [loc], "msg": msg, "type": kind}]}


class Guard:
    """The middleware (see the module docstring)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_body_bytes: int,
        max_concurrency: int,
        retry_after_s: int,
        work_paths: frozenset[str],
        api_key_digests: tuple[bytes, ...] = (),
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.max_concurrency = max_concurrency
        self.retry_after_s = retry_after_s
        self.work_paths = work_paths
        self.digests = api_key_digests
        self.active = 0  # one event loop per process: no lock needed between awaits

    def _key_status(self, scope: Scope) -> int | None:
        """None when allowed, else 401 (no key) or 403 (wrong key)."""
        if not self.digests:
            return None
        given: bytes | None = None
        for name, value in scope.get("headers", ()):
            if name == b"authorization" and value[:7].lower() == b"bearer ":
                given = value[7:].strip()
            elif name == b"x-api-key":
                given = value.strip()
        if not given:
            return 401
        digest = hashlib.sha256(given).digest()
        ok = False
        for accepted in self.digests:  # every digest is compared: the time does not say which matched
            ok |= hmac.compare_digest(digest, accepted)
        return None if ok else 403

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        if path in PUBLIC_PATHS or path.startswith("/static/"):
            await self.app(scope, receive, send)
            return
        status = self._key_status(scope)
        if status is not None:
            msg = "an API key is needed (Authorization: Bearer <key>)" if status == 401 else "the API key is not valid"
            headers = [(b"www-authenticate", b"Bearer")] if status == 401 else []
            await send_json(send, status, _error("header", msg, "unauthorized"), headers)
            return
        work = path in self.work_paths
        if work and self.active >= self.max_concurrency:
            retry = [(b"retry-after", str(self.retry_after_s).encode())]
            await send_json(send, 503, _error("server", "busy: too many requests in progress; retry", "busy"), retry)
            return
        if work:
            self.active += 1
        try:
            await self._with_body(scope, receive, send)
        finally:
            if work:
                self.active -= 1

    async def _with_body(self, scope: Scope, receive: Receive, send: Send) -> None:
        limit = self.max_body_bytes
        too_large = _error("body", f"the request body is larger than {limit:,} bytes", "too_large")
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    await send_json(send, 400, _error("header", "Content-Length is not a number", "bad_header"))
                    return
                if declared > limit:
                    await send_json(send, 413, too_large)
                    return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the client left: nothing to answer
            body = message.get("body", b"")
            size += len(body)
            if size > limit:
                await send_json(send, 413, too_large)
                return
            chunks.append(body)
            if not message.get("more_body", False):
                break
        buffered: list[Message] = [{"type": "http.request", "body": b"".join(chunks), "more_body": False}]

        async def replay() -> Message:
            if buffered:
                return buffered.pop()
            return await receive()

        await self.app(scope, replay, send)
