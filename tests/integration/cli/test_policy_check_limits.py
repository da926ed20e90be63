"""`omni policy check` on a policy nested thousands deep (a real `omni` process): exit 2 with one line naming the
file and the nesting limit, never a RecursionError's traceback."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from omni.contract.toml_text import MAX_TOML_DEPTH

ROOT = Path(__file__).resolve().parents[3]
OMNI = "import sys; from api.cli.main import main; sys.exit(main())"  # what the `omni` console script runs


def test_a_deeply_nested_policy_is_exit_2_with_one_line(tmp_path):
    path = tmp_path / "deep.toml"
    path.write_text('version = "v"\n[questions.a]\nauto_at = 0.9\nact_on = ' + "[" * 5000 + "\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-c", OMNI, "policy", "check", str(path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, check=False)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    [line] = lines
    assert str(path) in line
    assert f"nested more than {MAX_TOML_DEPTH} levels" in line
