"""omni.model: a loaded Clef-omni model and everything that builds, loads or writes one.

    surface.py      DecisionModel / TrainableModel / PreparedInputs: what the engine, evaluation and training may call
    clef.py         ClefModel: the parts put together behind those surfaces (from_config / load, prepare, logits, ...)
    loading.py      a checkpoint directory -> its parts, loaded strictly; what an EngineConfig asks of the model
    inputs.py       the ONE prepare: media + prompt + M-RoPE positions -> PreparedRecord (off the model thread)
    prefixes.py     the prefix key, computed prefixes (keys/values + head memory rows) and the prefix cache
    forward.py      the batched forward: whole records, prefixes, continuations after computed prefixes, the head
    chunked.py      a long prefix prefilled a chunk at a time
    checkpoint.py   where a checkpoint directory comes from (dir, hub id, embedded default), its files, release date
    backbone.py     the Qwen3-Omni thinker: strict load, one prefill, caches to continue from
    chunk_cache.py  the key/value cache layers a prefill fills (one preallocated for chunked prefill)
    quantize.py     --quantize schemes (bitsandbytes / torchao) for the text layers; a checkpoint's stored scheme
    quantized_export.py  a checkpoint written pre-quantized, as its library saves it (`omni export --quantize`)
    attention.py    the causal SDPA the text layers run (also continuing a cache), maskless
    head.py         Clef's joint-schema head (§3 math), batched
    evidence_attention.py  the head's stage-1 routing attention, recomputed beside each layer (the evidence)
    evidence_layout.py  which record positions are the state's tokens and each medium's pads, and what each stands for
    evidence_map.py  one option's attention -> shares, state spans, image heat maps/boxes, clip windows, video moments
    evidence.py     a record's x_evidence: per question the chosen (or every) option's evidence, mapped
    prompt.py       the reference prompt and its spans; state truncation
    media.py        media items -> placeholder ids + thinker tensors (through preprocess), the media cache
    cache.py        ByteLRU: a thread-safe LRU bounded in bytes (the media and prefix caches)
    calibration.py  optional temperature scaling bound to a checkpoint
    fingerprint.py  the checkpoint's sha256 (kept per file in a sidecar) and the software versions, for audit records
    adapter_format.py  the adapter folder: adapter.json (validated), its files whole, its sha256, served names
    adapters.py     an adapter loaded beside the base (its head, LoRA weights, calibration, bound policy); Selection
    lora.py         LoRA adapters resident in the thinker (peft), applied per row of one forward
    qlora.py        LoRA over a quantized base: which schemes it trains over / is served on; 4-bit layers trainable
    adapter_save.py   a fine-tuned head (and peft LoRA) written as an adapter folder beside its base
    adapter_merge.py  an adapter folder + its base (sha256 checked) written as one whole checkpoint
    export.py       a (fine-tuned) model, or a whole checkpoint directory, written in the released layout
    shards.py       backbone weights as numbered model-*.safetensors shards with model.safetensors.index.json
    tiny.py         a tiny random checkpoint built offline; checkpoints/ holds the embedded demo
    doctor/         `omni doctor`'s checks: the machine, a checkpoint's files and shapes (headers only), memory,
                    an adapter folder against its base; an adapter's bytes at any config

Uses omni.contract and preprocess; knows nothing of serving, queues, HTTP, argv or the environment.
"""
