"""Read and write text records: plain text, CSV, TSV, JSONL and Parquet (one record layer).

Everything streams in batches of records, so memory stays bounded whatever the input
size. Output files are written to a temporary file beside the destination and renamed
into place only on success: a failed or killed run leaves no partial output.

Reading records (:func:`read_table`, :func:`iter_batches`) gives ``{column: values}``
with one entry per record:

- ``txt``: every line is a record (blank lines included) in the column ``"text"``,
  without its line ending;
- ``csv`` / ``tsv``: every row after the header (blank lines are not rows); a row with
  more fields than the header is an error; a row too short to reach a column has no
  value there;
- ``jsonl``: every non-blank line, a JSON object; a JSON ``null`` or an absent key has
  no value; numbers and booleans are returned as their JSON text; objects and arrays
  are errors; a requested key that *no* record has is a parameter error (a wrong name);
  ``columns=None`` means the keys of the first record;
- ``parquet``: every row; a null has no value; numeric and boolean columns are cast to
  text.

``missing`` says what a record without a value in a requested column becomes:
``"error"`` (the default: a :class:`~deniable.DataError` naming the line or row),
``"empty"`` (the value is ``None``; the record is kept) or ``"skip"`` (the record is
left out).

Privatizing a file (:func:`transform_file`) rewrites only the text and keeps every
other byte:

- ``txt``: each line is a record (its line ending is not part of the text); line endings
  and blank lines come back exactly.
- ``csv`` / ``tsv``: every column is read as a string and written back unchanged
  except the chosen text columns (quoted newlines, commas and unicode included);
  the input's line terminator is kept. CSV follows the usual quoting rules; TSV is
  plain (no quoting: quotes are ordinary characters, and a field can hold no tab or
  line break, and a one-column row no empty value: that is a blank line). A blank line
  is kept as it is; any other row must have as many fields as the header (a ragged row
  is an error naming it).
- ``jsonl``: one JSON object per line; only the text values of the chosen keys are
  rewritten, in place: everything else on the line (other keys, their order, number
  formats, escapes, spacing, repeated keys) comes back byte for byte. A ``null`` text
  stays ``null``; a record without the key is an error.
- ``parquet``: the schema, other columns, row count and order are kept; nulls stay null.

Rules shared by every reader:

- Repeated column names (:mod:`deniable.io._columns`, also for pandas DataFrames in
  :func:`deniable.privatize` and the engines): a chosen column whose name appears more
  than once in the header, Parquet schema or DataFrame -- also spelled in another Unicode
  form (NFC / NFD / compatibility) or with spaces around it -- is refused with a
  :class:`~deniable.DataError` naming it (CLI exit 3, no output): privatizing one would
  release the other unchanged. A repeated name that is not chosen is kept like any other
  column; reading every column (``columns=None``) refuses any repeated name. In JSONL a
  repeated key is one column: each of its string values is privatized.
- JSON nested too deeply for the parser (e.g. 100,000 ``[``) is an error naming the line.

- Text is UTF-8. A leading UTF-8 byte order mark (as Excel writes) is not part of the
  first record and is written back to the output. A UTF-16/UTF-32 byte order mark, an
  invalid UTF-8 byte (the message suggests Latin-1 / Windows-1252 or UTF-16 where the
  bytes look like it) and a NUL byte are errors naming the line.
- ``.gz`` is supported for txt, csv, tsv and jsonl (read and write); a truncated or
  corrupt ``.gz`` is an error naming the file and the compressed byte offset.
- Bounded memory: :func:`transform_file` refuses a record (line, CSV row, JSON line,
  Parquet cell) longer than ``max_record_chars`` (default :data:`MAX_RECORD_CHARS`,
  4 Mi characters) with an error naming its line or row, before reading more than
  about four times that many bytes of it. Records are rejected, not split: splitting
  a record would change what the privatized text means.
- ``-`` is standard input or output (streamed, so not atomic); a closed one (``<&-``,
  ``>&-``) is a parameter error. In the CLI, a reader that goes away (``-o - | head``)
  stops the run quietly with exit code 141 (128 + SIGPIPE, as ``cat`` or ``grep``).
- Output: the name must be ``-`` or a file name (``""``, ``.``, ``..`` or a name ending in
  ``/`` is a parameter error) and must not claim another format (``out.xlsx`` is refused); stale
  temporaries of the same output left by a killed run are removed; SIGTERM / SIGHUP /
  SIGINT remove the temporary; the final file has the mode a plain write would give
  (0666 minus the umask, or the mode of the file it replaces).
- Error messages name files, lines, rows, columns and parameters, never the text.
"""

from __future__ import annotations

from ._files import atomic_output
from ._formats import FORMATS, detect_format
from ._read import MISSING, iter_batches, read_table
from ._transform import MAX_RECORD_CHARS, IOStats, iter_texts, transform_file

__all__ = [
    "FORMATS",
    "MAX_RECORD_CHARS",
    "MISSING",
    "IOStats",
    "atomic_output",
    "detect_format",
    "iter_batches",
    "iter_texts",
    "read_table",
    "transform_file",
]
