"""``deniable export-device``: write the on-device artefacts.

``--format npy`` (default): BRR's folder for the Python library (codes.npy, words.txt, brr.json).
``--format web``: static files for the JavaScript client (clients/js; docs/device.md):
``manifest.json`` (format version, mechanism, sizes, embedding fingerprint, sha256 of each
file), ``words.txt`` and ``codes.bin`` (``--mechanism brr``) or ``vectors.bin`` (``madlib``;
``--vectors uint8``: ``qvectors.bin`` + ``levels.bin``, madlib over the 8-bit embedding).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from . import _options as opt
from ._common import app, err, load_embedding_option

if TYPE_CHECKING:
    from ..embedding import Embedding

__all__ = ["export_device_cmd", "float_sizes"]


def float_sizes(embedding: object) -> dict[str, int | None]:
    """Bytes of what the float mechanisms need: the float32 matrix, the word list, the indexes.

    ``flat index`` is the faiss ``IndexFlatL2`` (a copy of the matrix); ``exact index`` is the
    numpy exact decode's augmented copy ``[-2y, |y|^2]``; ``hnsw index`` is the prepared
    HNSW artefact's file (``None`` when it has not been built).
    """
    from ..artefacts import artefact_path
    from ..embedding import Embedding
    from ..index.faiss_index import HNSW_FILE, HNSW_KIND, hnsw_artefact_params

    assert isinstance(embedding, Embedding)
    v, n = embedding.size, embedding.dim
    words = sum(len(w.encode("utf-8")) + 1 for w in embedding._words)
    hnsw = artefact_path(embedding, HNSW_KIND, hnsw_artefact_params()) / HNSW_FILE
    return {
        "float vectors": v * n * 4,
        "words": words,
        "flat index": v * n * 4,
        "exact index": v * (n + 1) * 4,
        "hnsw index": hnsw.stat().st_size if hnsw.is_file() else None,
    }


@app.command("export-device")
def export_device_cmd(
    output: Annotated[str, opt.output("Folder to write (codes.npy, words.txt, brr.json).")],
    bits: Annotated[int, opt.bits("Code length: 64, 128, 256 or 512.")] = 256,
    binarizer: Annotated[
        str, opt.binarizer("autoencoder (Tissier et al.), simhash (alias random) or itq.")
    ] = "autoencoder",
    embedding: Annotated[
        str | None, opt.embedding("Float embedding to binarize (default: built-in GloVe 6B 50-d).")
    ] = None,
    vocab_size: opt.VocabSizeOpt = None,
    binarizer_seed: Annotated[
        int, opt.binarizer_seed("Seed of the binarizer's training (public; not privacy noise).")
    ] = 0,
    quiet: Annotated[bool, opt.quiet("No progress bar or size report.")] = False,
    fmt: Annotated[
        str, typer.Option("--format", help="npy (the Python library's folder) or web (the JavaScript client's files).")
    ] = "npy",
    mechanism: Annotated[str, opt.mechanism("brr, or madlib (float vectors; --format web only).")] = "brr",
    vectors: Annotated[
        str,
        typer.Option(
            "--vectors",
            help="madlib's vectors: float32 (the embedding's own) or uint8 (8 bits per coordinate of the "
            "--vocab-size most common words, default 250,000: madlib over that quantized embedding, the "
            "playground's default; docs/device.md).",
        ),
    ] = "float32",
) -> None:
    """Write everything BRR needs to privatize on a device: packed binary codes + the word list.

    The codes are trained (or read from the cache) from the float embedding. Load the
    folder with `deniable privatize --mechanism brr --embedding FOLDER ...` or
    `BinaryRandomizedResponse.from_device(FOLDER, epsilon)`; no float vectors are needed.
    """
    from .._validation import check_choice
    from ..binarize import check_binarizer, check_bits
    from ..embedding import Embedding
    from ..mechanisms.brr import BinaryRandomizedResponse

    check_choice("--format", fmt, ("npy", "web"))
    check_choice("--mechanism", mechanism, ("brr", "madlib"))
    check_choice("--vectors", vectors, ("float32", "uint8"))
    if vectors == "uint8" and mechanism != "madlib":
        from .._errors import InvalidParameterError

        raise InvalidParameterError("--vectors", vectors, "float32 (uint8 is for --mechanism madlib)")
    if mechanism == "madlib" and fmt != "web":
        from .._errors import InvalidParameterError

        raise InvalidParameterError("--mechanism", mechanism, "brr (madlib has only --format web)")
    bits = check_bits(bits, "--bits")
    method = check_binarizer(binarizer, "--binarizer")
    if vectors == "uint8" and vocab_size is None:
        from ..binarize.device import QUANTIZED_VOCAB

        vocab_size = QUANTIZED_VOCAB
    emb = load_embedding_option(embedding, vocab_size)
    if not isinstance(emb, Embedding):
        from .._errors import InvalidParameterError

        raise InvalidParameterError("--embedding", embedding, "a float embedding (this is already a device artefact)")
    if fmt == "web":
        if vectors == "uint8":
            from ..embedding import quantize

            emb = quantize(emb)
        _export_web(emb, mechanism, output, bits, method, binarizer_seed, quiet)
        return
    mech = BinaryRandomizedResponse(
        emb, 1.0, bits=bits, binarizer=method, seed=binarizer_seed, show_progress=False if quiet else None
    ).prepare()  # train (or read from the cache) the codes: the visible, explicit step
    sizes = mech.export_device(Path(output))
    if quiet:
        return
    fs = float_sizes(emb)
    dec = mech.decoder

    def say(text: str) -> None:
        err.print(text, highlight=False, soft_wrap=True)

    say(
        f"wrote {output}: {emb.size:,} words, {bits}-bit {method} codes; "
        f"{dec.n_codes:,} distinct codes ({dec.shared_codes:,} shared by {dec.words_sharing:,} words)"
    )
    art = sizes["total"]
    say(f"  device artefact: {_human(art)} (codes {_human(sizes['codes.npy'])}, words {_human(sizes['words.txt'])})")
    float_total = int(fs["float vectors"] or 0) + int(fs["words"] or 0)
    say(f"  float embedding: {_human(float_total)} (float32 vectors + words)")
    for name in ("flat index", "hnsw index"):
        size = fs[name]
        if size is None:
            say(f"  float {name}: not built")
            continue
        total = float_total + size
        say(f"  float embedding + {name}: {_human(total)} -> the artefact is {1 - art / total:.1%} smaller")


def _export_web(emb: Embedding, mechanism: str, output: str, bits: int, method: str, seed: int, quiet: bool) -> None:
    """``--format web``: the JavaScript client's files (the same bytes the service serves)."""
    from ..binarize.device import save_web_artefact, web_artefact_id, web_artefact_of
    from ..mechanisms import make_mechanism

    opts = {"bits": bits, "binarizer": method, "seed": seed, "show_progress": False if quiet else None}
    mech = make_mechanism(mechanism, emb, 1.0, **(opts if mechanism == "brr" else {"index": "exact"}))
    if mechanism == "brr":
        mech.prepare()  # type: ignore[attr-defined]  # train (or read) the codes: the visible, explicit step
    files = web_artefact_of(mech)
    sizes = save_web_artefact(Path(output), files)
    if quiet:
        return
    parts = ", ".join(f"{n} {_human(b)}" for n, b in sizes.items() if n != "total")
    err.print(
        f"wrote {output}: web artefact {web_artefact_id(files)} for {mechanism}, {mech.embedding.size:,} words; "
        f"{_human(sizes['total'])} ({parts})",
        highlight=False,
        soft_wrap=True,
    )


def _human(n: int) -> str:
    if n >= 2**20:
        return f"{n / 2**20:.1f} MB"
    return f"{n / 2**10:.1f} kB"
