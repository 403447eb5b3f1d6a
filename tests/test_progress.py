"""One-time builds show what they build, why, and their progress on a terminal; nothing elsewhere;
nothing that depends on the text being privatized; no build at a clearly non-private epsilon."""

from __future__ import annotations

import io
import logging
import os
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from conftest import make_tiny_embedding
from deniable import NotPrivateWarning
from deniable._progress import BUILD, progress
from deniable.artefacts import list_artefacts
from deniable.calibrate.table import strength
from deniable.mechanisms.laplace import MultivariateLaplace
from deniable.mechanisms.tem import TruncatedExponential
from deniable.preparation import prepare


class _Terminal(io.StringIO):
    """A stderr that says it is a terminal (what a user at a shell has)."""

    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("DENIABLE_CACHE", str(folder))
    return folder


@contextmanager
def _on(fake: io.StringIO) -> Iterator[None]:
    """``fake`` as stderr for the block (pytest's capture resets it between a fixture and the test)."""
    old, sys.stderr = sys.stderr, fake
    try:
        yield
    finally:
        sys.stderr = old


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> _Terminal:
    from rich.console import Console

    # rich reads the environment through the os.environ object it saw at import; `datasets`' map with
    # num_proc rebinds os.environ to a copy (an earlier test in the same process), so point rich at the live one
    monkeypatch.setattr(Console, "_environ", os.environ)
    monkeypatch.setenv("COLUMNS", "300")  # a wide terminal: rich folds long descriptions on a narrow one
    from deniable import _progress

    with _progress._lock:  # a display an earlier test left open (an unfinished generator) had its own width
        if _progress._bar is not None:
            _progress._bar.stop()
        monkeypatch.setattr(_progress, "_bar", None)
        monkeypatch.setattr(_progress, "_users", 0)
    return _Terminal()


@pytest.fixture
def pipe() -> io.StringIO:
    return io.StringIO()


def test_a_build_on_a_terminal_says_what_why_and_how_far(terminal: _Terminal) -> None:
    emb = make_tiny_embedding(300, 4, seed=3)
    with _on(terminal):
        prepare(emb, ["tem"])
    shown = " ".join(terminal.getvalue().split())  # rich may wrap long lines
    assert "building the k-NN tables TEM samples from" in shown  # what
    assert "once per embedding" in shown and "reused" in shown  # why it is worth the wait
    assert "TEM: k-NN tables of 300 words" in shown and "300/300" in shown  # done/total, natural unit


def test_a_build_off_a_terminal_draws_nothing_and_logs_start_and_end(
    pipe: io.StringIO, caplog: pytest.LogCaptureFixture
) -> None:
    emb = make_tiny_embedding(300, 4, seed=3)
    with caplog.at_level(logging.INFO, logger="deniable"), _on(pipe):
        prepare(emb, ["tem"])
    assert pipe.getvalue() == ""
    stages = [(getattr(r, BUILD), r.getMessage()) for r in caplog.records if hasattr(r, BUILD)]
    assert [s for s, _ in stages] == ["start", "end"]
    assert "the k-NN tables TEM samples from" in stages[0][1]


def test_quiet_is_quiet_on_a_terminal(terminal: _Terminal) -> None:
    with _on(terminal):
        prepare(make_tiny_embedding(300, 4, seed=3), ["tem"], show_progress=False)
    assert terminal.getvalue() == ""


def test_a_calibration_curve_counts_its_epsilon_points(terminal: _Terminal) -> None:
    from deniable.calibrate.table import build_table

    with _on(terminal):
        build_table(make_tiny_embedding(200, 4, seed=4), "tem", tokens=64, epsilons=[1.0, 2.0, 4.0])
    shown = " ".join(terminal.getvalue().split())
    assert "calibration of tem: epsilon points on 64 public reference tokens" in shown
    assert "3/3" in shown


def test_progress_total_can_grow(terminal: _Terminal) -> None:
    with _on(terminal), progress(2, "steps", enabled=True) as advance:
        advance(2)
        advance.set_total(5)
        advance(3)
    assert "5/5" in terminal.getvalue()


@pytest.mark.parametrize("n_words", [3, 40])
def test_privatizing_shows_nothing_that_depends_on_the_input(terminal: _Terminal, n_words: int) -> None:
    # the lazy path scans the vocabulary for each new word of the input: its count and timing
    # are the input's, so no bar (unless asked for explicitly)
    emb = make_tiny_embedding(300, 4, seed=5)
    mech = TruncatedExponential(emb, epsilon=2.0)
    with _on(terminal):
        mech.privatize(np.arange(n_words), np.random.default_rng(0))
    assert terminal.getvalue() == ""


def test_the_vocabulary_scan_of_new_input_words_draws_no_bar(terminal: _Terminal) -> None:
    # the scan behind TEM's lazy sampler runs for the input's new words (their count is the
    # input's): no bar by default, even on a terminal; one only when asked for explicitly
    from deniable.mechanisms.tem import _lazy

    mech = TruncatedExponential(make_tiny_embedding(300, 4, seed=5), epsilon=2.0)
    with _on(terminal):
        list(_lazy.rows(mech, np.arange(17)))
    assert terminal.getvalue() == ""
    with _on(terminal):
        list(_lazy.rows(mech, np.arange(17), show=True))
    assert "17/17" in terminal.getvalue()


def test_a_non_private_epsilon_builds_nothing(pipe: io.StringIO) -> None:
    emb = make_tiny_embedding(300, 4, seed=6)
    ids = np.arange(10)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotPrivateWarning)
        mech = MultivariateLaplace(emb, epsilon=1e308, index_options={"min_size": 1})
    with _on(pipe):
        out = mech.privatize(ids, np.random.default_rng(0))
    assert np.array_equal(out, ids)
    assert mech.decode_description.startswith("exact (epsilon >=")
    st = strength(mech)  # the summary's strength: not measured either (no calibration point is built)
    assert st.expected_unchanged == 1.0 and st.recovered == 1.0 and "not private" in st.source
    assert list_artefacts(emb) == []  # no HNSW index, no decode choice, no calibration point


def test_a_private_epsilon_still_builds_the_decode(pipe: io.StringIO) -> None:
    # the twin: at an ordinary epsilon the same settings build the index and measure the choice
    emb = make_tiny_embedding(300, 4, seed=6)
    mech = MultivariateLaplace(emb, epsilon=10.0, index_options={"min_size": 1})
    with _on(pipe):
        mech.privatize(np.arange(10), np.random.default_rng(0))
    assert {i.kind for i in list_artefacts(emb)} == {"hnsw", "decode-choice"}
    st = strength(mech)  # and the strength point is measured on public reference tokens
    assert "public reference tokens" in st.source and st.expected_unchanged < 1.0
    assert not mech.decode_description.startswith("exact (epsilon >=")


def test_evaluate_without_the_data_says_where_it_comes_from(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from deniable.cli import run_app

    missing = tmp_path / "shared" / "data"
    code = run_app(["evaluate", "--task", "imdb", "--data", str(missing), "-e", "8", "-o", str(tmp_path / "out")])
    err = " ".join(capsys.readouterr().err.split())
    assert code != 0
    assert "../shared/data" in err and "outside the repository" in err
    assert "--task file --data train.csv" in err  # how to run it on your own CSV


def test_custext_output_sets_show_what_and_how_far(terminal: _Terminal) -> None:
    """CusText's one-time mapping (minutes on the default vocabulary) says what it builds and counts words placed."""
    from deniable.mechanisms.custext import CusText

    mech = CusText(make_tiny_embedding(300, 4, seed=3), 2.0, k=5)
    with _on(terminal):
        mech.output_set(0)
    shown = " ".join(terminal.getvalue().split())
    assert "building custext's output sets of 5 words for 300 words" in shown
    assert "words placed in output sets" in shown and "300/300" in shown
