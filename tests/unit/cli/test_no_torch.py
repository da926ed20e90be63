"""Issue 23, bad input: `omni` where torch does not import (a wheel installed without it, a CUDA build missing its
libraries) prints one line naming the pip command and exits 2, never a traceback.

Each case runs the entry point as the installed `omni` script does (`sys.exit(main())`, arguments from argv) in a
fresh interpreter where importing torch fails the way it would: absent (None in sys.modules: ModuleNotFoundError
naming torch) or present but broken (an import hook raising OSError, as a missing libcudnn does).
tests/integration/test_wheel.py checks the same on a real wheel installed into a venv without torch.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
ABSENT = "import sys; sys.modules['torch'] = None\n"
BROKEN = """import sys
class Broken:
    def find_spec(self, name, path=None, target=None):
        if name == 'torch':
            raise OSError('libcudnn.so.9: cannot open shared object file: No such file or directory')
sys.meta_path.insert(0, Broken())
"""
ENTRY = "from api.cli.main import main\nsys.exit(main())\n"


def run_omni(hide: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", hide + ENTRY, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, check=False)


@pytest.mark.parametrize("args", [("decide", "examples/inspection.json"), ("serve",), ("--help",)])
def test_without_torch_one_line_names_the_pip_command_and_exits_2(args):
    done = run_omni(ABSENT, *args)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    line = lines[0]
    assert line.startswith("omni: torch is not installed in this environment")
    assert sys.executable in line                                   # which environment lacks it
    assert "pip install torch==2.13.0" in line                      # the CPU line (the version tested)
    assert "https://download.pytorch.org/whl/cu128" in line         # a CUDA build
    assert "https://pytorch.org/get-started/locally/" in line       # where every build is listed


def test_a_torch_that_does_not_import_is_named_with_its_error():
    done = run_omni(BROKEN, "decide", "examples/inspection.json")
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("omni: torch is installed but does not import (OSError: libcudnn.so.9")
    assert "Reinstall it: pip install torch==2.13.0" in line


def test_with_torch_the_guard_is_silent():
    from api.cli.main import torch_problem

    assert torch_problem() is None
