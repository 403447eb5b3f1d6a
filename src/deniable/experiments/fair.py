"""Every mechanism side by side at matched privacy (issue 17, "fair comparison").

Nominal epsilons of different mechanisms are not comparable by themselves. This module
reads the results of one or more ``deniable evaluate`` runs made on the same splits
(same task, seed and sizes) and puts each mechanism's utility side by side in three
ways, each row saying which matching it uses:

(a) **same epsilon** - mechanisms whose guarantee is ``epsilon * d`` over the whole
    vocabulary in the *same* metric as the reference mechanism (Euclidean on the same
    embedding for Madlib, TEM, Vickrey, the exponential mechanism): utility at the
    reference's epsilons;
(b) **matched privacy ratio** (seed 001) - ``epsilon * d`` mechanisms in *another* metric
    (BRR's Hamming distance, Mahalanobis): reference epsilon ``e`` is matched by
    ``e * R`` with ``R = P_d(reference) / P_d(mechanism)`` (mean distance of random word
    pairs, :func:`deniable.calibrate.privacy_ratio`), which equalises the mean privacy-loss
    bound ``epsilon * P_d``;
(c) **matched empirical leakage** - any mechanism: utility at given membership-inference
    AUC levels. Per mechanism the mean AUC against log epsilon is made non-decreasing
    (isotonic regression, scikit-learn); the epsilon where it first reaches the level is
    interpolated on the log-epsilon grid and the utility is interpolated there;
(d) **matched attacker recovery** (issue 41) - any mechanism: utility at given shares of words the unigram
    Bayes attacker recovers (``deniable evaluate --attack reconstruction``, docs/attacker.md), the epsilon
    found the same way as for (c) (:func:`epsilon_at_level`) on the mechanism's recovery curve, which is
    measured once per mechanism and epsilon (it does not depend on the model or the task's mode).

Mechanisms whose guarantee is not plain ``epsilon * d`` over the whole vocabulary
(:attr:`~deniable.mechanisms.base.Mechanism.guarantee_form` is not ``"metric"``:
CusText's output sets, SanText+'s non-sensitive words) get no (a)/(b) row - their
epsilon does not bound the same thing - only a "nominal epsilon" row marked as not
matched, and their (c) rows.

Interpolation is linear in log epsilon between neighbouring grid points, of the mean and
of each bound of the 95% interval alike (an approximation of the interval, stated in the
output); nothing is extrapolated outside a mechanism's grid (empty cell).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .._errors import InvalidParameterError
from .results import Results, format_interval, write_files

__all__ = [
    "FAIR_KEYS",
    "MATCHINGS",
    "MechanismInfo",
    "default_auc_levels",
    "default_recovery_levels",
    "epsilon_at_level",
    "fair_markdown",
    "fair_report",
    "merge_results",
    "privacy_ratios",
    "read_recovery",
    "recovery_curve",
    "write_fair_report",
]

#: The setting columns of a fair report: how the privacy is matched, at which level.
FAIR_KEYS = ("matching", "model", "mode", "mechanism", "level")
#: The matchings, in the order of the report.
MATCHINGS = ("same epsilon", "privacy ratio", "nominal epsilon (not matched)", "membership AUC", "attacker recovery")
_SAME_SPLITS = ("task", "embedding", "seed", "train_size", "test_size", "max_words", "repeats", "oov", "models")


@dataclass(frozen=True)
class MechanismInfo:
    """What the report needs of a mechanism: its metric and the form of its guarantee."""

    name: str
    metric: str
    guarantee_form: str = "metric"
    options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def plain(self) -> bool:
        """True when the guarantee is ``epsilon * d`` over every pair of vocabulary words."""
        return self.guarantee_form == "metric"

    @classmethod
    def from_settings(cls, name: str, info: Mapping[str, Any]) -> MechanismInfo:
        return cls(name, str(info["metric"]), str(info.get("guarantee_form", "metric")), dict(info.get("options", {})))


def merge_results(results: Sequence[Results], names: Sequence[str] | None = None) -> Results:
    """One :class:`Results` of several evaluation runs on the same splits (same task, seed, sizes).

    The clean baseline of the first run is kept (the others are the same models on the same
    splits); a mechanism may appear in one run only. ``names`` label the runs in error messages.
    """
    if not results:
        raise InvalidParameterError("results", "none", "at least one evaluation run")
    labels = list(names or [f"run {i + 1}" for i in range(len(results))])
    first = results[0]
    merged = Results(first.name, first.keys, order=first.order, own_interval=first.own_interval)
    settings = {k: v for k, v in first.settings.items()}
    mechs: list[str] = []
    eps: set[float] = set()
    modes: list[str] = []
    infos: dict[str, Any] = {}
    for label, res in zip(labels, results, strict=True):
        st = res.settings
        for k in _SAME_SPLITS:
            if st.get(k) != first.settings.get(k):
                raise InvalidParameterError(
                    "results", label, f"a run on the same splits as the first ({k} differs: {st.get(k)!r})"
                )
        for m in st.get("mechanisms", []):
            if m in mechs:
                raise InvalidParameterError("results", label, f"runs of distinct mechanisms ({m} is in two runs)")
            mechs.append(m)
        eps.update(float(e) for e in st.get("epsilons", []))
        modes.extend(m for m in st.get("modes", []) if m not in modes)
        infos.update(st.get("mechanism_info", {}))
        keep_clean = res is first
        merged.rows.extend(dict(r) for r in res.rows if keep_clean or r["mechanism"] != "none")
        merged.notes.extend(n for n in res.notes if n not in merged.notes)
    settings.update(mechanisms=mechs, epsilons=sorted(eps), modes=modes, mechanism_info=infos)
    merged.settings = settings
    return merged


def _points(summary: Sequence[Mapping[str, Any]], metric: str, **match: Any) -> list[Mapping[str, Any]]:
    rows = [s for s in summary if s["metric"] == metric and all(s[k] == v for k, v in match.items())]
    return sorted(rows, key=lambda s: s["epsilon"])


def _at(points: Sequence[Mapping[str, Any]], eps: float) -> tuple[float, float, float, str]:
    """(mean, ci_low, ci_high, how) at ``eps``: the grid point itself, or log-linear interpolation."""
    if not points or not math.isfinite(eps) or eps <= 0:
        return math.nan, math.nan, math.nan, "no data"
    x = np.log([p["epsilon"] for p in points])
    le = math.log(eps)
    for p, xi in zip(points, x, strict=True):
        if math.isclose(xi, le, abs_tol=1e-9):
            return float(p["mean"]), float(p["ci_low"]), float(p["ci_high"]), "measured"
    if le < x[0] or le > x[-1]:
        return math.nan, math.nan, math.nan, "outside the grid"
    vals = [float(np.interp(le, x, [float(p[c]) for p in points])) for c in ("mean", "ci_low", "ci_high")]
    return vals[0], vals[1], vals[2], "interpolated"


def epsilon_at_level(
    epsilons: Sequence[float], values: Sequence[float], level: float, *, what: str = "value", name: str = "curve"
) -> float:
    """The smallest epsilon where the isotonic (non-decreasing) fit of ``values`` against log epsilon reaches
    ``level``, interpolated linearly in log epsilon between neighbouring grid points.

    Exact on a curve that is already non-decreasing and linear in log epsilon between grid points. Raises
    :class:`InvalidParameterError` (naming ``what`` and ``name``) when there are fewer than two grid points
    or ``level`` lies outside the fitted range: nothing is extrapolated.
    """
    from sklearn.isotonic import IsotonicRegression

    eps = np.asarray(epsilons, dtype=float)
    y = np.asarray(values, dtype=float)
    ok = np.isfinite(eps) & (eps > 0) & np.isfinite(y)
    eps, y = eps[ok], y[ok]
    if eps.size < 2:
        raise InvalidParameterError(what, name, "a curve measured at two epsilons or more")
    order = np.argsort(eps, kind="stable")
    x, y = np.log(eps[order]), y[order]
    fit = IsotonicRegression(increasing=True).fit_transform(x, y)
    if not math.isfinite(level) or level < fit[0] - 1e-12 or level > fit[-1] + 1e-12:
        raise InvalidParameterError(
            what,
            f"{level:g} for {name}",
            f"a level within {name}'s measured range [{fit[0]:.4g}, {fit[-1]:.4g}] "
            f"(epsilon {math.exp(x[0]):g} to {math.exp(x[-1]):g}); measure a wider epsilon grid",
        )
    i = int(np.argmax(fit >= level - 1e-12))
    if i == 0 or fit[i] == fit[i - 1]:
        return float(math.exp(x[i]))
    t = (level - fit[i - 1]) / (fit[i] - fit[i - 1])
    return float(math.exp(x[i - 1] + t * (x[i] - x[i - 1])))


def _epsilon_at_auc(points: Sequence[Mapping[str, Any]], level: float) -> float:
    """:func:`epsilon_at_level` on mean AUC; NaN when the fit never gets there or starts above it."""
    try:
        return epsilon_at_level([p["epsilon"] for p in points], [p["mean"] for p in points], level)
    except InvalidParameterError:
        return math.nan


def read_recovery(folder: str | Path) -> list[dict[str, Any]]:
    """The rows of a ``deniable evaluate --attack reconstruction`` folder's ``results.csv`` (mechanism, epsilon,
    group, metric, value, ci_low, ci_high, n_tokens), numbers parsed; ``attacker`` kept where present."""
    import csv

    from .._errors import DataError

    path = Path(folder) / "results.csv"
    if not path.is_file():
        raise DataError(f"{folder}: no results.csv of `deniable evaluate --attack reconstruction` there")
    rows: list[dict[str, Any]] = []
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        need = {"mechanism", "epsilon", "group", "metric", "value"}
        if not need <= set(reader.fieldnames or ()):
            raise DataError(f"{path}: not a reconstruction result (columns {', '.join(sorted(need))} needed)")
        for line, raw in enumerate(reader, start=2):
            try:
                row: dict[str, Any] = dict(raw)
                for k in ("epsilon", "value", "ci_low", "ci_high"):
                    row[k] = float(raw[k]) if raw.get(k) not in (None, "") else math.nan
            except ValueError:
                raise DataError(f"{path}, line {line}: a number expected in epsilon/value/ci_low/ci_high") from None
            rows.append(row)
    return rows


def recovery_curve(rows: Sequence[Mapping[str, Any]], mechanism: str, group: str = "all") -> list[dict[str, float]]:
    """One mechanism's recovered share against epsilon (``[{epsilon, mean, ci_low, ci_high}]``, sorted) from
    reconstruction result rows (:func:`read_recovery`); the unigram attacker's rows where several are."""
    pts = [
        r
        for r in rows
        if r["mechanism"] == mechanism
        and r["group"] == group
        and r["metric"] == "recovered"
        and r.get("attacker", "unigram") in ("unigram", "", None)
    ]
    curve = {float(r["epsilon"]): r for r in pts}
    return [
        {"epsilon": e, "mean": float(r["value"]), "ci_low": float(r["ci_low"]), "ci_high": float(r["ci_high"])}
        for e, r in sorted(curve.items())
    ]


def default_recovery_levels(rows: Sequence[Mapping[str, Any]], group: str = "all") -> list[float]:
    """Three recovery levels: the quartiles of the measured recovered shares (``group``), rounded to 0.01."""
    vals = [float(r["value"]) for r in rows if r["metric"] == "recovered" and r["group"] == group]
    vals = [v for v in vals if math.isfinite(v)]
    if not vals:
        return []
    q = np.quantile(vals, [0.25, 0.5, 0.75])
    return sorted({round(float(v), 2) for v in q})


def privacy_ratios(
    infos: Mapping[str, MechanismInfo],
    embedding: Any,
    *,
    reference: str = "madlib",
    pairs: int = 100000,
    rng: Any = None,
) -> dict[str, Any]:
    """Seed 001's privacy ratio (:func:`deniable.calibrate.privacy_ratio`) of the reference against every
    plain (``epsilon * d``) mechanism whose metric differs from the reference's, each rebuilt on
    ``embedding`` with its recorded options. ``{name: PrivacyRatio}``."""
    from ..calibrate.compare import privacy_ratio
    from ..mechanisms import make_mechanism

    ref = infos[reference]
    ref_mech = make_mechanism(reference, embedding, 1.0, **dict(ref.options))
    out = {}
    for name, info in infos.items():
        if info.plain and info.metric != ref.metric:
            mech = make_mechanism(name, embedding, 1.0, **dict(info.options))
            out[name] = privacy_ratio(ref_mech, mech, pairs=pairs, rng=rng)
    return out


def default_auc_levels(summary: Sequence[Mapping[str, Any]]) -> list[float]:
    """Three AUC levels: the quartiles of the private settings' mean AUCs, rounded to 0.005."""
    vals = [s["mean"] for s in summary if s["metric"] == "mia_auc" and s["mechanism"] != "none"]
    vals = [v for v in vals if math.isfinite(v)]
    if not vals:
        return []
    q = np.quantile(vals, [0.25, 0.5, 0.75])
    return sorted({round(float(v) / 0.005) * 0.005 for v in q})


def fair_report(
    results: Results,
    infos: Mapping[str, MechanismInfo],
    *,
    reference: str = "madlib",
    ratios: Mapping[str, float] | None = None,
    auc_levels: Sequence[float] | None = None,
    utility: str | None = None,
    recovery: Sequence[Mapping[str, Any]] | None = None,
    recovery_levels: Sequence[float] | None = None,
    recovery_group: str = "all",
) -> Results:
    """The side-by-side table (see the module docstring) as :class:`Results` with :data:`FAIR_KEYS`.

    ``infos``: every mechanism of ``results``; ``ratios``: ``{mechanism: P_d(reference) / P_d(mechanism)}``
    for the plain mechanisms whose metric is not the reference's (missing ones get no (b) row);
    ``auc_levels``: None = :func:`default_auc_levels`. Each row has ``value`` (the utility), ``ci_low``,
    ``ci_high``, ``epsilon`` (the mechanism's own epsilon used), ``how`` and ``note``. ``utility``: the
    metric compared (None: accuracy, or MAP for answer ranking). ``recovery``: rows of reconstruction runs
    (:func:`read_recovery`) to match at ``recovery_levels`` (None: :func:`default_recovery_levels`) of the
    share of ``recovery_group`` tokens recovered; a mechanism without a recovery curve, or whose curve does not
    reach a level, gets an empty cell saying why.
    """
    summary = results.summary()
    if utility is None:
        present = set(results.metrics())
        utility = next((m for m in ("accuracy", "map") if m in present), "accuracy")
    mechs = list(dict.fromkeys(s["mechanism"] for s in summary if s["mechanism"] != "none"))
    missing = [m for m in mechs if m not in infos]
    if missing:
        raise InvalidParameterError("mechanism info", ", ".join(missing), "the metric and guarantee of every mechanism")
    if reference not in mechs:
        raise InvalidParameterError("reference", reference, "a mechanism of the results (" + ", ".join(mechs) + ")")
    ref = infos[reference]
    if not ref.plain:
        raise InvalidParameterError("reference", reference, "a mechanism whose guarantee is epsilon * d")
    ratios = dict(ratios or {})
    out = Results(f"{results.name}: fair comparison", FAIR_KEYS, own_interval="the measured or interpolated 95% CI")
    out.settings = {
        "reference": reference,
        "reference_metric": ref.metric,
        "ratios": ratios,
        "utility": utility,
        "source": results.settings,
    }
    models_modes = sorted({(s["model"], s["mode"]) for s in summary if s["metric"] == utility and s["mode"] != "clean"})
    levels = list(default_auc_levels(summary) if auc_levels is None else auc_levels)
    out.settings["auc_levels"] = levels
    rec_rows = list(recovery or [])
    rec_levels = list(
        (default_recovery_levels(rec_rows, recovery_group) if recovery_levels is None else recovery_levels)
        if rec_rows
        else []
    )
    if recovery_levels and not rec_rows:
        raise InvalidParameterError("recovery", "none", "reconstruction results to match recovery levels on")
    out.settings["recovery_levels"] = rec_levels
    out.settings["recovery_group"] = recovery_group
    for model, mode in models_modes:
        ref_eps = [p["epsilon"] for p in _points(summary, utility, model=model, mode=mode, mechanism=reference)]
        base = _points(summary, utility, model=model, mechanism="none")
        for matching in ("same epsilon", "membership AUC", "attacker recovery"):
            lv = {"same epsilon": ref_eps, "membership AUC": levels, "attacker recovery": rec_levels}[matching]
            for level in lv:
                if base:
                    b = base[0]
                    out.add(
                        matching=matching, model=model, mode=mode, mechanism="clean", level=level, repeat=0,
                        metric=utility, value=b["mean"], ci_low=b["ci_low"], ci_high=b["ci_high"],
                        epsilon=math.inf, how="no privatization", note="clean baseline",
                    )  # fmt: skip
        for m in mechs:
            info = infos[m]
            pts = _points(summary, utility, model=model, mode=mode, mechanism=m)
            if not pts:
                continue
            row = {"model": model, "mode": mode, "mechanism": m, "repeat": 0, "metric": utility}
            if info.plain and info.metric == ref.metric:
                matching, scale, note = "same epsilon", 1.0, f"{info.metric}, same embedding"
            elif info.plain and m in ratios:
                matching, scale = "privacy ratio", float(ratios[m])
                note = f"R = P_d({reference}) / P_d({m}) = {scale:.4g} ({ref.metric} vs {info.metric})"
            elif info.plain:
                matching, scale, note = "privacy ratio", math.nan, f"no privacy ratio for {info.metric} given"
            else:
                matching, scale, note = "nominal epsilon (not matched)", 1.0, info.guarantee_form
            for e in ref_eps:
                own = e * scale
                mean, lo, hi, how = _at(pts, own)
                out.add(
                    **row, matching=matching, level=e, value=mean, ci_low=lo, ci_high=hi, epsilon=own, how=how,
                    note=note,
                )  # fmt: skip
            curve = recovery_curve(rec_rows, m, recovery_group) if rec_levels else []
            for level in rec_levels:
                try:
                    own = epsilon_at_level(
                        [p["epsilon"] for p in curve], [p["mean"] for p in curve], level, what="recovery", name=m
                    )
                    mean, lo, hi, how = _at(pts, own)
                except InvalidParameterError:
                    own, (mean, lo, hi) = math.nan, (math.nan,) * 3
                    how = "recovery level outside the measured curve" if curve else "no recovery curve"
                out.add(
                    **row, matching="attacker recovery", level=level, value=mean, ci_low=lo, ci_high=hi,
                    epsilon=own, how=how,
                    note=f"isotonic recovered({recovery_group}, log epsilon), then utility at that epsilon",
                )  # fmt: skip
            if mode != "train":
                continue
            auc = _points(summary, "mia_auc", model=model, mode="train", mechanism=m)
            for level in levels:
                own = _epsilon_at_auc(auc, level)
                mean, lo, hi, how = _at(pts, own)
                if math.isnan(own):
                    how = "AUC level not reached on the grid"
                out.add(
                    **row, matching="membership AUC", level=level, value=mean, ci_low=lo, ci_high=hi, epsilon=own,
                    how=how, note="isotonic AUC(log epsilon), then utility at that epsilon",
                )  # fmt: skip
    return out


def _cell(r: Mapping[str, Any], with_eps: bool) -> str:
    cell = format_interval(r["value"], r["ci_low"], r["ci_high"])
    if not cell:
        return "—"
    if with_eps and math.isfinite(r["epsilon"]):
        cell += f" @ε {r['epsilon']:.3g}"
    return cell


def fair_markdown(report: Results) -> str:
    """The report as markdown: one table per (model, mode, matching group), mechanisms as rows."""
    st = report.settings
    rows = report.rows
    md = [
        f"Reference: **{st['reference']}** ({st['reference_metric']}). Cells: {st['utility']} mean [95% CI]; "
        "`@ε x` = the mechanism's own epsilon used (interpolated in log epsilon between its grid points, "
        "mean and interval bounds alike; — = outside its grid).",
        "",
    ]
    for model, mode in dict.fromkeys((r["model"], r["mode"]) for r in rows):
        mine = [r for r in rows if r["model"] == model and r["mode"] == mode]
        side = "train private, test clean" if mode == "train" else "train clean, test private"
        for title, matchings, level_name in (
            (
                "matched privacy-loss bound (same epsilon, or the seed-001 privacy ratio)",
                ("same epsilon", "privacy ratio", "nominal epsilon (not matched)"),
                f"{st['reference']} ε",
            ),
            ("matched empirical leakage (membership-inference AUC)", ("membership AUC",), "MIA AUC"),
            (
                f"matched attacker recovery (unigram attacker, {st.get('recovery_group', 'all')} tokens)",
                ("attacker recovery",),
                "recovered",
            ),
        ):
            part = [r for r in mine if r["matching"] in matchings]
            if not any(r["mechanism"] != "clean" for r in part):
                continue
            levels = sorted({r["level"] for r in part})
            md += [f"### {model}, {side}: {title}", ""]
            md.append("| mechanism | matching | " + " | ".join(f"{level_name} {lv:g}" for lv in levels) + " |")
            md.append("|---|---|" + "---|" * len(levels))
            order = {m: i for i, m in enumerate(MATCHINGS)}
            mechs = dict.fromkeys(
                (r["mechanism"], r["matching"], r["note"])
                for r in sorted(part, key=lambda r: (r["mechanism"] != "clean", order.get(r["matching"], 9)))
            )
            for mech, matching, note in mechs:
                cells = {r["level"]: r for r in part if r["mechanism"] == mech and r["matching"] == matching}
                label = "clean baseline" if mech == "clean" else f"{matching}: {note}"
                with_eps = mech != "clean" and matching != "same epsilon"
                vals = [_cell(cells[lv], with_eps) if lv in cells else "" for lv in levels]
                md.append(f"| {mech} | {label} | " + " | ".join(vals) + " |")
            md.append("")
    return "\n".join(md)


def _plot(results: Results, report: Results, path: Path, title: str) -> list[Path]:
    """``fair-epsilon.png`` (utility against the reference-equivalent epsilon) and ``fair-auc.png``
    (utility against membership AUC), the measured points of every mechanism."""
    from ..report import new_figure, save_figure

    summary = results.summary()
    st = report.settings
    utility, ratios = st["utility"], st["ratios"]
    infos = {m: MechanismInfo.from_settings(m, i) for m, i in results.settings.get("mechanism_info", {}).items()}
    ref_metric = st["reference_metric"]
    mechs = list(dict.fromkeys(s["mechanism"] for s in summary if s["mechanism"] != "none"))
    cmap = _colors(len(mechs))
    paths = []
    for kind in ("epsilon", "auc"):
        fig = new_figure(6.4, 4.2)
        ax = fig.subplots()
        for i, m in enumerate(mechs):
            info = infos.get(m)
            pts = _points(summary, utility, mode="train", mechanism=m)
            if not pts or info is None:
                continue
            y = np.array([p["mean"] for p in pts])
            if kind == "epsilon":
                if info.plain and info.metric != ref_metric and m not in ratios:
                    continue
                scale = 1.0 if (not info.plain or info.metric == ref_metric) else float(ratios[m])
                x = np.array([p["epsilon"] for p in pts]) / scale
                style = "o-" if info.plain else "x:"
                label = m if info.plain else f"{m} (nominal ε, not matched)"
            else:
                auc = {p["epsilon"]: p["mean"] for p in _points(summary, "mia_auc", mode="train", mechanism=m)}
                x = np.array([auc.get(p["epsilon"], math.nan) for p in pts])
                style, label = "o-", m
            ax.plot(x, y, style, color=cmap[i], label=label, ms=4)
        base = [s for s in summary if s["metric"] == utility and s["mechanism"] == "none"]
        if base:
            ax.axhline(base[0]["mean"], color="black", lw=1, label="clean baseline")
        if kind == "epsilon":
            ax.set_xscale("log")
            ax.set_xlabel(f"{st['reference']}-equivalent epsilon (own epsilon / privacy ratio)")
        else:
            ax.axvline(0.5, color="grey", ls=":", lw=1)
            ax.set_xlabel("membership-inference AUC (0.5 = no leakage)")
        ax.set_ylabel(f"{utility} (train private, test clean)")
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        paths.append(save_figure(fig, path / f"fair-{kind}.png"))
    return paths


def _colors(n: int) -> list[Any]:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


def write_fair_report(
    results: Results, report: Results, folder: str | Path, *, plots: bool = True, command: str = ""
) -> dict[str, Path]:
    """Write the merged runs (:func:`~deniable.experiments.output.write_results`: runs.csv, results.csv,
    results.md, settings.json, plots) and the fair report: ``fair.csv``, ``fair.md``, ``fair-*.png``."""
    from .output import write_results

    out = Path(folder)
    paths = write_results(results, out, plots=plots, command=command)
    md = [f"# Fair comparison: {results.name} with {results.settings.get('embedding', '')}", ""]
    if command:
        md += ["```", command, "```", ""]
    md += [fair_markdown(report)]
    if plots:
        for p in _plot(results, report, out, f"{results.name}: every mechanism at matched privacy"):
            paths[p.stem] = p
            md += [f"![{p.stem}]({p.name})", ""]
    columns = [*FAIR_KEYS, "value", "ci_low", "ci_high", "epsilon", "how", "note"]
    written = write_files(out, tables={"fair.csv": (report.rows, columns)}, texts={"fair.md": "\n".join(md)})
    return paths | {"fair": written["fair.csv"], "fair_markdown": written["fair.md"]}
