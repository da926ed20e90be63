"""realsize_adapters: head-only adapters beside the real-size model (issue 32), and adapters' bytes at real size.

`mixed_vs_one` writes `n` head-only adapters of the model's own head shape (the base head perturbed:
`fixtures.adapters.make_adapter`), serves them beside it (`EngineConfig(adapters=...)`, the serving path:
`start()` / `submit`) and times one stream of requests spread over every adapter against the same stream all to
one adapter, in alternating rounds; it reports throughput and p50 of each and their ratio. `real_adapter_bytes`
builds, on the meta device, the joint head of the real shapes (REAL_HEAD) and the real thinker (REAL_TEXT) with a
LoRA of rank 16 on q, k, v and o injected as the product injects it (`omni.model.lora.lora_config`), and counts their
parameters: resident bytes per adapter at real size, computed, not guessed. benchmarks/adapters.py runs it in a
subprocess from this folder (`python -c "import realsize_adapters ..."`: these modules import as top-level ones).

What it must not know: realsize.py's cases, budget and report, engine internals (it uses the engine's public
`submit`, `selector` and `adapters`), and any real checkpoint or network.
"""
from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, wait
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, cast

import torch
from realsize_model import REAL_HEAD, SHAPES, log, thinker_config_for

from fixtures.adapters import make_adapter
from omni.contract.config import EngineConfig
from omni.contract.request import parse_request
from omni.contract.types import Decision
from omni.model.clef import ClefModel
from omni.model.head import JointSchemaHead
from omni.serve.engine import DecisionEngine

LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")
MiB = 1024 ** 2


def write_head_adapters(engine: DecisionEngine, root: Path, n: int) -> tuple[tuple[str, str], ...]:
    """`n` head-only adapters (h1..hn) for the engine's model under `root`: (name, folder) pairs for EngineConfig."""
    pairs = []
    for k in range(1, n + 1):
        folder = make_adapter(cast("ClefModel", engine.model), root / f"h{k}", seed=k)
        pairs.append((f"h{k}", str(folder)))
    return tuple(pairs)


def _ended(ends: dict[int, float], done: threading.Condition, i: int, _future: Future[Decision]) -> None:
    with done:
        ends[i] = time.perf_counter()
        done.notify_all()


def _stream(engine: DecisionEngine, bodies: list[dict]) -> tuple[float, list[float]]:
    """Submit every body at once; (wall seconds until the last answer, each request's latency in seconds)."""
    names = engine.selector.model_names()
    requests = [parse_request(b, engine.config, adapters=names) for b in bodies]
    started = time.perf_counter()
    ends: dict[int, float] = {}
    done = threading.Condition()
    futures: list[Future[Decision]] = []
    for i, request in enumerate(requests):
        future = engine.submit(request)
        future.add_done_callback(partial(_ended, ends, done, i))
        futures.append(future)
    wait(futures)
    for future in futures:
        future.result()                   # a failed request fails the case
    with done:      # `wait` returns once the futures are done, which can be before their callbacks have run
        done.wait_for(lambda: len(ends) == len(futures), timeout=60)
    wall = max(ends.values()) - started
    return wall, [ends[i] - started for i in range(len(futures))]


def mixed_vs_one(base_engine: DecisionEngine, make_engine: Callable[[EngineConfig], DecisionEngine],
                 body: Callable[[int], dict], root: Path, n: int, requests: int, rounds: int) -> dict:
    """The case: `n` head-only adapters mixed in one stream of `requests` vs all to h1, `rounds` rounds each.
    `make_engine(config)` builds an engine on the same model; `body(i)` is request i's body (a new state each)."""
    started = time.monotonic()
    pairs = write_head_adapters(base_engine, root, n)
    log(f"adapters: {n} head-only written in {time.monotonic() - started:.1f} s")
    engine = make_engine(replace(base_engine.config, adapters=pairs, max_adapters=max(8, n))).start()
    try:
        names = [name for name, _ in pairs]
        _stream(engine, [{**body(-1 - i), "model": names[i % n]} for i in range(n)])      # warm-up: every head
        walls: dict[str, list[float]] = {"mixed": [], "one": []}
        p50s: dict[str, list[float]] = {"mixed": [], "one": []}
        for r in range(rounds):
            for way in ("mixed", "one"):
                bodies = [{**body(1000 * r + i), "model": names[i % n] if way == "mixed" else names[0]}
                          for i in range(requests)]
                wall, latencies = _stream(engine, bodies)
                walls[way].append(wall)
                p50s[way].append(statistics.median(latencies))
        stats = engine.adapters.stats() if engine.adapters is not None else {}
    finally:
        engine.stop()
    rps = {way: requests / statistics.median(w) for way, w in walls.items()}
    return {"adapters": n, "mode": "head", "requests": requests, "rounds": rounds,
            "rps_mixed": round(rps["mixed"], 3), "rps_one": round(rps["one"], 3),
            "ratio_rps_mixed_over_one": round(rps["mixed"] / rps["one"], 3),
            "p50_ms_mixed": round(statistics.median(p50s["mixed"]) * 1e3, 1),
            "p50_ms_one": round(statistics.median(p50s["one"]) * 1e3, 1),
            "resident_bytes": stats.get("resident_bytes", 0), "resident": stats.get("resident", 0)}


def _on_meta_bytes(module: torch.nn.Module, select: Callable[[str], bool] = lambda _name: True) -> tuple[int, int, str]:
    """(parameters, bytes as built, their dtype) of the parameters whose names `select` keeps."""
    params = [p for name, p in module.named_parameters() if select(name)]
    dtypes = sorted({str(p.dtype).removeprefix("torch.") for p in params})
    return sum(p.numel() for p in params), sum(p.numel() * p.element_size() for p in params), ",".join(dtypes)


def real_adapter_bytes(rank: int = 16, thinker_dtype: torch.dtype = torch.bfloat16) -> dict:
    """An adapter's resident bytes at real size: the joint head (REAL_HEAD, float32 as the engine's head_dtype) and
    a LoRA of `rank` on q/k/v/o of the real thinker's text decoder (in the thinker's dtype), built on meta."""
    from peft import inject_adapter_in_model
    from transformers import Qwen3OmniMoeThinkerForConditionalGeneration

    from omni.model.lora import lora_config
    from omni.model.tiny import build_tokenizer

    with torch.device("meta"):
        head = JointSchemaHead(**cast("dict[str, Any]", REAL_HEAD))
    head_params, head_bytes, head_dtype = _on_meta_bytes(head)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(thinker_dtype)          # as the GPU run builds it (from_pretrained(dtype=...))
    try:
        with torch.device("meta"):
            thinker = Qwen3OmniMoeThinkerForConditionalGeneration(thinker_config_for(SHAPES["real"], build_tokenizer()))
    finally:
        torch.set_default_dtype(previous)
    inject_adapter_in_model(lora_config(rank, 2.0 * rank, LORA_TARGETS), thinker, adapter_name="real")
    lora_params, lora_bytes, lora_dtype = _on_meta_bytes(thinker, lambda name: ".lora_" in name)
    lora_layers = {name.split(".lora_")[0] for name, _ in thinker.named_parameters() if ".lora_" in name}
    text = cast("dict[str, Any]", SHAPES["real"]["text"])
    return {"head": {"params": head_params, "bytes": head_bytes, "dtype": head_dtype, "mib": round(head_bytes / MiB, 1),
                     "shape": REAL_HEAD},
            "lora": {"rank": rank, "targets": list(LORA_TARGETS), "modules": len(lora_layers), "params": lora_params,
                     "bytes": lora_bytes, "dtype": lora_dtype, "mib": round(lora_bytes / MiB, 1),
                     "bytes_float32": lora_params * 4},
            "lora_adapter_total_mib": round((head_bytes + lora_bytes) / MiB, 1),
            "text_config": {k: text[k] for k in ("num_hidden_layers", "hidden_size", "num_attention_heads",
                                                 "num_key_value_heads", "head_dim")}}

