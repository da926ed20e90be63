"""LoRA adapters resident in one thinker, applied per row of a batch (peft's mixed-adapter batch inference).

`LoraSlots.add(key, directory)` injects an adapter saved in peft's format (adapter_config.json +
adapter_model.safetensors) into the thinker's text layers under `key`, checked strictly (every weight present, of the
right shape, nothing else); `remove(key)` takes it out again. No adapter is ever *active*: a plain forward is the
base model. `rows(names)` is a context in which each LoRA layer's forward receives peft's `adapter_names` (one per
row of the batch: a key, or None for the base), so rows of one forward each get their own adapter — no swapping
between batches, no merged copies. Only the text decoder may be targeted (`lora_config`): the audio and vision
towers see packed media, not rows, and the media cache is shared by every adapter.
Knows nothing of adapter folders' manifests, names as served, requests, queues or HTTP.
"""
from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import nn

from omni.contract.errors import AdapterError

BASE_ROW = "__base__"                       # peft's name for a row that gets no adapter
PEFT_PREFIX = "base_model.model."           # what PeftModel.save_pretrained puts before the thinker's names
TEXT_DECODER = "model.language_model."      # where in the thinker LoRA may sit
# the media towers, kept out by `exclude_modules` (peft's MoE config conversion turns a regex `target_modules` into
# bare names for Qwen3-Omni, which would match the audio tower's q/k/v too)
MEDIA_TOWERS = r".*\.(audio_tower|visual)\..*"


def lora_config(rank: int, alpha: float, targets: Sequence[str]) -> Any:
    """peft's LoraConfig for the thinker's text decoder only: module names (q_proj …), the media towers excluded."""
    from peft import LoraConfig

    for name in targets:
        if not re.fullmatch(r"[A-Za-z0-9_]+", name):
            raise ValueError(f"a LoRA target is a module name such as q_proj, not {name!r}")
    # peft annotates lora_alpha as int, but only divides by it (scaling = alpha / r): a float alpha works as given
    return LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=0.0, target_modules=list(targets),  # type: ignore[arg-type]
                      exclude_modules=MEDIA_TOWERS)


def _names_hook(names: list[str], _module: nn.Module, args: Any, kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    kwargs["adapter_names"] = names
    return args, kwargs


class LoraSlots:
    """The LoRA adapters injected in one thinker, by key."""

    def __init__(self, thinker: nn.Module):
        self.thinker = thinker
        self.bytes_by_key: dict[str, int] = {}
        self._found: list[Any] | None = None     # the LoRA layers, found once per change (not per forward)

    def __contains__(self, key: object) -> bool:
        return key in self.bytes_by_key

    def _layers(self) -> list[Any]:
        """The thinker's peft LoRA layers (typed Any: peft's layer methods are untyped), found after each change."""
        if self._found is None:
            from peft.tuners.lora import LoraLayer

            self._found = [m for m in self.thinker.modules() if isinstance(m, LoraLayer)]
        return self._found

    def add(self, key: str, directory: str | Path, adapter: str) -> int:
        """Inject the peft adapter in `directory` under `key`; its resident bytes. AdapterError (naming `adapter`)
        when its config or weights do not fit the thinker; nothing stays injected then."""
        from peft import LoraConfig, inject_adapter_in_model
        from safetensors.torch import load_file

        if key in self.bytes_by_key:
            raise AdapterError(adapter, f"LoRA weights {key} are already resident")
        directory = Path(directory)
        try:
            config = LoraConfig.from_pretrained(str(directory))
            state = load_file(str(directory / "adapter_model.safetensors"))
        except (OSError, ValueError, TypeError) as exc:
            raise AdapterError(adapter, f"peft adapter files do not read: {exc}") from None
        self._found = None
        try:
            inject_adapter_in_model(config, self.thinker, adapter_name=key)
        except (ValueError, RuntimeError, TypeError) as exc:    # TypeError: a quantized weight peft cannot wrap
            self._drop(key)
            raise AdapterError(adapter, f"its LoRA does not fit the base thinker: {exc}") from None
        outside = [n for n, m in self.thinker.named_modules()
                   if key in getattr(m, "lora_A", {}) and not n.startswith(TEXT_DECODER)]
        if outside:
            self._drop(key)
            raise AdapterError(adapter, f"its LoRA must sit in the thinker's text decoder only, not in {outside[0]} "
                               f"(exclude_modules {MEDIA_TOWERS!r})")
        try:
            nbytes = self._load_weights(key, state, adapter)
        except AdapterError:
            self._drop(key)
            raise
        for layer in self._layers():
            layer.set_adapter([])           # nothing active: a plain forward stays the base model
        self.thinker.requires_grad_(False)
        self.bytes_by_key[key] = nbytes
        return nbytes

    def _load_weights(self, key: str, state: dict[str, torch.Tensor], adapter: str) -> int:
        params = {n: p for n, p in self.thinker.named_parameters() if f".{key}." in n}
        wanted: dict[str, torch.Tensor] = {}
        for name, tensor in state.items():
            bare = name.removeprefix(PEFT_PREFIX)
            match = re.fullmatch(r"(.*\.lora_[AB])\.weight", bare)
            target = f"{match.group(1)}.{key}.weight" if match else None
            if target is None or target not in params:
                raise AdapterError(adapter, f"adapter_model.safetensors has {name}, which no LoRA layer of the base "
                                   "thinker takes")
            if tuple(params[target].shape) != tuple(tensor.shape):
                raise AdapterError(adapter, f"{name} has shape {tuple(tensor.shape)}, the base needs "
                                   f"{tuple(params[target].shape)}")
            wanted[target] = tensor
        missing = sorted(set(params) - set(wanted))
        if missing:
            raise AdapterError(adapter, f"adapter_model.safetensors lacks {len(missing)} LoRA weights "
                               f"(first: {missing[0]})")
        with torch.no_grad():
            for target, tensor in wanted.items():
                params[target].copy_(tensor.to(params[target].dtype))
        return sum(p.numel() * p.element_size() for p in params.values())

    def remove(self, key: str) -> None:
        """Take the adapter `key` out of the thinker (its weights are freed)."""
        self._drop(key)
        self.bytes_by_key.pop(key, None)

    def _drop(self, key: str) -> None:
        self._found = None                       # an injection that failed half-way may have added layers
        for layer in self._layers():
            if key in layer.lora_A or key in getattr(layer, "lora_B", {}):
                layer.delete_adapter(key)
                layer.set_adapter([])
        self._forget_config(key)

    def _forget_config(self, key: str) -> None:
        configs = getattr(self.thinker, "peft_config", None)
        if isinstance(configs, dict):
            configs.pop(key, None)

    def merge(self, key: str) -> None:
        """Fold the adapter `key` into the thinker's own weights and put the plain layers back in place of the LoRA
        ones (what `omni export --merge` writes). The thinker must hold no other adapter."""
        if set(self.bytes_by_key) != {key}:
            raise ValueError(f"merge needs {key} to be the only LoRA adapter resident, not {sorted(self.bytes_by_key)}")
        layers = {id(layer) for layer in self._layers()}
        for name, layer in [(n, m) for n, m in self.thinker.named_modules() if id(m) in layers]:
            layer.merge(adapter_names=[key])
            parent, _, child = name.rpartition(".")
            setattr(self.thinker.get_submodule(parent), child, layer.get_base_layer())
        self._found = None
        self._forget_config(key)
        self.bytes_by_key.clear()

    @contextmanager
    def rows(self, keys: Sequence[str | None] | None) -> Iterator[None]:
        """A forward inside this context applies keys[b] to row b (None: the base). Without a LoRA key among them,
        nothing is hooked (the base forward, unchanged)."""
        if not keys or all(k is None for k in keys):
            yield
            return
        unknown = sorted({k for k in keys if k is not None} - set(self.bytes_by_key))
        if unknown:
            raise RuntimeError(f"LoRA weights not resident: {', '.join(unknown)}")
        names = [BASE_ROW if k is None else k for k in keys]
        handles = [layer.register_forward_pre_hook(partial(_names_hook, names), with_kwargs=True)
                   for layer in self._layers()]
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()
