"""One ASGI middleware in front of the application: API keys, body size and time, concurrency.

Order, per HTTP request to a protected path:

1. **API key** (when keys are configured): ``Authorization: Bearer <key>`` or
   ``X-API-Key: <key>``; none gives 401, a wrong one 403. The key's SHA-256 digest is
   compared with every accepted digest in constant time (``hmac.compare_digest``).
2. **Body, bounded in size and time**, read whole *before* a work slot is taken: a
   ``Content-Length`` above the limit is refused before reading (413); the body is read
   counting bytes and refused (413) as soon as it passes the limit, and a client that has
   not sent all of it within ``body_timeout_s`` gets 408 (``Connection: close``). A slow
   sender therefore holds a socket for at most ``body_timeout_s``, never a work slot.
3. **Concurrency** (work paths only): beyond ``max_concurrency`` requests in progress --
   counting the work the application still runs for requests already answered at their
   deadline (``busy``) -- 503 with ``Retry-After`` at once (nothing is queued).
4. The application gets the buffered body, then the connection's later messages (so it
   can see a client that left), and ``scope[RELEASE]``: a callable that gives the slot back
   once the work is done (a response held until its release time holds no slot). If the
   server cancels the request (a SIGTERM's graceful shutdown ran out of time), the client
   gets a JSON 503 with ``Retry-After`` rather than the server's plain-text 500, and
   nothing is logged.

Nothing here logs; the answers name the limit, never a value the client sent.

May import: the standard library only (it sees raw ASGI messages, never the application).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import KW_ONLY, dataclass, field
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


#: Scope key of the SHA-256 digest (bytes) of the request's accepted API key (set when keys are
#: configured): the per-key budget's ledger is keyed by it, never by the key itself.
KEY_DIGEST = "deniable.key_digest"

#: Scope key of a callable that gives the work slot back early (the application calls it when its
#: work is done and it only waits for the response's release time: a padded answer holds no slot).
RELEASE = "deniable.release_slot"


async def send_json(send: Send, status: int, body: dict[str, Any], headers: list[tuple[bytes, bytes]] = ()) -> None:  # type: ignore[assignment]
    payload = json.dumps(body).encode()
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()), *headers]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": payload})


def _error(loc: str, msg: str, kind: str) -> dict[str, Any]:
    return {"detail": [{"loc": [loc], "msg": msg, "type": kind}]}


def release_slot(scope: Scope) -> None:
    """Give the request's work slot back now (its work is done; the answer may still be held)."""
    release = scope.get(RELEASE)
    if release is not None:
        release()


@dataclass(eq=False)
class Guard:
    """The middleware (see the module docstring): ``Guard(app, max_body_bytes=..., ...)``."""

    app: ASGIApp
    _: KW_ONLY
    max_body_bytes: int
    max_concurrency: int
    retry_after_s: int
    work_paths: frozenset[str]
    api_key_digests: tuple[bytes, ...] = ()
    body_timeout_s: float = 10.0
    #: work still running for requests already answered (it counts toward ``max_concurrency``)
    busy: Callable[[], int] | None = None
    #: requests doing work now (one event loop per process: no lock needed between awaits)
    active: int = field(default=0, init=False)

    def _key_status(self, scope: Scope) -> int | None:
        """None when allowed, else 401 (no key) or 403 (wrong key)."""
        if not self.api_key_digests:
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
        for accepted in self.api_key_digests:  # every digest is compared: the time does not say which matched
            ok |= hmac.compare_digest(digest, accepted)
        if ok:
            scope[KEY_DIGEST] = digest
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
        body = await self._read_body(scope, receive, send)
        if body is None:
            return  # answered (400, 408, 413) or the client left
        work = path in self.work_paths
        if work and self.active + (self.busy() if self.busy is not None else 0) >= self.max_concurrency:
            retry = [(b"retry-after", str(self.retry_after_s).encode())]
            await send_json(send, 503, _error("server", "busy: too many requests in progress; retry", "busy"), retry)
            return
        held = work
        if work:
            self.active += 1

        def release() -> None:  # the work is done (the answer may still be held until its release time)
            nonlocal held
            if held:
                held = False
                self.active -= 1

        scope[RELEASE] = release
        try:
            await self._call(scope, body, receive, send)
        finally:
            release()

    async def _call(self, scope: Scope, body: bytes, receive: Receive, send: Send) -> None:
        buffered: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]
        started = False

        async def replay() -> Message:
            if buffered:
                return buffered.pop()
            return await receive()

        async def tracked(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, replay, tracked)
        except asyncio.CancelledError:
            # the server gave up on this request (graceful shutdown ran out): a JSON 503, no traceback
            if not started:
                retry = [(b"retry-after", str(self.retry_after_s).encode()), (b"connection", b"close")]
                await send_json(send, 503, _error("server", "shutting down; retry", "shutting_down"), retry)

    async def _read_body(self, scope: Scope, receive: Receive, send: Send) -> bytes | None:
        """The whole body, or None once answered (400 / 408 / 413) or when the client left."""
        limit = self.max_body_bytes
        too_large = _error("body", f"the request body is larger than {limit:,} bytes", "too_large")
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    await send_json(send, 400, _error("header", "Content-Length is not a number", "bad_header"))
                    return None
                if declared > limit:
                    await send_json(send, 413, too_large, [(b"connection", b"close")])
                    return None
        chunks: list[bytes] = []
        size = 0

        async def read() -> bool:  # True: complete; False: the client left
            nonlocal size
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return False
                part = message.get("body", b"")
                size += len(part)
                if size > limit:
                    return True  # answered below
                chunks.append(part)
                if not message.get("more_body", False):
                    return True

        try:
            complete = await asyncio.wait_for(read(), timeout=self.body_timeout_s)
        except TimeoutError:
            msg = f"the request body was not received within {self.body_timeout_s:g} s"
            await send_json(send, 408, _error("body", msg, "body_timeout"), [(b"connection", b"close")])
            return None
        if not complete:
            return None  # the client left: nothing to answer
        if size > limit:
            await send_json(send, 413, too_large, [(b"connection", b"close")])
            return None
        return b"".join(chunks)
