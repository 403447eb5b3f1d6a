"""MkDocs hook: tidy the reST of the docstrings in the rendered API reference.

The docstrings use Sphinx roles (``:func:`name```) and literal-block markers (``Quick start::``),
which mkdocstrings renders as text: ``:func:<code>name</code>``. This drops the role (keeping the code
span, without a leading ``~``) and the second colon of a paragraph that opens a code block.
"""

from __future__ import annotations

import re
from typing import Any

_ROLE = re.compile(r":(?:func|meth|class|mod|attr|data|exc|obj|const|py:\w+):(<code>)~?")
_LITERAL = re.compile(r"::</p>")


def on_page_content(html: str, **kwargs: Any) -> str:
    """Applied to every page's HTML; only docstrings contain these patterns."""
    return _LITERAL.sub(":</p>", _ROLE.sub(r"\1", html))
