"""``deniable inspect-manifest``: print the run manifest written beside an output."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from ._common import app


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
    path: Annotated[
        str,
        typer.Argument(help="A manifest (*.manifest.json, _MANIFEST.json) or the output it describes."),
    ],
    as_json: Annotated[bool, typer.Option("--json", help="Print the manifest as JSON.")] = False,
) -> None:
    """Print how an output was made: mechanism, parameters, embedding fingerprint, policies, counts, times."""
    from rich.console import Console
    from rich.table import Table

    from ..api import read_manifest

    manifest = read_manifest(path)
    out = Console(soft_wrap=True)
    if as_json:
        out.print_json(json.dumps(manifest))
        return
    table = Table(title="deniable run manifest", show_header=True, header_style="bold")
    table.add_column("field", style="cyan", no_wrap=True)
    table.add_column("value", overflow="fold")
    for key, value in _flatten(manifest):
        table.add_row(key, value)
    out.print(table)
