"""The command-line options several commands share, declared once.

An option whose help reads the same in every command is an ``Annotated`` alias
(``embedding: EmbeddingOpt = None``); one whose meaning a command words for itself is a
function of that help text, so its flag names and short form are still declared here
once (``seed: Annotated[int | None, opt.seed("...")] = None``). The mechanism options are
not here: they are generated from the registry's declarations (``_common.MechanismCommand``).

May import typer only. (The ``--mechanism`` help that lists every registered name is
``cli.mechanisms.mechanism_flag_help``, computed when typer reads a command.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer

__all__ = [
    "EmbeddingOpt",
    "EtaOpt",
    "FormatOpt",
    "PlotsOpt",
    "VocabSizeOpt",
    "VocabularyOpt",
    "batch_size",
    "binarizer",
    "binarizer_seed",
    "bits",
    "column",
    "embedding",
    "epsilon",
    "file_format",
    "input_file",
    "mechanism",
    "oov",
    "out_folder",
    "output",
    "plots",
    "quiet",
    "seed",
    "syntf_neighbours",
    "vocab_size",
    "vocabulary",
]


# -- flag names declared once; each command words the help: ``opt.seed("...")`` ------------------
def _flag(*names: str) -> Callable[[str], Any]:
    """A shared option: its flag names here, its help (what it means there) in each command."""

    def option(help: str) -> Any:
        return typer.Option(*names, help=help)

    return option


def input_file(help: str) -> Any:
    """The INPUT argument: a file to read, or - for stdin."""
    return typer.Argument(help=help)


output = _flag("--output", "-o")  # the file or folder a command writes
out_folder = _flag("--out", "-o")  # the folder of an evaluation's or an audit's results
file_format = _flag("--format", "-f")  # the record format of the input (default: from the file name)
column = _flag("--column", "-c")  # a text column of a table input
epsilon = _flag("--epsilon", "-e")  # the privacy parameter, or a grid of them
mechanism = _flag("--mechanism", "-m")  # a registered mechanism name, or several
embedding = _flag("--embedding")  # an embedding file or folder (default: the built-in GloVe)
seed = _flag("--seed")  # reproducible randomness (each command says what it costs there)
quiet = _flag("--quiet", "-q")  # no progress bars (and whatever else the command would print)
batch_size = _flag("--batch-size")  # records read (and held in memory) at a time
oov = _flag("--oov")  # the out-of-vocabulary policy: random, drop or keep
plots = _flag("--plots/--no-plots")  # write PNG plots
vocab_size = _flag("--vocab-size")  # how many of the embedding's most frequent words to keep
vocabulary = _flag("--vocabulary")  # which words: of the embedding, or a public word list (bow)
bits = _flag("--bits")  # brr's code length
binarizer = _flag("--binarizer")  # how brr's codes are made
binarizer_seed = _flag("--binarizer-seed")  # the seed of the binarizer's training (public)
syntf_neighbours = _flag("--syntf-neighbours")  # SynTF's public similarity (bow privatize, bow evaluate)


# -- options that read the same in every command that takes them ----------------------------------
EmbeddingOpt = Annotated[
    str | None,
    embedding(
        "Embedding: a GloVe/fastText text file, a word2vec .bin(.gz) or a saved folder (default: built-in "
        "GloVe 6B 50-d)."
    ),
]
VocabularyOpt = Annotated[
    str,
    vocabulary(
        "words (default): only entries that read back as one word, so outputs re-tokenize to the same "
        "token count (the guarantee is over that vocabulary); all: every entry of the embedding "
        "(punctuation and number tokens too)."
    ),
]
VocabSizeOpt = Annotated[int | None, vocab_size("Keep only the N most frequent words of the embedding.")]
FormatOpt = Annotated[
    str | None, file_format("txt, csv, tsv, jsonl or parquet (default: from the file name; stdin: txt).")
]
EtaOpt = Annotated[float, typer.Option("--eta", help="The eta-support holds >= 1 - eta of the mass.")]
PlotsOpt = Annotated[bool, plots("Write PNG plots (needs matplotlib).")]
