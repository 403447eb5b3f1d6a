"""Issue 44, measure then decide: held-out utility against attacker recovery, per decoder (``prior``).

For each task (``--tasks``: built-in recipes read from ``--data``), each perturb-then-decode
mechanism (``--mechanisms``) and each decoder prior (``--priors``: ``uniform`` is today's
nearest-neighbour decode), at every epsilon of the mechanism's grid (``--epsilons
madlib:5,7,10,14;brr:...``):

- **utility**: ``run_evaluation`` (train on privatized training text, test on clean test text,
  ``--repeats`` repeats, mean and 95% interval), the harness of ``deniable evaluate``;
- **recovery**: the unigram Bayes attacker of ``deniable evaluate --attack reconstruction``
  (sampled guess table fitted and scored on independent draws: ``recovered`` is held out),
  scored on ``--attack-texts`` training texts, with the attacker's public prior
  ``--attacker-prior`` (zipf by default). The attacker knows the decoder: its guess table is
  fitted on the mechanism's own outputs, decode included;
- **unchanged** share beside it.

The decoder ``ngram`` (in ``--priors``) is the contextual prior ``prior="ngram:PATH"`` (madlib and
Mahalanobis: each text's noisy vectors decoded jointly, Viterbi over each token's best words): its
bigram model is trained (``deniable.ngram.prepare_ngram``, what ``deniable prepare --ngram FILE``
does) on a public corpus **other than the target** (``--ngram-corpus``: by default IMDb's model
from SST and 20 Newsgroups, SST-2's and 20 Newsgroups' from IMDb's test reviews), written under
``--out`` one text per line.

``--recovery in-context`` (the default once ``ngram`` is among the decoders): the unigram attacker's
guess table is fitted on ``--draws`` privatizations of the attack texts *as texts* (each text one
call, so a contextual decoder sees real context; the same for every decoder, so they are compared
alike): ``guess(y) = argmax_w prior(w) (count(w, y) + m(y)) / (draws n_w + 1)`` (``n_w``: the
occurrences of ``w`` in the texts, ``m``: the pooled output frequency; a word never seen gets the
smoothing only), and scored on one more independent privatization (held out: a lower bound on the
best attacker's success; Wilson intervals over the tokens). ``--recovery per-word`` is the issue-41
estimator above (``draws`` outputs of each vocabulary word alone: no context, so no contextual decoder).

Then, per task and mechanism, the decoders are lined up at **matched recovery**
(:func:`deniable.experiments.fair.epsilon_at_level`, the fair report's matching): each
decoder's epsilon at a recovery level is read off its isotonic recovery curve, and its utility
(mean and interval bounds) interpolated there in log epsilon, at the levels every decoder reaches. A decoder
*dominates* uniform at a level when the lower bound of its utility interval is above the upper
bound of uniform's there. The verdict line per mechanism says on how many tasks a prior
dominates at every common level (issue 44: a default changes only with >= 3).

Writes ``OUT/<task>.csv`` (one row per mechanism, decoder, epsilon) and prints Markdown
tables. Unset OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE for speed figures (not needed here: it
prints no times but the total).

``--speed N`` only times the three decodes (nearest, zipf, ngram) on the same noisy vectors of N
IMDb tokens (interleaved rounds, one thread; unset OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE for it)::

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/decode_prior_tradeoff.py --data ../shared/data \\
        --speed 20000 --rounds 5 --epsilons madlib:5,10 --vocab-size 5000 --out out/decode_prior_ngram

Usage (the tables of docs/madlib.md, "Measured, then decided")::

    python bench/decode_prior_tradeoff.py --data ../shared/data --tasks imdb,sst2,20newsgroups \\
        --mechanisms madlib --priors uniform,zipf --out out/decode_prior

    python bench/decode_prior_tradeoff.py --data ../shared/data --tasks sst2,imdb,20newsgroups \\
        --mechanisms madlib --priors uniform,zipf,ngram --epsilons madlib:5,10 --vocab-size 5000 \\
        --train-size 2000 --test-size 1000 --repeats 3 --train-max-words 100 --attack-texts 300 \\
        --max-words 100 --draws 10 --out out/decode_prior_ngram
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
import time
from pathlib import Path
from typing import Any

DEFAULT_GRID = {
    "madlib": "4,6,8,11,15",
    "mahalanobis": "4,6,8,11,15",
    "vickrey": "4,6,8,11,15",
    "brr": "0.5,1,2,3,4",
}


def _grid(spec: str | None, mechanisms: list[str]) -> dict[str, list[float]]:
    grid = {m: [float(x) for x in DEFAULT_GRID.get(m, "4,8,16").split(",")] for m in mechanisms}
    for part in (spec or "").split(";"):
        if part.strip():
            name, _, values = part.partition(":")
            grid[name.strip()] = [float(x) for x in values.split(",")]
    return grid


def _summary(results: Any, metric: str, **match: Any) -> dict[tuple[str, float], dict[str, Any]]:
    out = {}
    for s in results.summary():
        if s["metric"] == metric and all(s.get(k) == v for k, v in match.items()):
            out[(s["mechanism"], float(s["epsilon"]))] = s
    return out


def run_task(task_name: str, args: argparse.Namespace, emb: Any) -> list[dict[str, Any]]:
    from deniable.experiments import EvaluationConfig, run_evaluation
    from deniable.experiments.harness import RegisteredMechanism
    from deniable.experiments.reconstruction import attack_texts, reconstruction_evaluation
    from deniable.experiments.tasks import load_task_data
    from deniable.mechanisms import validate_options

    data = load_task_data(task_name, str(Path(args.data) / _folder(task_name)))
    mechanisms = args.mechanisms.split(",")
    grid = _grid(args.epsilons, mechanisms)
    rows: list[dict[str, Any]] = []
    specs = {p: p for p in args.priors.split(",")}
    if "ngram" in specs:
        specs["ngram"] = f"ngram:{_ngram_model(task_name, args, emb)}"
    in_context = args.recovery == "in-context" or (args.recovery == "auto" and "ngram" in specs)
    for mech in mechanisms:
        factories = {
            f"{mech}[{prior}]": RegisteredMechanism(mech, validate_options(mech, {"prior": spec}))
            for prior, spec in specs.items()
        }
        config = EvaluationConfig(
            mechanisms=factories,
            epsilons=grid[mech],
            repeats=args.repeats,
            models=(args.model,),
            modes=("train",),
            membership=False,
            train_size=args.train_size,
            test_size=args.test_size,
            max_words=args.train_max_words,
            random_state=args.seed,
        )
        t0 = time.perf_counter()
        utility = run_evaluation(data, emb, config, show_progress=False)
        t1 = time.perf_counter()
        texts = attack_texts(data, size=args.attack_texts, max_words=args.max_words, seed=args.seed)
        if in_context:
            rec = in_context_recovery(texts, emb, factories, grid[mech], args)
        else:
            attack = reconstruction_evaluation(
                texts, emb, factories, grid[mech], prior=args.attacker_prior, draws=args.draws, random_state=args.seed
            )
            rec = dict(_recovery(attack).items())
        print(
            f"# {task_name} {mech}: utility {t1 - t0:.0f} s, recovery {time.perf_counter() - t1:.0f} s", file=sys.stderr
        )
        acc = _summary(utility, args.metric, mode="train")
        for (label, eps), u in sorted(acc.items()):
            r = rec.get((label, eps), {})
            rows.append(
                {
                    "task": task_name,
                    "mechanism": mech,
                    "prior": label[len(mech) + 1 : -1],
                    "epsilon": eps,
                    "utility": u["mean"],
                    "utility_low": u["ci_low"],
                    "utility_high": u["ci_high"],
                    **r,
                }
            )
    return rows


#: The public corpus of each target's n-gram model: other data sets (``task`` or ``task:side``), never the target
DEFAULT_NGRAM_CORPUS = "imdb=sst5,20newsgroups;sst2=imdb:test;sst5=imdb:test;20newsgroups=imdb:test,sst5"


def _ngram_model(task: str, args: argparse.Namespace, emb: Any) -> Path:
    """The prepared bigram model of ``task``'s public corpus (written under ``--out``, trained once)."""
    from deniable.experiments.tasks import load_task_data
    from deniable.ngram import prepare_ngram

    sources = dict(part.split("=", 1) for part in args.ngram_corpus.split(";") if part.strip())
    if task not in sources:
        raise SystemExit(f"--ngram-corpus names no public corpus for {task}")
    texts: list[str] = []
    for src in sources[task].split(","):
        name, _, side = src.partition(":")
        if name == task or {name, task} <= {"sst2", "sst5"}:
            raise SystemExit(f"--ngram-corpus: {name} is the target {task} (the model must be trained elsewhere)")
        data = load_task_data(name, str(Path(args.data) / _folder(name)))
        for part in [side] if side else ["train", "test"]:
            texts += list(getattr(data, part).texts)
    path = Path(args.out) / f"ngram-corpus-{task}.txt"
    path.write_text("".join(" ".join(t.split()) + "\n" for t in dict.fromkeys(texts)), encoding="utf-8")
    t0 = time.perf_counter()
    info = prepare_ngram(emb, path)
    print(f"# {task}: n-gram model of {sources[task]} ({len(texts):,} texts) in {time.perf_counter() - t0:.0f} s: "
          f"{info.path}", file=sys.stderr)  # fmt: skip
    return info.path


def in_context_recovery(
    texts: list[str], emb: Any, factories: dict[str, Any], epsilons: list[float], args: argparse.Namespace
) -> dict[tuple[str, float], dict[str, float]]:
    """The unigram attacker's held-out recovery, its table fitted on whole texts (module docstring)."""
    import numpy as np

    from deniable.embedding import Embedding
    from deniable.experiments.reconstruction import GroupScore
    from deniable.priors import make_prior

    v = emb.size
    logp = make_prior(args.attacker_prior, emb).log()
    doc = emb.tokenizer.tokenize(texts)
    known = doc.ids >= 0
    ids = doc.ids[known]
    off = np.r_[0, np.cumsum(known)][doc.offsets]  # text starts among the known tokens
    n_w = np.bincount(ids, minlength=v).astype(np.float64)
    top = int(logp.argmax())
    out: dict[tuple[str, float], dict[str, float]] = {}
    for i, (label, factory) in enumerate(factories.items()):
        for j, eps in enumerate(epsilons):
            mech = factory(Embedding.check(emb), eps)
            rng = np.random.default_rng([args.seed, i, j, 41])

            def once(gen: np.random.Generator, m: Any = mech) -> Any:
                return m.privatize_texts(ids, off, gen) if hasattr(m, "privatize_texts") else m.privatize(ids, gen)

            keys = np.concatenate([ids * v + once(rng) for _ in range(args.draws)])
            k, c = np.unique(keys, return_counts=True)
            w, y = k // v, k % v
            pooled = np.bincount(y, weights=c, minlength=v) / keys.size
            score = logp[w] + np.log((c + pooled[y]) / (args.draws * n_w[w] + 1.0))
            with np.errstate(divide="ignore"):
                fallback = logp[top] + np.log(pooled)  # the most probable word, smoothing only
            order = np.lexsort((w, -score, y))
            ys = y[order]
            first = order[np.r_[True, ys[1:] != ys[:-1]]]
            guess = np.full(v, top, dtype=np.int64)
            best = np.full(v, -np.inf)
            best[y[first]], guess[y[first]] = score[first], w[first]
            guess[fallback > best] = top
            released = once(rng)  # held out: independent of the fitting draws
            d: dict[str, float] = {}
            for metric, hits in (("recovered", guess[released] == ids), ("unchanged", released == ids)):
                value = float(hits.mean())
                lo, hi = GroupScore.interval(value, 0.0, int(ids.size))
                d[metric], d[f"{metric}_low"], d[f"{metric}_high"] = value, lo, hi
            out[(label, float(eps))] = d
    return out


def speed(args: argparse.Namespace, emb: Any) -> None:
    """``--speed N``: decode tokens/s of the same noisy vectors (N IMDb training tokens, texts of 200), per
    decoder, interleaved rounds, one thread; the n-gram model is SST-2's (IMDb's test reviews)."""
    import numpy as np

    from _common import corpus_ids, interleaved_rounds, load_average, pin_threads, summarise
    from deniable.mechanisms import make_mechanism

    ids, source = corpus_ids(emb, args.speed)
    off = np.r_[np.arange(0, ids.size, 200), ids.size]
    specs = {"nearest (exact)": {"index": "exact"}, "zipf": {"prior": "zipf"}}
    specs["ngram"] = {"prior": f"ngram:{_ngram_model('sst2', args, emb)}"}
    print(f"| decode | epsilon | tokens/s median (min-max) | ratio to nearest | ({source}, {ids.size:,} tokens, "
          f"{emb.size:,} words, {args.rounds} rounds, one thread) |")  # fmt: skip
    print("|---|---|---|---|---|")
    with pin_threads(1):
        for eps in _grid(args.epsilons, ["madlib"])["madlib"]:
            mechs = {name: make_mechanism("madlib", emb, eps, **opts).prepare() for name, opts in specs.items()}
            noisy = mechs["zipf"].noise(ids.size, np.random.default_rng(0)) + emb.vectors[ids]

            def run(m: Any, rows: Any = noisy) -> Any:
                return lambda: m.decode_texts(rows, off).size

            rates = interleaved_rounds({name: run(m) for name, m in mechs.items()}, args.rounds)
            ref = float(np.median(rates["nearest (exact)"]))
            for name, r in rates.items():
                print(f"| {name} | {eps:g} | {summarise(r)} | {float(np.median(r)) / ref:.2f}x | |")
    print(f"\nload average {load_average()}")


def _recovery(attack: Any) -> dict[tuple[str, float], dict[str, float]]:
    out: dict[tuple[str, float], dict[str, float]] = {}
    for s in attack.summary():
        if s.get("group") != "all" or s["metric"] not in ("recovered", "unchanged"):
            continue
        d = out.setdefault((s["mechanism"], float(s["epsilon"])), {})
        d[s["metric"]] = s["mean"]
        d[f"{s['metric']}_low"] = s["ci_low"]
        d[f"{s['metric']}_high"] = s["ci_high"]
    return out


def _folder(task: str) -> str:
    return {"sst2": "sst", "sst5": "sst"}.get(task, task)


def matched(rows: list[dict[str, Any]], levels: int) -> list[dict[str, Any]]:
    """Each decoder's utility at recovery levels all decoders of a (task, mechanism) reach."""
    out = []
    for task in dict.fromkeys(r["task"] for r in rows):
        for mech in dict.fromkeys(r["mechanism"] for r in rows if r["task"] == task):
            curves = {}
            for r in rows:
                if r["task"] == task and r["mechanism"] == mech:
                    curves.setdefault(r["prior"], []).append(r)
            lo = max(min(r["recovered"] for r in c) for c in curves.values())
            hi = min(max(r["recovered"] for r in c) for c in curves.values())
            if not lo < hi:
                continue
            for i in range(levels):
                level = lo + (hi - lo) * (i + 0.5) / levels
                cells = {p: _utility_at_recovery(c, level) for p, c in curves.items()}
                out.append({"task": task, "mechanism": mech, "recovered": level, **_flat(cells)})
    return out


def _utility_at_recovery(curve: list[dict[str, Any]], level: float) -> tuple[float, float, float, float]:
    """(epsilon, utility, low, high) of one decoder's curve at recovery ``level`` (the fair report's rule)."""
    from deniable.experiments.fair import _at, epsilon_at_level

    eps = epsilon_at_level([r["epsilon"] for r in curve], [r["recovered"] for r in curve], level, what="recovered")
    points = [{"epsilon": r["epsilon"], "mean": r["utility"], "ci_low": r["utility_low"], "ci_high": r["utility_high"]}
              for r in curve]  # fmt: skip
    mean, low, high, _ = _at(sorted(points, key=lambda p: p["epsilon"]), eps)
    return eps, mean, low, high


def _flat(cells: dict[str, tuple[float, float, float, float]]) -> dict[str, Any]:
    d: dict[str, Any] = {}
    for p, (eps, mean, low, high) in cells.items():
        d[f"{p}:epsilon"], d[f"{p}:utility"], d[f"{p}:low"], d[f"{p}:high"] = eps, mean, low, high
    return d


def _pct(x: float) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}"


def print_tables(rows: list[dict[str, Any]], at: list[dict[str, Any]], priors: list[str]) -> None:
    print("| task | mechanism | decoder | epsilon | utility (95% CI) | recovered % (95% CI) | unchanged % |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['task']} | {r['mechanism']} | {r['prior']} | {r['epsilon']:g} | {r['utility']:.3f} "
            f"[{r['utility_low']:.3f}, {r['utility_high']:.3f}] | {_pct(r.get('recovered'))} "
            f"[{_pct(r.get('recovered_low'))}, {_pct(r.get('recovered_high'))}] | {_pct(r.get('unchanged'))} |"
        )
    print()
    head = " | ".join(f"{p}: eps, utility [CI]" for p in priors)
    print(f"| task | mechanism | recovered % | {head} | dominates uniform |")
    print("|---|---|---|" + "---|" * len(priors) + "---|")
    for a in at:
        cells = " | ".join(
            f"{a[f'{p}:epsilon']:.2f}, {a[f'{p}:utility']:.3f} [{a[f'{p}:low']:.3f}, {a[f'{p}:high']:.3f}]"
            for p in priors
        )
        dom = [p for p in priors if p != "uniform" and a[f"{p}:low"] > a["uniform:high"]]
        print(f"| {a['task']} | {a['mechanism']} | {100 * a['recovered']:.1f} | {cells} | {', '.join(dom) or '-'} |")
    print()
    print("At the same epsilon, against uniform: dominates = utility interval above uniform's and recovery not")
    print("significantly higher (its lower bound at most uniform's upper bound).")
    print()
    print("| task | mechanism | epsilon | decoder | utility - uniform | recovered - uniform (points) | dominates |")
    print("|---|---|---|---|---|---|---|")
    base = {(r["task"], r["mechanism"], r["epsilon"]): r for r in rows if r["prior"] == "uniform"}
    for r in rows:
        u = base.get((r["task"], r["mechanism"], r["epsilon"]))
        if u is None or r["prior"] == "uniform" or "recovered" not in r or "recovered" not in u:
            continue
        dom = r["utility_low"] > u["utility_high"] and r["recovered_low"] <= u["recovered_high"]
        print(
            f"| {r['task']} | {r['mechanism']} | {r['epsilon']:g} | {r['prior']} | {r['utility'] - u['utility']:+.3f} "
            f"| {100 * (r['recovered'] - u['recovered']):+.1f} | {'yes' if dom else 'no'} |"
        )
    print()
    for mech in dict.fromkeys(a["mechanism"] for a in at):
        for p in priors:
            if p == "uniform":
                continue
            tasks = {a["task"] for a in at if a["mechanism"] == mech}
            wins = [t for t in tasks if all(a[f"{p}:low"] > a["uniform:high"] for a in at if a["task"] == t)]
            print(f"verdict {mech} prior={p}: dominates uniform at every matched level on {len(wins)} of "
                  f"{len(tasks)} tasks ({', '.join(sorted(wins)) or 'none'})")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="the folder holding imdb/, sst/, 20newsgroups/")
    ap.add_argument("--tasks", default="imdb,sst2,20newsgroups")
    ap.add_argument("--mechanisms", default="madlib")
    ap.add_argument("--priors", default="uniform,zipf")
    ap.add_argument("--epsilons", default=None, help="per mechanism: 'madlib:5,7,10;brr:1,2'")
    ap.add_argument("--vocab-size", type=int, default=20_000)
    ap.add_argument("--train-size", type=int, default=2000)
    ap.add_argument("--test-size", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--model", default="tfidf")
    ap.add_argument("--metric", default="accuracy")
    ap.add_argument("--attack-texts", type=int, default=300)
    ap.add_argument("--max-words", type=int, default=100)
    ap.add_argument("--draws", type=int, default=200)
    ap.add_argument("--attacker-prior", default="zipf")
    ap.add_argument("--recovery", default="auto", choices=("auto", "in-context", "per-word"),
                    help="auto: in-context when ngram is a decoder, else per-word")  # fmt: skip
    ap.add_argument("--ngram-corpus", default=DEFAULT_NGRAM_CORPUS, help="TARGET=TASK[:SIDE],...;...")
    ap.add_argument("--train-max-words", type=int, default=None, help="cut utility texts after N words")
    ap.add_argument("--speed", type=int, default=0, help="only time the decoders on N IMDb tokens (then exit)")
    ap.add_argument("--rounds", type=int, default=5, help="--speed: interleaved rounds")
    ap.add_argument("--levels", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="out/decode_prior")
    args = ap.parse_args(argv)

    from deniable.embedding import load_embedding

    t0 = time.perf_counter()
    emb = load_embedding(None, vocab_size=args.vocab_size)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.speed:
        speed(args, emb)
        return 0
    rows: list[dict[str, Any]] = []
    for task in args.tasks.split(","):
        task_rows = run_task(task, args, emb)
        with open(out / f"{task}.csv", "w", newline="", encoding="utf-8") as fh:
            w = csv.DictWriter(fh, fieldnames=sorted({k for r in task_rows for k in r}))
            w.writeheader()
            w.writerows(task_rows)
        rows += task_rows
        print(f"# {task} done ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    print_tables(rows, matched(rows, args.levels), args.priors.split(","))
    print(f"\n{len(rows)} settings, {time.perf_counter() - t0:.0f} s; command: python {' '.join(sys.argv)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
