"""onepass's baseline (c): the JSON-generating way to answer the same questions — the reference prompt with an
instruction to answer as a JSON object, one prefill with a KV cache, then greedy decoding with the checkpoint's own
lm_head, in plain transformers. Used by `onepass.py` (beside it); knows nothing of the engine's internals beyond the
weights it checks are the same.
"""
from __future__ import annotations

import time
from pathlib import Path

import torch
import torch.nn.functional as F
from onepass_workload import JSON_INSTRUCTION

from omni.contract.types import DecisionRequest
from omni.model.prompt import PromptEncoder
from omni.serve.engine import DecisionEngine


class JsonGenerator:
    """(c): prefill the JSON-instruction prompt with a KV cache, then greedy-decode `n_new` tokens.

    Plain transformers, as a JSON-generating deployment would run it: the checkpoint's thinker loaded on its own with
    transformers' SDPA attention (the engine's thinker runs "omni_sdpa", made for prefills that continue a cache; a
    decode step with it costs ~2x, measured 59-66 vs 23-31 ms at 13k tokens here, with equal outputs), the same
    weights as the engine's (checked), a `DynamicCache` and explicit 3-D positions; logits of the last position only,
    from its lm_head.
    """

    def __init__(self, engine: DecisionEngine, encoder: PromptEncoder, directory: Path):
        from transformers import AutoConfig, Qwen3OmniMoeForConditionalGeneration
        from transformers.cache_utils import DynamicCache

        config = AutoConfig.from_pretrained(directory)
        config.enable_audio_output = False
        model = Qwen3OmniMoeForConditionalGeneration.from_pretrained(directory, config=config, dtype=torch.float32,
                                                                     attn_implementation="sdpa")
        self.thinker = model.thinker.eval().requires_grad_(False)
        assert torch.equal(self.thinker.lm_head.weight, engine.model.backbone.lexical_table.cpu()), \
            "(c)'s thinker is not the engine's"
        self.cache_class = DynamicCache
        self.encoder = encoder
        self.text_model = self.thinker.model                    # embeddings, decoder, final norm
        self.lm_head = self.thinker.lm_head.weight              # [V, H]
        self.device = self.lm_head.device
        self.instruction_ids = encoder.tokenizer(JSON_INSTRUCTION, add_special_tokens=False)["input_ids"]

    def prompt_ids(self, request: DecisionRequest) -> list[int]:
        """The reference prompt for `request` with its answer suffix replaced by the JSON instruction."""
        ids = self.encoder.encode(request).input_ids
        suffix = list(self.encoder.suffix_ids)
        assert ids[-len(suffix):] == suffix, "the reference prompt no longer ends with its suffix"
        return ids[:-len(suffix)] + self.instruction_ids

    @torch.inference_mode()
    def __call__(self, request: DecisionRequest, n_new: int) -> dict:
        """Encode, prefill and decode `n_new` tokens -> token counts, ids, text and the three stage times in ms."""
        t0 = time.perf_counter()
        ids = self.prompt_ids(request)
        device = self.device
        length = len(ids)
        mask = torch.ones(1, length + n_new, dtype=torch.long, device=device)
        cache = self.cache_class(config=self.thinker.config.text_config)
        positions = torch.arange(length, device=device).view(1, 1, -1).expand(3, 1, -1)
        t1 = time.perf_counter()
        out = self.text_model(input_ids=torch.tensor([ids], device=device), attention_mask=mask[:, :length],
                              position_ids=positions, past_key_values=cache, use_cache=True)
        token = F.linear(out.last_hidden_state[:, -1], self.lm_head).argmax(-1)      # logits of the last position only
        generated = [int(token)]
        t2 = time.perf_counter()
        for step in range(1, n_new):                          # the token fed here sits at index length + step - 1
            out = self.text_model(input_ids=token.view(1, 1), attention_mask=mask[:, :length + step],
                                  position_ids=torch.full((3, 1, 1), length + step - 1, device=device),
                                  past_key_values=cache, use_cache=True)
            token = F.linear(out.last_hidden_state[:, -1], self.lm_head).argmax(-1)
            generated.append(int(token))
        text = self.encoder.tokenizer.decode(generated)
        t3 = time.perf_counter()
        assert cache.get_seq_length() == length + n_new - 1
        return {"prompt_tokens": length, "new_tokens": len(generated), "token_ids": generated, "text": text,
                "encode_ms": (t1 - t0) * 1e3, "prefill_ms": (t2 - t1) * 1e3, "decode_ms": (t3 - t2) * 1e3}
