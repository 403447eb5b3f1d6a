"""Calibration plots (PNG) and a one-page HTML report (the ``report`` extra: matplotlib).

The figures follow the papers: histograms of ``N_w`` and ``S_w`` per epsilon (Figs. 5-6
of seed 000), their averages and worst cases against epsilon (Fig. 3), the percentile
curves of k-th-neighbour distances and their histogram at k = 10 (Fig. 2), and a table
of example outputs at increasing epsilon (Table 1 of seed 003).

matplotlib is imported only when a plot is drawn, through its object API (``Figure`` +
the Agg canvas), so the global pyplot state and backend are never touched.
"""

from __future__ import annotations

import datetime as _dt
import html
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ._errors import DeniableError

if TYPE_CHECKING:
    from .calibrate.choose import EpsilonChoice
    from .calibrate.geometry import NeighbourDistances
    from .calibrate.stats import DeniabilityStats
    from .calibrate.table import CalibrationTable

__all__ = [
    "new_figure",
    "plot_averages",
    "plot_curve",
    "plot_histograms",
    "plot_neighbours",
    "require_matplotlib",
    "save_figure",
    "write_report",
]

_PERCENTILE_STYLES = ("--", "-.", "-", "-.", "--")


#: what a plot asked for without matplotlib says (the 'report' extra has it)
NO_MATPLOTLIB = "plots need matplotlib, which is not installed: pip install 'deniable[report]'"


def require_matplotlib(alternative: str = "") -> None:
    """Raise :class:`DeniableError` now when matplotlib is missing: a command that will plot
    checks before its work, not after it (``alternative``: e.g. "or pass --no-plots")."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        raise DeniableError(f"{NO_MATPLOTLIB}{f' ({alternative})' if alternative else ''}")


def new_figure(width: float, height: float) -> Any:
    """A matplotlib ``Figure`` on the Agg canvas (``width`` x ``height`` inches); pyplot's global state is untouched."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:  # pragma: no cover - depends on the environment
        raise DeniableError(NO_MATPLOTLIB) from None
    fig = Figure(figsize=(width, height), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig: Any, path: str | Path, *, dpi: float | None = None) -> Path:
    """Write ``fig`` as PNG to ``path`` (parent folders created); returns the path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png", dpi=dpi if dpi is not None else "figure")
    return out


def _label(st: DeniabilityStats) -> str:
    return f"ε = {st.epsilon:g}"


def plot_histograms(
    stats: Sequence[DeniabilityStats], path: str | Path, *, bins: int = 50, title: str | None = None
) -> Path:
    """Histograms of ``S_w`` (top row) and of ``N_w`` as a count out of ``samples`` (bottom row).

    One column per epsilon, counts on a log scale, x from 0 to ``samples`` -- the layout
    of Figs. 5-6 of seed 000. For exact mechanisms the values are expectations.
    """
    if not stats:
        raise DeniableError("nothing to plot: no statistics")
    cols = len(stats)
    fig = new_figure(2.6 * cols + 0.6, 5.0)
    axes = fig.subplots(2, cols, squeeze=False, sharey="row")
    for j, st in enumerate(sorted(stats, key=lambda s: s.epsilon)):
        n = st.samples
        edges = np.linspace(0, n, bins + 1)
        exp = "E " if st.exact else ""
        for i, (vals, xlabel, name) in enumerate(
            (
                (st.s_w, f"{exp}num. of distinct words (of {n})", "S_w"),
                (st.n_w * n, f"{exp}count of M(w) = w (of {n})", "N_w"),
            )
        ):
            ax = axes[i, j]
            ax.hist(np.clip(vals, 0, n), bins=edges, color="#4C72B0" if i == 0 else "#C44E52")
            ax.set_yscale("log")
            ax.set_xlim(0, n)
            ax.set_title(f"{name} at {_label(st)}", fontsize=9)
            ax.set_xlabel(xlabel, fontsize=8)
            ax.tick_params(labelsize=7)
            if j == 0:
                ax.set_ylabel("words (log scale)", fontsize=8)
    fig.suptitle(title or _default_title(stats), fontsize=10)
    return save_figure(fig, path)


def _default_title(stats: Sequence[DeniabilityStats]) -> str:
    st = stats[0]
    how = "exact" if st.exact else f"{st.samples} draws per word"
    return f"{st.mechanism}: {len(st):,} of {st.vocab_size:,} words, {how}"


def plot_averages(stats: Sequence[DeniabilityStats], path: str | Path, *, title: str | None = None) -> Path:
    """``S_w`` and ``N_w`` (count out of ``samples``) against epsilon (Fig. 3 of seed 000).

    Besides the averages the papers plot, it shows the worst cases (min ``S_w``, max
    ``N_w``) and the 5th-95th percentile band: calibration is about the worst cases.
    """
    if not stats:
        raise DeniableError("nothing to plot: no statistics")
    ordered = sorted(stats, key=lambda s: s.epsilon)
    eps = np.array([s.epsilon for s in ordered])
    n = ordered[0].samples
    fig = new_figure(9.0, 3.6)
    ax_s, ax_n = fig.subplots(1, 2)
    for ax, key, worst_fn, worst_name, color in (
        (ax_s, "s", np.min, "min", "#4C72B0"),
        (ax_n, "n", np.max, "max", "#C44E52"),
    ):
        vals = [s.s_w if key == "s" else s.n_w * n for s in ordered]
        mean = np.array([v.mean() for v in vals])
        lo = np.array([np.percentile(v, 5) for v in vals])
        hi = np.array([np.percentile(v, 95) for v in vals])
        worst = np.array([worst_fn(v) for v in vals])
        ax.fill_between(eps, lo, hi, color=color, alpha=0.15, label="5th-95th percentile")
        ax.plot(eps, mean, "o-", color=color, label="average")
        ax.plot(eps, worst, "s:", color="black", label=f"worst case ({worst_name})")
        ax.set_xlabel("epsilon")
        ax.set_ylim(0, n * 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    ax_s.set_ylabel(f"S_w: distinct words (of {n})")
    ax_n.set_ylabel(f"N_w: count of M(w) = w (of {n})")
    fig.suptitle(title or _default_title(stats), fontsize=10)
    return save_figure(fig, path)


def plot_curve(table: CalibrationTable, path: str | Path, *, title: str | None = None) -> Path:
    """A typical text against epsilon (:mod:`deniable.calibrate.table`): the share of tokens released
    unchanged (with its 95% interval), the share that keeps its meaning (unchanged or replaced by
    one of the word's 10 nearest neighbours) and the mean cosine similarity of output to input."""
    pts = table.points
    if not pts:
        raise DeniableError("nothing to plot: an empty calibration table")
    eps = np.array([p.epsilon for p in pts])
    fig = new_figure(7.0, 3.8)
    ax = fig.subplots(1, 1)
    ax.fill_between(eps, [p.unchanged_low for p in pts], [p.unchanged_high for p in pts], color="#C44E52", alpha=0.2)
    ax.plot(eps, [p.unchanged for p in pts], "o-", color="#C44E52", ms=3, label="unchanged (privacy: lower is better)")
    if all(p.readable is not None for p in pts):
        ax.plot(eps, [p.readable for p in pts], "s-", color="#4C72B0", ms=3, label="unchanged or a near word (meaning)")
    if all(p.similarity is not None for p in pts):
        ax.plot(eps, [p.similarity for p in pts], "^:", color="#55A868", ms=3, label="mean cosine similarity")
    ax.axhline(0.5, color="black", lw=0.6, ls="--")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("epsilon")
    ax.set_ylabel("share of a typical text's tokens")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.suptitle(title or f"{table.mechanism}: a typical text ({table.tokens:,} public reference tokens)", fontsize=10)
    return save_figure(fig, path)


def curve_section(table: CalibrationTable, folder: Path) -> list[str]:
    """The report's section on a calibration table: the verdict in words, the curve and its table."""
    img = plot_curve(table, folder / "curve.png")
    rows = [
        [f"{p.epsilon:.3g}", f"{p.unchanged:.1%}", f"{p.unchanged_high:.1%}",
         "" if p.readable is None else f"{p.readable:.1%}", "" if p.similarity is None else f"{p.similarity:.2f}"]
        for p in table.points
    ]  # fmt: skip
    return [
        "<h2>A typical text against epsilon</h2>",
        f"<p><b>{_e(table.verdict())}</b></p>",
        "<p class='note'>Reference text: "
        f"{table.tokens:,} word tokens drawn from Zipf's law over the embedding's frequency ranks (public; never "
        "the input), each privatized once per epsilon. Unchanged: share released as the same word (95% "
        "Clopper-Pearson upper bound beside it; <code>--epsilon auto --target</code> checks that bound). Meaning "
        "kept: unchanged, or replaced by one of the word's 10 nearest neighbours.</p>",
        f"<img src='{_e(img.name)}' alt='unchanged share and utility against epsilon'>",
        _table(["ε", "unchanged", "upper bound", "meaning kept", "mean similarity"], rows, left=1),
    ]


def _geometry_name(geometry: NeighbourDistances) -> str:
    if geometry.metric == "hamming":
        return "code geometry (Hamming distances between binary codes)"
    return "embedding geometry"


def plot_neighbours(
    geometry: NeighbourDistances, path: str | Path, *, k_hist: int = 10, title: str | None = None
) -> Path:
    """Percentile curves of the k-th-neighbour distance against k (log scale), and the histogram at ``k_hist``.

    The layout of Fig. 2 of seed 000.
    """
    from .calibrate.geometry import DEFAULT_PERCENTILES

    fig = new_figure(9.0, 3.6)
    ax_p, ax_h = fig.subplots(1, 2)
    pct = geometry.percentiles(DEFAULT_PERCENTILES)
    for i, p in enumerate(DEFAULT_PERCENTILES):
        ax_p.plot(geometry.ks, pct[i], _PERCENTILE_STYLES[i], marker="o", ms=3, label=f"{p:g}th percentile")
    ax_p.set_xscale("log")
    ax_p.set_xlabel("k (log scale)")
    ax_p.set_ylabel(f"{geometry.label} to the k-th neighbour")
    ax_p.grid(alpha=0.3)
    ax_p.legend(fontsize=8)
    k = k_hist if k_hist in geometry.ks else geometry.ks[min(len(geometry.ks) - 1, 3)]
    counts, edges = geometry.histogram(k, bins=60)
    ax_h.bar(edges[:-1], counts, width=np.diff(edges), align="edge", color="#55A868")
    ax_h.set_xlabel(f"{geometry.label} to the {k}-th neighbour")
    ax_h.set_ylabel("words")
    who = f"{len(geometry):,} sampled words" if geometry.sampled else f"all {len(geometry):,} words"
    fig.suptitle(title or f"{_geometry_name(geometry)} over {who}", fontsize=10)
    return save_figure(fig, path)


# --------------------------------------------------------------------------------------
# HTML
# --------------------------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2em auto;max-width:1100px;color:#222}
h1{font-size:1.5em} h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:0.8em 0;font-size:0.9em}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right} th{background:#f3f3f3}
td.l,th.l{text-align:left} img{max-width:100%;border:1px solid #eee;margin:0.5em 0}
.note{color:#555;font-size:0.9em} .ok{color:#1a7f37;font-weight:600} .bad{color:#b42318;font-weight:600}
"""


def _e(v: object) -> str:
    return html.escape(str(v), quote=True)


def _fmt(v: object) -> str:
    if isinstance(v, float | np.floating):
        f = float(v)
        if f == 0 or 1e-3 <= abs(f) < 1e6:
            return f"{f:,.4g}" if abs(f) < 1000 else f"{f:,.0f}"
        return f"{f:.3g}"
    if isinstance(v, int | np.integer):
        return f"{int(v):,}"
    return str(v)


def _table(header: Sequence[str], rows: Sequence[Sequence[object]], left: int = 1) -> str:
    th = "".join(f'<th class="{"l" if i < left else ""}">{_e(h)}</th>' for i, h in enumerate(header))
    body = []
    for r in rows:
        cells = "".join(f'<td class="{"l" if i < left else ""}">{_e(_fmt(c))}</td>' for i, c in enumerate(r))
        body.append(f"<tr>{cells}</tr>")
    return f"<table><tr>{th}</tr>{''.join(body)}</table>"


def _summary_rows(stats: Sequence[DeniabilityStats]) -> tuple[list[str], list[list[object]]]:
    header = [
        "ε",
        "method",
        "words",
        "N_w mean",
        "N_w p95",
        "N_w max",
        "S_w mean",
        "S_w p5",
        "S_w min",
        "η-support min",
        "η-support median",
        "Shannon (bits) median",
        "min-entropy (bits) min",
        "seconds",
    ]
    rows: list[list[object]] = []
    for st in sorted(stats, key=lambda s: s.epsilon):
        rows.append(
            [
                f"{st.epsilon:g}",
                st.method,
                len(st),
                float(st.n_w.mean()),
                float(np.percentile(st.n_w, 95)),
                float(st.n_w.max()),
                float(st.s_w.mean()),
                float(np.percentile(st.s_w, 5)),
                float(st.s_w.min()),
                int(st.support.min()),
                float(np.median(st.support)),
                float(np.median(st.shannon)),
                float(st.min_entropy.min()),
                round(st.seconds, 1),
            ]
        )
    return header, rows


def write_report(
    folder: str | Path,
    stats: Sequence[DeniabilityStats],
    *,
    geometry: NeighbourDistances | None = None,
    examples: Mapping[str, Mapping[float, Sequence[str]]] | None = None,
    choice: EpsilonChoice | None = None,
    curve: CalibrationTable | None = None,
    title: str = "deniable calibration report",
    params: Mapping[str, object] | None = None,
    write_csv: bool = True,
) -> Path:
    """Write the PNG plots, ``stats.csv`` and ``index.html`` into ``folder``; return the HTML path.

    The page shows the parameters, a summary table per epsilon, the choice of epsilon
    (when ``choice`` is given), the histograms and averages plots, the neighbour-distance
    plot (when ``geometry`` is given) and the example outputs (when ``examples`` is given:
    ``word -> {epsilon -> outputs}``). Every string is HTML-escaped.
    """
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    stats = sorted(stats, key=lambda s: s.epsilon)
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        f"<p class='note'>generated {_e(_dt.datetime.now().isoformat(timespec='seconds'))} by deniable</p>",
    ]
    # parameters
    info: dict[str, object] = {}
    if stats:
        first = stats[0]
        info.update(
            {
                "mechanism": first.mechanism,
                "epsilons": ", ".join(f"{s.epsilon:g}" for s in stats),
                "words analysed": f"{len(first):,} of {first.vocab_size:,}"
                + (" (uniform random sample)" if len(first) < first.vocab_size else " (all)"),
                "draws per word (samples)": first.samples,
                "eta (eta-support covers 1 - eta)": first.eta,
                "how": first.note,
            }
        )
        for k, v in first.params.items():
            info[k.removeprefix("mech_")] = v
    info.update(dict(params or {}))
    parts.append("<h2>Parameters</h2>")
    parts.append(_table(["parameter", "value"], [[k, v] for k, v in info.items()], left=2))
    if stats:
        header, rows = _summary_rows(stats)
        parts.append("<h2>Plausible deniability per epsilon</h2>")
        parts.append(
            "<p class='note'>N_w = Pr[M(w) = w]; S_w = distinct outputs in the given number of draws "
            "(for exact mechanisms: its expectation); η-support = fewest words holding ≥ 1 − η of the "
            "output probability. Worst cases matter more than averages (seed 000, sec. 6).</p>"
        )
        parts.append(_table(header, rows, left=2))
    if choice is not None:
        parts.append("<h2>Choosing epsilon</h2>")
        verdict = (
            f"<span class='ok'>ε = {choice.epsilon:g}</span>"
            if choice.epsilon is not None
            else "<span class='bad'>no evaluated ε meets the constraints</span>"
        )
        parts.append(f"<p>Largest ε meeting <b>{_e(choice.constraints.describe())}</b>: {verdict}</p>")
        parts.append(f"<pre>{_e(choice.summary())}</pre>")
        parts.append(
            _table(
                ["ε", "constrained N_w", "constrained support", "meets constraints"],
                [[f"{e.epsilon:g}", e.unchanged, e.support, "yes" if e.feasible else "no"] for e in choice.evaluations],
            )
        )
    if curve is not None:
        parts.extend(curve_section(curve, out))
    if stats:
        hist = plot_histograms(stats, out / "histograms.png")
        avg = plot_averages(stats, out / "averages.png")
        parts.append("<h2>Histograms of S_w and N_w (cf. seed 000, Figs. 5-6)</h2>")
        parts.append(f"<img src='{_e(hist.name)}' alt='histograms of S_w and N_w per epsilon'>")
        parts.append("<h2>Averages and worst cases against epsilon (cf. seed 000, Fig. 3)</h2>")
        parts.append(f"<img src='{_e(avg.name)}' alt='S_w and N_w against epsilon'>")
    if geometry is not None:
        geo = plot_neighbours(geometry, out / "neighbours.png")
        name = _geometry_name(geometry)
        parts.append(f"<h2>{_e(name[0].upper() + name[1:])} (cf. seed 000, Fig. 2)</h2>")
        if geometry.metric == "hamming":
            parts.append(
                "<p class='note'>BRR's guarantee is in the Hamming distance between the words' binary codes, "
                "so these are Hamming distances in bits (0 = words sharing a code); ε is per bit.</p>"
            )
        parts.append(f"<p class='note'>{_e(geometry.describe())}; {geometry.seconds:.1f} s.</p>")
        parts.append(f"<img src='{_e(geo.name)}' alt='k-th neighbour distance percentiles'>")
        table = geometry.table()
        parts.append(_table(list(table[0]), [list(r.values()) for r in table], left=1))
    if examples:
        eps_all = sorted({e for row in examples.values() for e in row})
        parts.append("<h2>Example outputs at increasing epsilon (cf. seed 003, Table 1)</h2>")
        parts.append("<p class='note'>Independent draws of M(w) for each word; higher ε, closer words.</p>")
        rows_ex = [[f"{e:g}", *(", ".join(examples[w].get(e, [])) for w in examples)] for e in eps_all]
        parts.append(_table(["ε", *examples.keys()], rows_ex, left=len(examples) + 1))
    if write_csv and stats:
        csv_path = out / "stats.csv"
        _write_all_csv(stats, csv_path)
        parts.append(f"<p>Per-word statistics: <a href='{_e(csv_path.name)}'>{_e(csv_path.name)}</a></p>")
        meta = [s.describe() for s in stats]
        (out / "stats.json").write_text(json.dumps(meta, indent=2, default=str), encoding="utf-8")
    parts.append("</body></html>")
    page = out / "index.html"
    page.write_text("\n".join(parts), encoding="utf-8")
    return page


def _write_all_csv(stats: Sequence[DeniabilityStats], path: Path) -> None:
    import csv

    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        cols0 = list(stats[0].columns())
        writer.writerow(["epsilon", "word", "id", *cols0])
        for st in stats:
            cols = st.columns()
            arrays = [np.asarray(cols[c]) if c in cols else np.full(len(st), np.nan) for c in cols0]
            for i, (wid, word) in enumerate(zip(st.ids.tolist(), st.words, strict=True)):
                writer.writerow([f"{st.epsilon:g}", word, wid, *(_cell(a[i]) for a in arrays)])


def _cell(v: Any) -> str:
    if isinstance(v, np.floating | float):
        return f"{float(v):.6g}"
    return str(v)
