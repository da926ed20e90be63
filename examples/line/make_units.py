"""Write the inspection demo's units as a camera cell would drop them: OUT/<unit id>/unit.png, hum.wav, fan.mp4,
then an empty READY marker once the three files are complete.

    python examples/line/make_units.py OUT [--count 6] [--seed 7] [--first 4711] [--delay-s 0]

Unit ids count up from --first (4711, 4712, ...); each unit's facts (nameplate, rattle, fan) are drawn by the
inspection fixture (fixtures/inspection.py) from the seed, so the same command writes the same bytes. --delay-s
waits between units (a line that runs meanwhile sees them arrive). Prints each unit id and its true facts.
Knows nothing of `omni line`; it only writes files.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from fixtures.inspection import inspection_sample  # installed with the package

FILES = {"images": "unit.png", "audio": "hum.wav", "videos": "fan.mp4"}


def write_unit(out: Path, unit_id: str, seed: int, index: int) -> dict:
    body, media = inspection_sample(seed, index)
    folder = out / unit_id
    folder.mkdir(parents=True, exist_ok=True)
    for slot, name in FILES.items():
        (folder / name).write_bytes(media[Path(body[slot][0]).name])
    (folder / "READY").touch()               # last: the unit is complete
    return body["labels"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--count", type=int, default=6)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--first", type=int, default=4711)
    parser.add_argument("--delay-s", type=float, default=0.0)
    args = parser.parse_args(argv)
    for i in range(args.count):
        labels = write_unit(args.out, str(args.first + i), args.seed, i)
        facts = {key: labels[key] for key in ("label_visible", "sounds_normal", "fan_running")}
        print(args.first + i, facts, flush=True)
        if args.delay_s and i + 1 < args.count:
            time.sleep(args.delay_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
