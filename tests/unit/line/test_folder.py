"""The folder-watch source on a real folder (watchfiles' OS events, and its polling): a unit is offered once, when
it is whole (its marker, or a quiet period after the last write), with its media under the root; a unit that
cannot be decided is offered with its problem, never skipped."""
from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from api.line.config import LineContext
from api.line.config_reader import TableReader
from api.line.folder import FolderSource, parse_source
from api.line.ports import LineError, Trigger
from omni.contract.toml_text import load_toml
from tests.threads import asyncio_run

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64


def source(root: Path, keys: str) -> FolderSource:
    text = f"[[source]]\n{keys}"
    table = load_toml(text)["source"][0]
    config = parse_source(TableReader(text, "line.toml", root.parent), table, "source[0]",
                          LineContext("cell-4", root))
    return config.build(LineContext("cell-4", root))


def watch(folder: FolderSource, act: Callable[[], object], until: Callable[[list[Trigger]], bool],
          seconds: float = 20.0, seen: list[Trigger] | None = None) -> list[Trigger]:
    """Run the source, do `act` (a plain function, or a coroutine function run on the loop), until `until`."""
    seen = [] if seen is None else seen

    async def emit(trigger: Trigger) -> None:
        seen.append(trigger)

    async def main() -> None:
        task = asyncio.create_task(folder.run(emit))
        await asyncio.sleep(0.3)                     # the watch is up
        done = act()
        if asyncio.iscoroutine(done):
            await done
        ends = time.monotonic() + seconds
        while not until(seen) and time.monotonic() < ends:
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.3)                     # nothing more comes (each unit once)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio_run(main())
    return seen


def unit(folder: Path, names: tuple[str, ...] = ("unit.png", "hum.wav", "fan.mp4"), marker: str | None = None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_bytes(PNG)
    if marker:
        (folder / marker).write_text("")


@pytest.fixture
def root(tmp_path) -> Path:
    path = tmp_path / "units"
    path.mkdir()
    return path


def test_a_unit_is_offered_once_when_its_marker_appears_with_its_media_in_name_order(root):
    unit(root / "4710", marker="READY")                     # whole before the line started: offered at start
    unit(root / "4711")                                     # files, no marker yet: waits
    (root / "4711" / "notes.xml").write_text("<camera/>")   # not media: not part of the unit
    folder = source(root, 'type = "folder"\nmarker = "READY"\n')

    seen: list[Trigger] = []

    async def act() -> None:
        await asyncio.sleep(0.5)
        assert [t.unit_id for t in seen] == ["4710"]
        (root / "4711" / "READY").write_text("")
        await asyncio.sleep(0.3)
        (root / "4711" / "unit.png").write_bytes(PNG * 2)      # a change after it was offered: not again

    watch(folder, act, lambda s: len(s) >= 2, seen=seen)
    assert [t.unit_id for t in seen] == ["4710", "4711"]
    assert seen[1].files == tuple((root / "4711" / name).resolve() for name in ("fan.mp4", "hum.wav", "unit.png"))
    assert all(t.problem is None and t.source == f"folder:{root.resolve()}" for t in seen)
    assert folder.stats()["units"] == 2 and folder.stats()["bad_units"] == 0


def test_without_a_marker_a_unit_being_written_waits_for_its_quiet_period(root):
    folder = source(root, 'type = "folder"\nquiet_ms = 400\n')
    written: list[float] = []

    async def act() -> None:
        (root / "4711").mkdir()
        with (root / "4711" / "clip.wav").open("wb") as stream:
            for _ in range(8):                      # a slow writer: a chunk every 150 ms, 1.2 s in all
                stream.write(b"\x00" * 4096)
                stream.flush()
                written.append(time.monotonic())
                await asyncio.sleep(0.15)

    seen = watch(folder, act, lambda s: len(s) >= 1)
    assert [t.unit_id for t in seen] == ["4711"]
    assert (root / "4711" / "clip.wav").stat().st_size == 8 * 4096 and len(written) == 8


def test_the_stem_layout_groups_files_by_stem_and_takes_an_extension_as_marker(root):
    for name in ("4711.png", "4711.wav", "4712.png"):
        (root / name).write_bytes(PNG)
    folder = source(root, 'type = "folder"\nlayout = "stem"\nmarker = ".ready"\n')
    seen = watch(folder, lambda: (root / "4711.ready").write_text(""), lambda s: len(s) >= 1)
    assert [t.unit_id for t in seen] == ["4711"]
    assert seen[0].files == ((root / "4711.png").resolve(), (root / "4711.wav").resolve())


def test_polling_finds_units_too(root):
    folder = source(root, 'type = "folder"\nmarker = "READY"\npoll_ms = 50\n')
    seen = watch(folder, lambda: unit(root / "A-1", marker="READY"), lambda s: len(s) >= 1)
    assert [t.unit_id for t in seen] == ["A-1"] and len(seen[0].files) == 3


def test_a_units_state_file_is_its_state(root):
    unit(root / "u1", ("unit.png",))
    (root / "u1" / "state.json").write_text(json.dumps({"station": 4, "shift": "B"}))
    unit(root / "u2", ("unit.png",))
    (root / "u2" / "state.txt").write_text("unit from the night shift")
    unit(root / "u3", ("unit.png",))
    (root / "u3" / "state.json").write_text("{not json")
    for name in ("u1", "u2", "u3"):
        (root / name / "READY").write_text("")
    seen = {t.unit_id: t for t in watch(source(root, 'type = "folder"\nmarker = "READY"\n'), lambda: None,
                                        lambda s: len(s) >= 3)}
    assert seen["u1"].state == {"station": 4, "shift": "B"} and seen["u1"].problem is None
    assert seen["u2"].state == "unit from the night shift"
    assert seen["u3"].problem is not None and "state.json is not JSON" in seen["u3"].problem


def test_a_unit_that_cannot_be_decided_is_offered_with_its_problem(root, tmp_path):
    outside = tmp_path / "secret.png"
    outside.write_bytes(PNG)
    unit(root / "linked", ("unit.png",))
    os.symlink(outside, root / "linked" / "b.png")                     # a link inside a unit
    os.symlink(tmp_path, root / "folderlink")                          # a unit folder that is a link
    unit(root / "empty", ())                                           # no media at all
    unit(root / "many", tuple(f"{i}.png" for i in range(5)))           # more than max_files
    unit(root / "big", ("unit.png",))
    (root / "big" / "unit.png").write_bytes(PNG * 100)                 # more than max_unit_bytes
    unit(root / "bad name!", ("unit.png",))                            # not a unit id
    for name in ("linked", "empty", "many", "big", "bad name!"):
        (root / name / "READY").write_text("")
    folder = source(root, 'type = "folder"\nmarker = "READY"\nmax_files = 4\nmax_unit_bytes = 1000\n')
    seen = {t.unit_id: t for t in watch(folder, lambda: None, lambda s: len(s) >= 6)}
    problems = {unit_id: trigger.problem for unit_id, trigger in seen.items()}
    assert "symbolic link" in problems["linked"] and "links are not followed" in problems["folderlink"]
    assert "no media files" in problems["empty"]
    assert "max_files is 4" in problems["many"] and "max_unit_bytes is 1000" in problems["big"]
    [invalid] = [unit_id for unit_id in seen if unit_id.startswith("invalid-")]
    assert "'bad name!' must be 1-128 letters" in problems[invalid]
    assert all(not trigger.files for trigger in seen.values())
    assert folder.stats()["bad_units"] == 6


@pytest.mark.parametrize(("text", "expected"), [
    ('type = "folder"\npath = "../elsewhere"\n', "source[0].path (line 3): '../elsewhere' lies outside"),
    ('type = "folder"\npath = "missing"\n', "source[0].path (line 3):"),
    ('type = "folder"\nlayout = "stem"\nmarker = "READY"\n', "source[0].marker (line 4): 'READY': with layout"),
    ('type = "folder"\nmarker = "a/b"\n', "source[0].marker (line 3): 'a/b' must be a file name"),
    ('type = "folder"\nquiet_ms = 0\n', "source[0].quiet_ms (line 3): must be an integer 10..3600000"),
    ('type = "folder"\nlayout = "tree"\n', "source[0].layout (line 3):"),
    ('type = "folder"\nsettle = 1\n', "source[0].settle (line 3): unknown key"),
])
def test_a_mistake_in_the_folder_table_names_its_key(root, text, expected):
    with pytest.raises(LineError) as caught:
        source(root, text)
    assert expected in str(caught.value), str(caught.value)


def test_a_unit_cleared_away_is_forgotten_and_offered_again_if_it_comes_back(root):
    import shutil

    unit(root / "4711", marker="READY")
    folder = source(root, 'type = "folder"\nmarker = "READY"\nrescan_s = 0.2\n')
    seen: list[Trigger] = []

    async def act() -> None:
        await asyncio.sleep(0.5)
        shutil.rmtree(root / "4711")                     # the cell clears the unit away
        await asyncio.sleep(0.6)                         # a rescan sees it gone
        unit(root / "4711", marker="READY")              # and writes it again: offered again (the ledger decides)

    watch(folder, act, lambda s: len(s) >= 2, seen=seen)
    assert [t.unit_id for t in seen] == ["4711", "4711"]
