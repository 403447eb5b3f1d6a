"""``deniable serve``: the HTTP service (see docs/service.md)."""

from __future__ import annotations

import json
import math
import os
import socket
from typing import Annotated

import typer

from . import _options as opt
from ._common import app, err


@app.command("serve")
def serve_cmd(
    config: Annotated[
        str | None,
        typer.Option("--config", help="Service configuration, TOML or JSON (default: $DENIABLE_SERVICE_CONFIG)."),
    ] = None,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port to listen on (0: any free one).")] = 8000,
    workers: Annotated[int, typer.Option(min=1, help="Worker processes (they share the memory-mapped data).")] = 1,
    embedding: Annotated[str | None, opt.embedding("Embedding path (overrides the config's).")] = None,
    vocab_size: Annotated[int | None, opt.vocab_size("Keep the N most frequent words.")] = None,
    api_keys_file: Annotated[
        str | None,
        typer.Option("--api-keys-file", help="Require an API key: one per line (also $DENIABLE_API_KEYS[_FILE])."),
    ] = None,
) -> None:
    """Serve /v1/privatize, /v1/explain, /v1/mechanisms and the playground page at / over HTTP.

    Needs the 'serve' extra: pip install 'deniable[serve]'. The configuration says which
    mechanisms, epsilons and options clients may choose, and the limits. Request bodies
    and API keys are never logged. /livez answers at once, /readyz once every offered
    mechanism is prepared.
    """
    try:
        import uvicorn
    except ImportError:
        from .._errors import DeniableError

        raise DeniableError("deniable serve needs the 'serve' extra: pip install 'deniable[serve]'") from None
    from ..service._config import ENV_CONFIG, config_data, config_from_mapping

    data = config_data(config, embedding=embedding, vocab_size=vocab_size, api_keys_file=api_keys_file)
    checked = config_from_mapping(data)  # fail here (exit 2, naming the key), not in every worker
    os.environ[ENV_CONFIG] = json.dumps(data)  # each worker builds its app from it
    from .._threads import worker_env

    os.environ.update(worker_env(os.environ))  # N workers x 1 BLAS / OpenMP thread (unless the user chose)
    # bound before anything is said or built: a busy port is an error naming --port (exit 2), not a
    # "serving on" line followed by the server's own failure
    sock = _tcp_listener(host, port)
    bound = sock.getsockname()[1]
    err.print(f"serving on http://{host}:{bound} with {workers} worker(s) (page at /, docs at /docs)")
    config_ = uvicorn.Config(
        "deniable.service:app_factory",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        access_log=False,
        log_level="warning",
        # a request is answered within body_timeout_s + timeout_s of its first byte: let it finish
        timeout_graceful_shutdown=math.ceil(checked.body_timeout_s + checked.timeout_s) + 2,
    )
    server = uvicorn.Server(config_)
    if workers == 1:
        server.run(sockets=[sock])
        return
    from uvicorn.supervisors import Multiprocess

    Multiprocess(config_, sockets=[sock]).run()


def _tcp_listener(host: str, port: int) -> socket.socket:
    """The workers' shared listening socket, created with ``proto=IPPROTO_TCP``.

    uvicorn's own ``bind_socket`` leaves ``proto`` at 0, so accepted connections do not get
    ``TCP_NODELAY`` from asyncio and every keep-alive request waits ~40 ms on the peer's
    delayed ACK (uvicorn issue 3149; measured here: 44 ms per request with 2 workers against
    2 ms with 1).
    """
    from .._errors import InvalidParameterError

    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError) as exc:
        reason = getattr(exc, "strerror", None) or type(exc).__name__
        raise InvalidParameterError("--host", host, f"an address of this machine to listen on ({reason})") from None
    family, kind, proto, _, addr = found[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(addr)
        sock.listen(2048)  # uvicorn's backlog: bound and listening before "serving on" is printed
    except OSError as exc:
        sock.close()
        raise InvalidParameterError("--port", port, f"a free port on {host} ({exc.strerror})") from None
    sock.set_inheritable(True)
    return sock
