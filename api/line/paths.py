"""The line's root: every file a unit names must lie inside it, read as it is now, not where a link points.

`unit_files(root, names)` resolves names a trigger gave (relative to the root; an absolute path only when it lies
under the root) and refuses, naming the entry: an empty name, `..` anywhere, a name that resolves outside the root,
a symbolic link (anywhere on its path under the root), something that is not a regular file, a missing file.
`slot_of(path)` says which request slot a file goes to by its extension (`images`, `audio`, `videos`), or None.
Knows nothing of sources, transports, the model or the request's other rules (sizes are checked when it is parsed).
"""
from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".gif", ".tif", ".tiff")
AUDIO_EXTENSIONS = (".wav", ".mp3", ".flac", ".ogg", ".m4a")
VIDEO_EXTENSIONS = (".mp4", ".webm", ".mov", ".mkv")
SLOT_OF_EXTENSION = {**dict.fromkeys(IMAGE_EXTENSIONS, "images"), **dict.fromkeys(AUDIO_EXTENSIONS, "audio"),
                     **dict.fromkeys(VIDEO_EXTENSIONS, "videos")}


class OutsideRoot(ValueError):
    """A file a trigger named cannot be used: the message names the entry and why."""


def slot_of(path: Path) -> str | None:
    return SLOT_OF_EXTENSION.get(path.suffix.lower())


def unit_files(root: Path, names: Iterable[str]) -> tuple[Path, ...]:
    """The named files as absolute paths under `root` (already resolved), in the given order; OutsideRoot else."""
    root = root.resolve()
    return tuple(_one(root, name) for name in names)


def _one(root: Path, name: str) -> Path:
    if not isinstance(name, str) or not name.strip() or "\x00" in name:
        raise OutsideRoot(f"{name!r}: a file name must be a non-empty string")
    given = Path(name)
    if ".." in given.parts:
        raise OutsideRoot(f"{name}: '..' is not allowed; name files under the line's root")
    path = given if given.is_absolute() else root / given
    try:
        relative = path.relative_to(root)
    except ValueError:
        raise OutsideRoot(f"{name}: outside the line's root {root}") from None
    current = root
    for part in relative.parts:            # no link anywhere under the root: a link could point out of it
        current = current / part
        try:
            mode = os.lstat(current).st_mode
        except FileNotFoundError:
            raise OutsideRoot(f"{name}: no such file under {root}") from None
        except OSError as exc:
            raise OutsideRoot(f"{name}: cannot be read ({exc.strerror})") from None
        if stat.S_ISLNK(mode):
            raise OutsideRoot(f"{name}: a symbolic link ({current.relative_to(root)}); links are not followed")
    if not stat.S_ISREG(mode):
        raise OutsideRoot(f"{name}: not a regular file")
    return current
