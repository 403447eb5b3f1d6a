"""``deniable evaluate``: utility (training / test time) and membership inference over a grid of epsilons."""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from .._errors import InvalidParameterError
from ._common import (
    EmbeddingOpt,
    MechanismFlags,
    VocabSizeOpt,
    check_mechanism_name,
    err,
    load_embedding_option,
    mechanism_command,
    parse_floats,
    warn_seed,
)

_TASK_HELP = (
    "A built-in recipe (imdb, sst2, sst5, 20newsgroups, enron, enron_spam, cfpb, insuranceqa: --data is its folder "
    "or the folder holding it), 'file' (--data is a labelled CSV/TSV/JSONL(.gz)/Parquet training file, --test the "
    "test file or --test-fraction a split) or 'hf' (--data names a locally available Hugging Face data set; needs "
    "the optional 'datasets' library)."
)


ATTACKS = ("none", "authorship", "user-audit")


def _run_attack(
    attack: str,
    task: str,
    data: str,
    out_dir: Path,
    *,
    mechanisms: Any,
    epsilons: list[float],
    model: str,
    repeats: int,
    seed: int | None,
    min_posts: int,
    max_users: int | None,
    max_words: int | None,
    oov: str,
    embedding: str | None,
    vocab_size: int | None,
    quiet: bool,
) -> None:
    """``--attack authorship`` / ``--attack user-audit`` on a user corpus (docs/audit.md)."""
    from ..experiments.authorship import authorship_attack, write_attack_results
    from ..experiments.data import USER_CORPORA, load_user_corpus

    if task not in USER_CORPORA:
        raise InvalidParameterError("--task", task, "one of " + ", ".join(USER_CORPORA) + " with --attack")
    if min_posts < 2:
        raise InvalidParameterError("--min-posts", min_posts, "an integer >= 2")
    if max_users is not None and max_users < 2:
        raise InvalidParameterError("--max-users", max_users, "an integer >= 2")
    corpus = load_user_corpus(task, data, min_posts=min_posts, max_users=max_users)
    emb = load_embedding_option(embedding, vocab_size)
    from ..embedding import Embedding

    if not isinstance(emb, Embedding):
        raise Embedding.type_error(emb)
    err.print(f"{corpus.describe()}; embedding {emb.name} ({emb.size:,} words)", highlight=False)
    command = "deniable " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:] else ""
    show = False if quiet else None
    if attack == "authorship":
        result = authorship_attack(
            corpus,
            emb,
            mechanisms,
            epsilons,
            repeats=repeats,
            model=model,
            max_words=max_words,
            oov=oov,
            random_state=seed,
            show_progress=show,
        )
    else:
        from ..experiments.provenance import user_audit

        result = user_audit(
            corpus,
            emb,
            mechanisms,
            epsilons,
            repeats=repeats,
            max_words=max_words,
            oov=oov,
            random_state=seed,
            show_progress=show,
        )
    paths = write_attack_results(result, out_dir, command=command)
    sys.stdout.write(paths["results.md"].read_text(encoding="utf-8"))


def _names(option: str, text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise InvalidParameterError(option, text, "a comma-separated list of names")
    return names


@mechanism_command("evaluate")
def evaluate_cmd(
    data: Annotated[str, typer.Option("--data", "-d", help="Data folder, file or Hugging Face name (see --task).")],
    out: Annotated[str, typer.Option("--out", "-o", help="Folder for results.csv, results.md, runs.csv, plots.")],
    task: Annotated[str, typer.Option("--task", "-t", help=_TASK_HELP)] = "imdb",
    mechanism: Annotated[
        str, typer.Option("--mechanism", "-m", help="Comma-separated mechanisms, e.g. tem,madlib.")
    ] = "madlib",
    epsilon: Annotated[str, typer.Option("--epsilon", "-e", help="Comma-separated epsilons.")] = "1,2,4,8,16",
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
        typer.Option(
            "--seed",
            help="Reproducible splits, noise and models. Fine for evaluation (nothing is "
            "released); it is recorded in the results.",
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
    oov: Annotated[
        str,
        typer.Option(
            "--oov",
            help="Out-of-vocabulary words: random (default, as privatize: each becomes a uniformly random "
            "vocabulary word), drop, or keep (NOT private: they pass verbatim and leak, e.g. users in "
            "--attack user-audit; only to measure that leak).",
        ),
    ] = "random",
    attack: Annotated[
        str,
        typer.Option(
            "--attack",
            help="none (utility + membership inference), authorship (attribute privatized texts to their "
            "authors; --task 20newsgroups or enron) or user-audit (was this user's data used to train a "
            "language model; --task 20newsgroups or enron). See docs/audit.md.",
        ),
    ] = "none",
    min_posts: Annotated[
        int, typer.Option("--min-posts", help="--attack: users with at least this many documents.")
    ] = 5,
    max_users: Annotated[
        int | None, typer.Option("--max-users", help="--attack: only the N most prolific users.")
    ] = None,
    embedding: EmbeddingOpt = None,
    vocab_size: VocabSizeOpt = None,
    plots: Annotated[bool, typer.Option("--plots/--no-plots", help="Write PNG plots (needs matplotlib).")] = True,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars.")] = False,
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
    from ..experiments import (
        RECIPES,
        EvaluationConfig,
        TaskData,
        load_hf,
        load_labelled,
        load_task,
        markdown_table,
        mechanism_factories,
        run_evaluation,
        split_stratified,
        write_results,
    )
    from ..experiments.models import check_model_names

    mechs = [check_mechanism_name(m) for m in _names("--mechanism", mechanism)]
    eps_list = parse_floats("--epsilon", epsilon)
    if attack not in ATTACKS:
        raise InvalidParameterError("--attack", attack, "one of " + ", ".join(ATTACKS))
    models = _names("--model", model or ("tfidf" if attack == "authorship" else "fasttext"))
    try:
        check_model_names(models)
    except InvalidParameterError as exc:
        raise InvalidParameterError("--model", exc.value, exc.allowed) from None
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
    ):
        if value is not None and value < low:
            raise InvalidParameterError(name, value, f"an integer >= {low}")
    if oov not in ("keep", "drop", "random"):
        raise InvalidParameterError("--oov", oov, "keep, drop or random")
    if not 0 < test_fraction < 1:
        raise InvalidParameterError("--test-fraction", test_fraction, "a number in (0, 1)")
    options = mechanism_flags.for_mechanisms(mechs)
    tasks = (*RECIPES, "file", "hf")
    if task not in tasks:
        raise InvalidParameterError("--task", task, "one of " + ", ".join(tasks))
    out_dir = Path(out)
    if out_dir.exists() and not out_dir.is_dir():
        raise InvalidParameterError("--out", out, "a folder (it exists and is a file)")
    warn_seed(seed)
    t0 = time.perf_counter()
    if attack != "none":
        _run_attack(
            attack,
            task,
            data,
            out_dir,
            mechanisms=mechanism_factories(mechs, options),
            epsilons=eps_list,
            model=models[0],
            repeats=repeats,
            seed=seed,
            min_posts=min_posts,
            max_users=max_users,
            max_words=max_words,
            oov=oov,
            embedding=embedding,
            vocab_size=vocab_size,
            quiet=quiet,
        )
        err.print(f"results written to {out_dir} ({time.perf_counter() - t0:.0f} s)", highlight=False)
        return
    if task in RECIPES:
        data_set = load_task(task, data)
    elif task == "file":
        train_split = load_labelled(data, text_column=text_column, label_column=label_column)
        if test is not None:
            test_split = load_labelled(
                test, text_column=text_column, label_column=label_column, classes=train_split.classes
            )
        else:
            train_split, test_split = split_stratified(train_split, test_fraction, seed=0)
        data_set = TaskData(Path(data).stem.split(".")[0], "classification", train_split, test_split)
    else:
        tr = load_hf(data, split=hf_train_split, text_column=text_column, label_column=label_column)
        te = load_hf(data, split=hf_test_split, text_column=text_column, label_column=label_column, classes=tr.classes)
        data_set = TaskData(data.replace("/", "_"), "classification", tr, te)
    emb = load_embedding_option(embedding, vocab_size)
    try:
        cfg = EvaluationConfig(
            mechanisms=mechanism_factories(mechs, options),
            epsilons=eps_list,
            models=models,
            modes=modes,
            repeats=repeats,
            random_state=seed,
            train_size=train_size,
            test_size=test_size,
            membership=membership,
            label_feature=label_feature,
            oov=oov,
            negatives=negatives,
            max_words=max_words,
        )
    except InvalidParameterError as exc:
        raise InvalidParameterError("--" + exc.name.replace("_", "-"), exc.value, exc.allowed) from None
    err.print(f"{data_set.describe()}; embedding {emb.name} ({emb.size:,} words)", highlight=False)
    try:
        result = run_evaluation(data_set, emb, cfg, show_progress=False if quiet else None)
    except InvalidParameterError as exc:
        if exc.name in ("train_size", "test_size"):
            raise InvalidParameterError("--" + exc.name.replace("_", "-"), exc.value, exc.allowed) from None
        raise
    command = "deniable " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:] else ""
    write_results(result, out_dir, plots=plots, command=command)
    sys.stdout.write(markdown_table(result.summary()))
    err.print(f"results written to {out_dir} ({time.perf_counter() - t0:.0f} s)", highlight=False)
