"""One rule for column names that repeat (CSV/TSV headers, Parquet schemas, pandas DataFrames).

A table can hold two columns of the same name. Privatizing "the" column ``text`` would
then rewrite one of them and release the other verbatim, so a repeated name is refused
wherever it could be ambiguous, with an error naming the column (never a value):

- a chosen column (``--column``, ``columns=``, ``column=``) whose name appears more than
  once; names that differ only in Unicode normalization (NFC / NFD, compatibility
  forms) or surrounding spaces (``text`` and `` text`` in ``text, text``) count as the
  same name, since a reader cannot tell them apart;
- with every column read (``columns=None``), any name that appears more than once.

A repeated name that is not chosen is kept like any other column (written back as it was).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Sequence
from typing import Any

from .._errors import DataError

_RENAME = "rename the repeats (which one is meant is ambiguous: privatizing one would release the other unchanged)"


def _key(name: Any) -> Any:
    """What makes two names look the same: NFKC form without surrounding spaces (non-str names as they are)."""
    return unicodedata.normalize("NFKC", name).strip() if isinstance(name, str) else name


def check_unique_columns(names: Sequence[Any], chosen: Iterable[Any] | None, where: str) -> None:
    """Refuse a chosen name that appears more than once in ``names`` (every name when ``chosen`` is None).

    ``where`` names the table in the message (``"the header row"``, ``"the Parquet schema"``,
    ``"the DataFrame"``). A :class:`~deniable.DataError` (CLI exit 3).
    """
    if chosen is None:
        seen: set[Any] = set()
        for n in names:
            if n in seen:
                raise DataError(f"column {n!r} appears {list(names).count(n)} times in {where}; {_RENAME}")
            seen.add(n)
        return
    keys = [_key(n) for n in names]
    for c in chosen:
        same = [n for n, k in zip(names, keys, strict=True) if k == _key(c)]
        if len(same) > 1:
            spelled = "" if len(set(same)) == 1 else " (as " + ", ".join(repr(n) for n in same) + ")"
            raise DataError(f"column {c!r} appears {len(same)} times in {where}{spelled}; {_RENAME}")
