"""``deniable inspect-manifest``: print run manifests, and the privacy ledger of several releases."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from ._common import app, err


def _flatten(data: dict[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            rows.extend(_flatten(value, name + "."))
        elif isinstance(value, list):
            rows.append((name, "; ".join(str(v) for v in value) if value else "-"))
        elif isinstance(value, float):
            rows.append((name, f"{value:.6g}"))
        else:
            rows.append((name, "-" if value is None else str(value)))
    return rows


@app.command("inspect-manifest")
def inspect_manifest_cmd(
    paths: Annotated[
        list[str],
        typer.Argument(
            help="Manifests (*.manifest.json, _MANIFEST.json) or the outputs they describe; several: the ledger. "
            "A budget file (deniable-budget.json, from privatize --budget) gives the ledger of its releases."
        ),
    ],
    as_json: Annotated[bool, typer.Option("--json", help="Print the manifest (several: the ledger) as JSON.")] = False,
    budget: Annotated[
        float | None,
        typer.Option(
            "--budget",
            help="Total epsilon per word allowed for one input: warn and exit 1 where the releases given spend more.",
        ),
    ] = None,
) -> None:
    """Print how an output was made; given several, sum what was released about each input.

    A word released twice at epsilon e is protected at 2e: the ledger adds the epsilons of
    the releases of each input and column and warns where an input was released more than
    once or over --budget. It never undercounts: two manifests are one release (recomputed)
    only with the same run key, mechanism and parameters and keyed input digest.
    """
    from rich.console import Console
    from rich.table import Table

    from .._errors import InvalidParameterError
    from ..api import privacy_ledger, read_manifest

    if budget is not None and not budget > 0:
        raise InvalidParameterError("--budget", budget, "a number > 0")
    from ..budget import is_budget_file, read_budget_file

    out = Console(soft_wrap=True)
    items: list[Any] = []
    for path in paths:  # a budget file stands for the releases it records (and its ceiling)
        if is_budget_file(path):
            ceiling, releases = read_budget_file(path)
            items.extend(releases)
            if budget is None and ceiling != float("inf"):
                budget = ceiling
        else:
            items.append(path)
    if len(paths) == 1 and budget is None and items == paths:
        manifest = read_manifest(paths[0])
        if as_json:
            out.print_json(json.dumps(manifest))
            return
        table = Table(title="deniable run manifest", show_header=True, header_style="bold")
        table.add_column("field", style="cyan", no_wrap=True)
        table.add_column("value", overflow="fold")
        for key, value in _flatten(manifest):
            table.add_row(key, value)
        out.print(table)
        return
    entries, warnings = privacy_ledger(items, budget=budget)
    over = budget is not None and any(e.epsilon > budget for e in entries)
    if as_json:
        out.print_json(json.dumps({"ledger": [e.describe() for e in entries], "warnings": warnings, "budget": budget}))
    else:
        table = Table(title="deniable privacy ledger", show_header=True, header_style="bold")
        for name in ("input", "column", "releases", "epsilon per word", "records", "mechanism"):
            table.add_column(name, overflow="fold")
        for e in entries:
            table.add_row(
                e.input or "(unknown)",
                e.column,
                str(e.releases),
                f"{e.epsilon:g}",
                ", ".join(str(r) for r in e.records),
                ", ".join(e.mechanisms),
            )
        out.print(table)
        for w in warnings:
            err.print(f"[yellow]warning: {w}[/]", highlight=False)
    if over:
        raise typer.Exit(1)
