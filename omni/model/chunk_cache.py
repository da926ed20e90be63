"""The key/value cache layers the backbone's prefills fill: a layer's keys and values, and a transformers cache layer
preallocated to a record's final length for chunked prefill (appending a chunk copies only the chunk).

Knows nothing of models, records, prompts or serving.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from transformers.cache_utils import DynamicLayer


def layer_kv(layer: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """A cache layer's keys and values (the thinker's text layers are all full-attention layers that have them)."""
    return layer.keys, layer.values


def preallocated_layer(capacity: int) -> DynamicLayer:
    """A transformers cache layer whose keys/values live in one buffer of a known final length: appending a chunk
    copies only the chunk (the default layer's growing `torch.cat` copies everything so far at every chunk)."""
    from transformers.cache_utils import DynamicLayer

    class PreallocatedLayer(DynamicLayer):
        is_croppable = False

        def __init__(self) -> None:
            super().__init__()
            self.length = 0

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
                   **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
            if not self.is_initialized:
                self.dtype, self.device = key_states.dtype, key_states.device
                self._keys = key_states.new_empty((*key_states.shape[:2], capacity, key_states.shape[-1]))
                self._values = value_states.new_empty((*value_states.shape[:2], capacity, value_states.shape[-1]))
                self.is_initialized = True
            end = self.length + key_states.shape[-2]
            if end > capacity:
                raise RuntimeError(f"chunked prefill past its cache's capacity ({end} > {capacity})")
            self._keys[:, :, self.length:end] = key_states
            self._values[:, :, self.length:end] = value_states
            self.length = end
            self.keys, self.values = self._keys[:, :, :end], self._values[:, :, :end]
            return self.keys, self.values

        def get_seq_length(self) -> int:
            return self.length

    return PreallocatedLayer()
