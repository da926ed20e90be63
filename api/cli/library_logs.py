"""The libraries' loggers the CLI keeps quiet: import-time notices that are not the user's business (torchao's
optional CUDA kernels a CPU or another GPU's build cannot load, torch's deprecation notice about the enums torchao
registers). Errors still show. Knows nothing of commands or the model.
"""
from __future__ import annotations

import logging

QUIET_LOGGERS = ("torchao", "torch.utils._pytree")


def quiet_libraries() -> None:
    """Only errors from QUIET_LOGGERS (call after logging is configured)."""
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
