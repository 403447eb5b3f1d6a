"""``deniable evaluate``: utility (training / test time) and membership inference over a grid of epsilons."""

from __future__ import annotations

import shlex
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from .._errors import InvalidParameterError
from . import _options as opt
from ._common import (
    MechanismFlags,
    check_mechanism_name,
    err,
    load_embedding_option,
    mechanism_command,
    parse_floats,
    warn_seed,
)
from ._config import from_options

if TYPE_CHECKING:
    from ..embedding import Vocabulary
    from ..experiments import EvaluationConfig
    from ..experiments.data import TaskData, UserCorpus
    from ..ngram import NgramModel

_TASK_HELP = (
    "A built-in recipe (imdb, sst2, sst5, 20newsgroups, enron, enron_spam, cfpb, insuranceqa: --data is its folder "
    "or the folder holding it), 'file' (--data is a labelled CSV/TSV/JSONL(.gz)/Parquet training file, --test the "
    "test file or --test-fraction a split) or 'hf' (--data names a locally available Hugging Face data set; needs "
    "the optional 'datasets' library)."
)


def _user_corpus(task: str, data: str, min_posts: int, max_users: int | None) -> UserCorpus:
    """The user corpus ``--attack`` runs on (docs/audit.md)."""
    from ..experiments.data import USER_CORPORA, load_user_corpus

    if task not in USER_CORPORA:
        raise InvalidParameterError("--task", task, "one of " + ", ".join(USER_CORPORA) + " with --attack")
    if min_posts < 2:
        raise InvalidParameterError("--min-posts", min_posts, "an integer >= 2")
    if max_users is not None and max_users < 2:
        raise InvalidParameterError("--max-users", max_users, "an integer >= 2")
    return load_user_corpus(task, data, min_posts=min_posts, max_users=max_users)


def _run_attack(
    attack: str, corpus: UserCorpus, emb: Vocabulary, cfg: EvaluationConfig, out_dir: Path, show: bool | None
) -> None:
    """``--attack authorship`` / ``--attack user-audit`` on a user corpus (docs/audit.md)."""
    from ..embedding import Embedding
    from ..experiments.authorship import write_attack_results
    from ..experiments.tasks import run_attack

    result = run_attack(
        attack,
        corpus,
        Embedding.check(emb),
        cfg.mechanisms,
        cfg.epsilons,
        model=cfg.models[0],
        repeats=cfg.repeats,
        max_words=cfg.max_words,
        oov=cfg.oov,
        random_state=cfg.random_state,
        show_progress=show,
    )
    paths = write_attack_results(result, out_dir, command=_command_line())
    sys.stdout.write(paths["results.md"].read_text(encoding="utf-8"))


def _run_reconstruction(
    task: TaskData,
    emb: Vocabulary,
    cfg: EvaluationConfig,
    out_dir: Path,
    *,
    prior: str,
    draws: int,
    candidates: int | None,
    context: str | None = None,
    context_k: int = 20,
    context_decoder: str = "marginal",
    data_paths: tuple[str | None, ...] = (),
) -> None:
    """``--attack reconstruction`` on ``task``'s training texts (docs/attacker.md); with ``--context``
    the unigram and the contextual (n-gram) attacker side by side."""
    from ..experiments.reconstruction import run_reconstruction, write_reconstruction_results
    from ..priors import make_prior

    with _flags_named("prior"):
        public = make_prior(prior, emb)
    if context is not None:
        from ..experiments.contextual import run_contextual, write_contextual_results

        model = _context_model(context, emb, data_paths)
        with _flags_named("train_size", "context"):  # context: the model saw the attacked texts
            result = run_contextual(
                task, emb, cfg, model, prior=public, k=context_k, decoder=context_decoder, draws=draws,
                candidates=candidates,
            )  # fmt: skip
        paths = write_contextual_results(result, out_dir, command=_command_line())
    else:
        with _flags_named("train_size"):
            result = run_reconstruction(task, emb, cfg, prior=public, draws=draws, candidates=candidates)
        paths = write_reconstruction_results(result, out_dir, command=_command_line())
    sys.stdout.write(paths["results.md"].read_text(encoding="utf-8"))


def _context_model(spec: str, emb: Vocabulary, data_paths: tuple[str | None, ...]) -> NgramModel:
    """``--context ngram:PATH``: a saved model (``.npz``) or one trained now on the public text file PATH,
    which must not be the attacked data (``--data``, ``--test``)."""
    from ..ngram import load_ngram, train_ngram

    kind, _, path = spec.partition(":")
    if kind != "ngram" or not path:
        raise InvalidParameterError("--context", spec, "ngram:PATH (a public text file, or a saved .npz model)")
    target = Path(path)
    if not target.is_file():
        raise InvalidParameterError("--context", spec, "ngram:PATH with PATH an existing file")
    for d in data_paths:
        if d is not None and Path(d).exists() and Path(d).resolve() == target.resolve():
            raise InvalidParameterError(
                "--context", spec, "a public text other than the attacked data (it is --data / --test)"
            )
    with _flags_named():
        try:
            return load_ngram(target, emb) if target.suffix == ".npz" else train_ngram(emb, target)
        except InvalidParameterError as exc:
            raise InvalidParameterError("--context", spec, exc.allowed) from None


def _command_line() -> str:
    """The command line, for the results' record (empty when called from Python)."""
    return "deniable " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:] else ""


def _models(text: str) -> list[str]:
    """``--model``: comma-separated classifier names."""
    from ..experiments.models import check_model_names

    models = _names("--model", text)
    try:
        check_model_names(models)
    except InvalidParameterError as exc:
        raise InvalidParameterError("--model", exc.value, exc.allowed) from None
    return models


@contextmanager
def _flags_named(*names: str) -> Iterator[None]:
    """An error of the library naming its parameter (``train_size``) names the flag (``--train-size``)
    instead: for every parameter, or only for ``names``."""
    try:
        yield
    except InvalidParameterError as exc:
        if names and exc.name not in names:
            raise
        raise InvalidParameterError("--" + exc.name.replace("_", "-"), exc.value, exc.allowed) from None


def _names(option: str, text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise InvalidParameterError(option, text, "a comma-separated list of names")
    return names


@mechanism_command("evaluate")
def evaluate_cmd(
    data: Annotated[str, typer.Option("--data", "-d", help="Data folder, file or Hugging Face name (see --task).")],
    out: Annotated[str, opt.out_folder("Folder for results.csv, results.md, runs.csv, plots.")],
    task: Annotated[str, typer.Option("--task", "-t", help=_TASK_HELP)] = "imdb",
    mechanism: Annotated[str, opt.mechanism("Comma-separated mechanisms, e.g. tem,madlib.")] = "madlib",
    epsilon: Annotated[str, opt.epsilon("Comma-separated epsilons.")] = "1,2,4,8,16",
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            help="Comma-separated classifiers: fasttext (fastText-style), tfidf (TF-IDF + "
            "logistic regression). Default fasttext (tfidf with --attack authorship). InsuranceQA always uses "
            "the TF-IDF ranker.",
        ),
    ] = None,
    mode: Annotated[
        str,
        typer.Option(
            "--mode", help="train (train on privatized, test clean), test (train clean, test privatized) or train,test."
        ),
    ] = "train,test",
    repeats: Annotated[int, typer.Option("--repeats", "-r", help="Independent repeats (95% CIs over them).")] = 3,
    seed: Annotated[
        int | None,
        opt.seed(
            "Reproducible splits, noise and models. Fine for evaluation (nothing is "
            "released); it is recorded in the results."
        ),
    ] = None,
    train_size: Annotated[
        int | None,
        typer.Option(
            "--train-size",
            help="Training rows per repeat (TR1; TR2 has as many). Default: half the "
            "training side (all of it with --no-membership).",
        ),
    ] = None,
    test_size: Annotated[
        int | None, typer.Option("--test-size", help="Test rows (TE1; TE2 has as many) or questions per repeat.")
    ] = None,
    membership: Annotated[
        bool,
        typer.Option("--membership/--no-membership", help="Run the membership-inference attack (seed 004 App. C)."),
    ] = True,
    label_feature: Annotated[
        bool, typer.Option("--label-feature", help="Attack features also hold the true label (stronger attack).")
    ] = False,
    text_column: Annotated[str, typer.Option("--text-column", help="Text column (--task file/hf).")] = "text",
    label_column: Annotated[str, typer.Option("--label-column", help="Label column (--task file/hf).")] = "label",
    test: Annotated[str | None, typer.Option("--test", help="--task file: the test file.")] = None,
    test_fraction: Annotated[
        float, typer.Option("--test-fraction", help="--task file without --test: stratified test share.")
    ] = 0.2,
    hf_train_split: Annotated[str, typer.Option("--hf-train-split", help="--task hf: training split.")] = "train",
    hf_test_split: Annotated[str, typer.Option("--hf-test-split", help="--task hf: test split.")] = "test",
    negatives: Annotated[
        int, typer.Option("--negatives", help="insuranceqa: random negative answers per question.")
    ] = 49,
    max_words: Annotated[
        int | None,
        typer.Option("--max-words", help="Cut every text after its first N words (both sides), to save time."),
    ] = None,
    batch_texts: Annotated[
        int,
        typer.Option(
            "--batch-texts",
            help="Texts privatized per call (memory; --attack privatizes each side in one call). The "
            "whole-vocabulary mechanisms compute one distance row per distinct word of a call, so larger "
            "batches are faster for them.",
        ),
    ] = 200,
    oov: Annotated[
        str,
        opt.oov(
            "Out-of-vocabulary words: random (default, as privatize: each becomes a uniformly random "
            "vocabulary word), drop, or keep (NOT private: they pass verbatim and leak, e.g. users in "
            "--attack user-audit; only to measure that leak)."
        ),
    ] = "random",
    attack: Annotated[
        str,
        typer.Option(
            "--attack",
            help="none (utility + membership inference), authorship (attribute privatized texts to their "
            "authors; --task 20newsgroups or enron), user-audit (was this user's data used to train a "
            "language model; --task 20newsgroups or enron), see docs/audit.md; or reconstruction (the share of "
            "the training side's words an attacker who knows the mechanism and a public prior recovers; any "
            "task; --train-size texts), see docs/attacker.md.",
        ),
    ] = "none",
    prior: Annotated[
        str,
        typer.Option(
            "--prior",
            help="--attack reconstruction: the attacker's public prior over words: zipf (over the embedding's "
            "frequency order), zipf:S (exponent S), counts:PATH (word counts of a public text file, never the "
            "text under attack) or uniform.",
        ),
    ] = "zipf",
    draws: Annotated[
        int,
        typer.Option(
            "--draws",
            help="--attack reconstruction, mechanisms without an exact distribution: noise draws per word "
            "that fit the guess table, and as many that score it (more narrow the held-out / in-sample bracket).",
        ),
    ] = 1000,
    candidates: Annotated[
        int | None,
        typer.Option(
            "--candidates",
            help="--attack reconstruction: the attacker guesses among the N most probable words under the "
            "prior (default: the whole vocabulary).",
        ),
    ] = None,
    context: Annotated[
        str | None,
        typer.Option(
            "--context",
            help="--attack reconstruction: also run the contextual attacker, which decodes each whole privatized "
            "text with a word bigram model: ngram:PATH, PATH a public UTF-8 text file (one text per line; never "
            "the attacked text: refused) or a saved .npz model. Reports unigram and contextual side by side.",
        ),
    ] = None,
    context_k: Annotated[
        int, typer.Option("--context-k", help="--context: candidate words per token (the unigram attacker's best K).")
    ] = 20,
    context_decoder: Annotated[
        str,
        typer.Option(
            "--context-decoder",
            help="--context: marginal (each word's most probable value given the whole text: the most words right) "
            "or viterbi (the jointly most probable text).",
        ),
    ] = "marginal",
    min_posts: Annotated[
        int, typer.Option("--min-posts", help="--attack: users with at least this many documents.")
    ] = 5,
    max_users: Annotated[
        int | None, typer.Option("--max-users", help="--attack: only the N most prolific users.")
    ] = None,
    embedding: opt.EmbeddingOpt = None,
    vocab_size: opt.VocabSizeOpt = None,
    plots: opt.PlotsOpt = True,
    quiet: Annotated[bool, opt.quiet("No progress bars.")] = False,
    *,
    mechanism_flags: MechanismFlags,
) -> None:
    """Measure what privatization costs a task and what it buys.

    For each mechanism, epsilon and repeat: train on privatized text and test on clean
    text (training time), test a clean model on privatized text (test time), and attack
    the trained models with the membership-inference attack of seed 004 App. C.
    Writes results.csv (mean and 95% CI per setting), runs.csv (every run),
    results.md, settings.json and plots of accuracy and attack AUC against epsilon with
    the clean baseline. Privatizing is the slow part (every token of TR1 / TE1 per
    epsilon and repeat): subsample with --train-size / --test-size.
    """
    parsed = dict(locals())  # the options as given, passed on by name
    from ..experiments import EvaluationConfig, markdown_table, mechanism_factories, run_evaluation, write_results
    from ..experiments.data import TaskData
    from ..experiments.tasks import ATTACKS, TASKS, load_task_data

    mechs = [check_mechanism_name(m) for m in _names("--mechanism", mechanism)]
    eps_list = parse_floats("--epsilon", epsilon)
    if attack not in ATTACKS:
        raise InvalidParameterError("--attack", attack, "one of " + ", ".join(ATTACKS))
    models = _models(model or ("tfidf" if attack == "authorship" else "fasttext"))
    modes = _names("--mode", mode)
    for m in modes:
        if m not in ("train", "test"):
            raise InvalidParameterError("--mode", m, "train, test or train,test")
    for name, value, low in (
        ("--repeats", repeats, 1),
        ("--train-size", train_size, 2),
        ("--test-size", test_size, 2),
        ("--negatives", negatives, 1),
        ("--max-words", max_words, 1),
        ("--batch-texts", batch_texts, 1),
        ("--draws", draws, 1),
        ("--candidates", candidates, 1),
        ("--context-k", context_k, 1),
    ):
        if value is not None and value < low:
            raise InvalidParameterError(name, value, f"an integer >= {low}")
    if context is not None and attack != "reconstruction":
        raise InvalidParameterError("--context", context, "only with --attack reconstruction")
    if context_decoder not in ("viterbi", "marginal"):
        raise InvalidParameterError("--context-decoder", context_decoder, "viterbi or marginal")
    if oov not in ("keep", "drop", "random"):
        raise InvalidParameterError("--oov", oov, "keep, drop or random")
    if not 0 < test_fraction < 1:
        raise InvalidParameterError("--test-fraction", test_fraction, "a number in (0, 1)")
    factories = mechanism_factories(mechs, mechanism_flags.for_mechanisms(mechs))
    if task not in TASKS:
        raise InvalidParameterError("--task", task, "one of " + ", ".join(TASKS))
    out_dir = Path(out)
    if out_dir.exists() and not out_dir.is_dir():
        raise InvalidParameterError("--out", out, "a folder (it exists and is a file)")
    if plots and attack == "none":
        from ..report import require_matplotlib

        require_matplotlib("or pass --no-plots")  # before the work, not after it
    with _flags_named():
        cfg = from_options(
            EvaluationConfig,
            parsed,
            mechanisms=factories,
            epsilons=eps_list,
            models=models,
            modes=modes,
            random_state=seed,
        )
    warn_seed(seed)
    t0 = time.perf_counter()
    show = False if quiet else None
    data_set: UserCorpus | TaskData
    if attack not in ("none", "reconstruction"):
        data_set = _user_corpus(task, data, min_posts, max_users)
    else:
        data_set = load_task_data(
            task,
            data,
            text_column=text_column,
            label_column=label_column,
            test=test,
            test_fraction=test_fraction,
            hf_train_split=hf_train_split,
            hf_test_split=hf_test_split,
        )
    emb = load_embedding_option(embedding, vocab_size)
    err.print(f"{data_set.describe()}; embedding {emb.name} ({emb.size:,} words)", highlight=False)
    if attack == "reconstruction" and isinstance(data_set, TaskData):
        _run_reconstruction(
            data_set, emb, cfg, out_dir, prior=prior, draws=draws, candidates=candidates, context=context,
            context_k=context_k, context_decoder=context_decoder, data_paths=(data, test),
        )  # fmt: skip
    elif isinstance(data_set, TaskData):
        with _flags_named("train_size", "test_size"):
            result = run_evaluation(data_set, emb, cfg, show_progress=show)
        write_results(result, out_dir, plots=plots, command=_command_line())
        sys.stdout.write(markdown_table(result.summary()))
    else:
        _run_attack(attack, data_set, emb, cfg, out_dir, show)
    err.print(f"results written to {out_dir} ({time.perf_counter() - t0:.0f} s)", highlight=False)
