"""omni.model.doctor: `omni doctor`'s checks — is this machine, and this checkpoint directory, ready to answer? — found
without loading a weight.

    findings.py   Finding (ok / info / warn / fail, one line of words, figures for --json) and the exit code
    system.py     the machine: omni-decide, torch (CUDA build?), transformers, PyAV / FFmpeg decoders, CUDA devices,
                  bfloat16, Chromium and Ray when present
    headers.py    a safetensors file's header (names, dtypes, shapes) read raw, checked against the file's size
    layout.py     the tensors the configs promise, built with the real classes on the meta device, compared with headers
    directory.py  a checkpoint directory's checks: files, weight headers, backbone, joint head, tokenizer
    memory.py     the memory one request at the configured limits needs on a device, and whether it fits
    adapter.py    an adapter folder's checks against its base: manifest, files whole, headers, head and LoRA shapes
                  against the base's config (meta device), the base's sha256
    adapter_size.py  an adapter's weight bytes (head, LoRA of a rank over some modules) from a config on the meta
                  device; the released Qwen3-Omni-30B-A3B text decoder's config
    plan_weights.py  weight bytes per quantization scheme: the quantized text layers, the rest, the head (meta device)
    plan_peak.py  the activation and key/value peak of a prefill (a batch, a chunked record, media), per phase
    plan.py       the memory plan at an EngineConfig's limits: weights per scheme, one request's peak, the caches, and
                  which GPUs of a table it fits, with which scheme and the largest context and batch
    examine.py    all of it for an EngineConfig (device, dtype, limits) and an optional directory: a DoctorReport

Knows nothing of argv, the environment or printing (api/cli/doctor.py does those).
"""
