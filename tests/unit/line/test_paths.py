"""Files a unit names stay under the line's root: no `..`, nothing outside, no links anywhere on the way, regular
files only; each refusal names the entry."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from api.line.paths import OutsideRoot, slot_of, unit_files


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "root" / "4711").mkdir(parents=True)
    (tmp_path / "root" / "4711" / "unit.png").write_bytes(b"png")
    (tmp_path / "secret.png").write_bytes(b"outside")
    return tmp_path / "root"


def test_names_under_the_root_resolve_in_order(root):
    files = unit_files(root, ["4711/unit.png", str(root / "4711" / "unit.png")])
    assert files == (root.resolve() / "4711" / "unit.png",) * 2


@pytest.mark.parametrize(("name", "why"), [
    ("../secret.png", "'..' is not allowed"),
    ("4711/../../secret.png", "'..' is not allowed"),
    ("/etc/passwd", "outside the line's root"),
    ("4711/none.png", "no such file"),
    ("4711", "not a regular file"),
    ("", "must be a non-empty string"),
    ("a\x00b", "must be a non-empty string"),
])
def test_a_name_that_leaves_the_root_or_is_no_file_is_refused_by_name(root, name, why):
    with pytest.raises(OutsideRoot, match=why):
        unit_files(root, [name])


def test_links_are_never_followed_a_file_or_a_folder(root, tmp_path):
    os.symlink(tmp_path / "secret.png", root / "4711" / "link.png")
    os.symlink(tmp_path, root / "out")
    with pytest.raises(OutsideRoot, match="a symbolic link"):
        unit_files(root, ["4711/link.png"])
    with pytest.raises(OutsideRoot, match=r"a symbolic link \(out\)"):
        unit_files(root, ["out/secret.png"])


def test_slots_by_extension():
    assert [slot_of(Path(n)) for n in ("a.PNG", "b.wav", "c.mp4", "d.webm", "e.txt")] == \
        ["images", "audio", "videos", "videos", None]
