"""Fixtures shared by unit tests of several rooms: a real tiny filesystem that fills up (the decision log, the webhook
dead-letter file)."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

MOUNT_WAIT_S = 30.0   # a bound that turns a hung mount into a failure, never a claim about speed


def mount_tmpfs(directory: Path, options: str) -> bool:
    directory.mkdir(parents=True, exist_ok=True)
    try:
        return subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(directory)],
                              check=False, capture_output=True, timeout=MOUNT_WAIT_S).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@pytest.fixture
def tiny_filesystem(tmp_path):
    """A real 64 KiB filesystem (tmpfs), or a skip where this process may not mount one (not root)."""
    mounted = []

    def make(options: str = "size=64k") -> Path:
        directory = tmp_path / f"fs{len(mounted)}"
        if not mount_tmpfs(directory, options):
            pytest.skip("cannot mount a tmpfs here (needs root)")
        mounted.append(directory)
        return directory
    yield make
    for directory in mounted:
        subprocess.run(["umount", str(directory)], check=True, timeout=MOUNT_WAIT_S)
