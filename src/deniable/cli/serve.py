"""``deniable serve``: the HTTP service."""

from __future__ import annotations

from typing import Annotated

import typer

from ._common import app, err, load_embedding_option


@app.command("serve")
def serve_cmd(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    embedding: Annotated[
        str | None, typer.Option("--embedding", help="Embedding path (default: GloVe 6B 50-d).")
    ] = None,
    vocab_size: Annotated[int | None, typer.Option("--vocab-size", help="Keep the N most frequent words.")] = None,
) -> None:
    """Serve POST /privatize (JSON: texts, epsilon, mechanism, options, oov) over HTTP.

    Needs the 'serve' extra: pip install 'deniable[serve]'. Request bodies are never logged.
    """
    try:
        import uvicorn
    except ImportError:
        from .._errors import DeniableError

        raise DeniableError("deniable serve needs the 'serve' extra: pip install 'deniable[serve]'") from None
    from ..service import create_app

    application = create_app(load_embedding_option(embedding, vocab_size))
    err.print(f"serving on http://{host}:{port} (docs at /docs)")
    uvicorn.run(application, host=host, port=port, access_log=False, log_level="warning")
