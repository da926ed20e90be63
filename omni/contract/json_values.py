"""Callers' JSON: the one loader (every way a document can be unreadable is a `json_invalid` issue) and the check
that a value can be rendered into the prompt (depth, valid Unicode).

Used by every edge that reads JSON from a caller or an operator (HTTP bodies, `omni decide` files, dataset lines).
Knows nothing of the request schema, HTTP, the model or files.
"""
from __future__ import annotations

import json
import math
from typing import Any

from omni.contract.errors import InvalidRequest, Loc

# A parsed JSON document or any part of it: dict / list / str / int / float / bool / None, nested to any depth.
# `Any`, because the shape is checked at run time (the request parser), not by the type checker.
JSONValue = Any
JSONObject = dict[str, JSONValue]       # a JSON object: a request body, an answer, a record of a JSONL file

MAX_JSON_DEPTH = 64     # nesting of state / instructions / descriptions; deeper is refused, never a RecursionError


class NonFiniteNumber(ValueError):
    """NaN, Infinity or a number too large for a float (1e999): not JSON, and not something answers can echo."""


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise NonFiniteNumber(f"the number {text[:32]} is too large")
    return value


def _no_constant(name: str) -> float:
    raise NonFiniteNumber(f"{name} is not a JSON number")


def load_json(data: bytes | str, loc: Loc = ()) -> JSONValue:
    """Parse a JSON document from a caller; every way it can be unreadable is an InvalidRequest (json_invalid).

    NaN, Infinity and numbers that overflow a float (1e999) are refused here, wherever they are in the document:
    answers echo criteria back (a score's legend) and JSON cannot carry them."""
    try:
        return json.loads(data, parse_float=_finite_float, parse_constant=_no_constant)
    except NonFiniteNumber as exc:
        problem = str(exc)
    except json.JSONDecodeError as exc:
        problem = exc.msg
    except UnicodeDecodeError as exc:
        problem = f"not UTF-8 ({exc.reason})"
    except RecursionError:
        problem = "nested too deeply"
    except ValueError as exc:       # e.g. an integer of more than 4,300 digits
        problem = str(exc).split(";")[0]
    raise InvalidRequest.one(tuple(loc), f"JSON decode error: {problem}", "json_invalid")


def json_value_problem(value: JSONValue, max_depth: int = MAX_JSON_DEPTH) -> str | None:
    """Why a JSON value cannot be rendered into the prompt or echoed in an answer (too deep, text that is not valid
    Unicode, a number that is not finite), else None.

    Iterative, so a hostile depth cannot exhaust the stack while it is being checked.
    """
    stack: list[tuple[JSONValue, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return "contains an unpaired surrogate (not valid Unicode text)"
        elif isinstance(item, float) and not math.isfinite(item):
            return "contains a number that is not finite (NaN or infinity)"
        elif isinstance(item, (dict, list)):
            if depth > max_depth:
                return f"is nested more than {max_depth} levels deep"
            if isinstance(item, dict):
                stack.extend((key, depth) for key in item)
                stack.extend((child, depth + 1) for child in item.values())
            else:
                stack.extend((child, depth + 1) for child in item)
    return None
