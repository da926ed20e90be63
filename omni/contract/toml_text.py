"""TOML an operator wrote (a policy, a statement map), parsed with its nesting bounded.

`load_toml(text)` is `tomllib.loads` that never lets a file nested thousands deep (`x = [[[[…`) end in a
RecursionError: anything nested more than `MAX_TOML_DEPTH` tables and arrays deep is a `TomlProblem` naming that
limit, whether the parser ran out of stack or not. The caller wraps the problem in its own typed error with the file.
Knows nothing of what the file means, of files, HTTP or the environment.
"""
from __future__ import annotations

import sys
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:                           # Python 3.10: the same parser, as the tomli package
    import tomli as tomllib

MAX_TOML_DEPTH = 32     # tables and arrays inside one another; a policy needs 4, a statement map 3


class TomlProblem(ValueError):
    """Why a text is not a TOML document this project reads: its syntax (with the parser's line) or its depth."""


def load_toml(text: str, max_depth: int = MAX_TOML_DEPTH) -> dict[str, Any]:
    """The document as a table; TomlProblem ("not valid TOML: …" or "nested more than N levels deep")."""
    too_deep = TomlProblem(f"tables and arrays nested more than {max_depth} levels deep (the limit is {max_depth})")
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TomlProblem(f"not valid TOML: {exc}") from None
    except RecursionError:      # the parser recurses once per level: thousands of `[` exhaust the stack first
        raise too_deep from None
    if _depth_over(table, max_depth):
        raise too_deep
    return table


def _depth_over(table: dict[str, Any], max_depth: int) -> bool:
    """Whether tables and arrays nest more than `max_depth` deep (the document itself is level 1). Iterative."""
    stack: list[tuple[Any, int]] = [(table, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > max_depth:
            return True
        children = value.values() if isinstance(value, dict) else value
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False
