"""Reading an operator's TOML table with errors that name the file, the line and the key.

`TableReader(text, source)` wraps the text a table came from. Its getters (`string`, `integer`, `number`, `boolean`,
`strings`, `path`) take the table, the key and where the table is (`"line"`, `"source[2]"`: the third `[[source]]`),
check the type and range, and raise `LineError("FILE: source[2].port (line 14): must be an integer 1..65535, not
'x'")`. `no_unknown_keys` refuses a key the table does not take, naming the ones it does.
Knows nothing of what a line is, of sources, sinks, the model or the environment.
"""
from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from api.line.ports import LineError

_MISSING = object()


class TableReader:
    def __init__(self, text: str, source: str, base_dir: Path):
        self.lines = text.splitlines()
        self.source = source
        self.base_dir = base_dir        # relative paths in the file are read from the file's folder

    # ---- errors -------------------------------------------------------------------------------------------------
    def error(self, where: str, key: str, message: str) -> LineError:
        path = f"{where}.{key}" if where and key else where or key
        line = self.line_of(where, key)
        return LineError(f"{self.source}: {path}{f' (line {line})' if line else ''}: {message}")

    def line_of(self, where: str, key: str) -> int | None:
        """The line of `key` inside the table `where` ("line", "sink[1]", "" for the top level), or of the table's
        header when the key is not written there; None when neither is found."""
        name, index = _split(where)
        inside, header_line, seen = where == "", None, -1
        key_re = re.compile(rf'^\s*(?:{re.escape(key)}|"{re.escape(key)}")\s*=') if key else None
        for number, text in enumerate(self.lines, start=1):
            header = re.match(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?", text)
            if header:
                opened = header.group(2).replace('"', "").replace(" ", "")
                if header.group(1) == "[[" and opened == name:
                    seen += 1
                    inside = seen == index
                else:
                    inside = index is None and opened == name
                header_line = number if inside else header_line
                if inside and key_re is None:
                    return number
            elif inside and key_re is not None and key_re.match(text):
                return number
        return header_line

    # ---- typed getters ------------------------------------------------------------------------------------------
    def table(self, parent: dict[str, Any], key: str, where: str = "", required: bool = False) -> dict[str, Any]:
        value = parent.get(key, _MISSING)
        if value is _MISSING:
            if required:
                raise self.error(where, key, "required table is missing")
            return {}
        if not isinstance(value, dict):
            raise self.error(where, key, "must be a table")
        return value

    def tables(self, parent: dict[str, Any], key: str) -> list[dict[str, Any]]:
        """An array of tables (`[[key]]`); each element must be a table."""
        value = parent.get(key, [])
        if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
            raise self.error("", key, f"must be written as [[{key}]] tables")
        return value

    def no_unknown_keys(self, table: dict[str, Any], known: tuple[str, ...], where: str) -> None:
        for key in table:
            if key not in known:
                raise self.error(where, key, f"unknown key; [{_split(where)[0]}] takes {', '.join(known)}")

    def _get(self, table: dict[str, Any], key: str, where: str, default: Any) -> Any:
        value = table.get(key, default)
        if value is _MISSING:
            raise self.error(where, key, "required")
        return value

    def string(self, table: dict[str, Any], key: str, where: str, default: Any = _MISSING,
               choices: tuple[str, ...] | None = None) -> Any:
        value = self._get(table, key, where, default)
        if value is default and default is not _MISSING:
            return value
        if not isinstance(value, str) or not value.strip():
            raise self.error(where, key, f"must be a non-empty string, not {value!r}")
        if choices is not None and value not in choices:
            raise self.error(where, key, f"{value!r} is not one of {', '.join(choices)}")
        return value

    def strings(self, table: dict[str, Any], key: str, where: str, default: Any = _MISSING) -> Any:
        value = self._get(table, key, where, default)
        if value is default and default is not _MISSING:
            return value
        if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
            raise self.error(where, key, f"must be a list of non-empty strings, not {value!r}")
        return tuple(value)

    def integer(self, table: dict[str, Any], key: str, where: str, default: Any = _MISSING,
                low: int | None = None, high: int | None = None) -> Any:
        value = self._get(table, key, where, default)
        if value is default and default is not _MISSING:
            return value
        if isinstance(value, bool) or not isinstance(value, int) or (low is not None and value < low) \
                or (high is not None and value > high):
            raise self.error(where, key, f"must be an integer {_range(low, high)}, not {value!r}")
        return value

    def number(self, table: dict[str, Any], key: str, where: str, default: Any = _MISSING,
               low: float | None = None, high: float | None = None) -> Any:
        value = self._get(table, key, where, default)
        if value is default and default is not _MISSING:
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) \
                or (low is not None and value < low) or (high is not None and value > high):
            raise self.error(where, key, f"must be a number {_range(low, high)}, not {value!r}")
        return float(value)

    def boolean(self, table: dict[str, Any], key: str, where: str, default: Any = _MISSING) -> Any:
        value = self._get(table, key, where, default)
        if not isinstance(value, bool):
            raise self.error(where, key, f"must be true or false, not {value!r}")
        return value

    def path(self, table: dict[str, Any], key: str, where: str, default: Any = _MISSING,
             must_exist: bool = False) -> Any:
        """A path, relative ones read from the config file's folder; absolute and resolved."""
        value = self.string(table, key, where, default)
        if value is default and default is not _MISSING:
            return value
        path = (self.base_dir / Path(value).expanduser()).resolve()
        if must_exist and not path.exists():
            raise self.error(where, key, f"{path}: no such file or folder")
        return path


def _split(where: str) -> tuple[str, int | None]:
    match = re.fullmatch(r"(.*)\[(\d+)\]", where)
    return (match.group(1), int(match.group(2))) if match else (where, None)


def _range(low: float | None, high: float | None) -> str:
    if low is not None and high is not None:
        return f"{low}..{high}"
    return f">= {low}" if low is not None else f"<= {high}" if high is not None else ""
