"""The process a `VideoHasher` runs (`python -m omni.banks.vpdq_worker`): reads jobs from stdin and answers on stdout,
one after the other, until stdin closes. `--tmpdir DIR`: its temporary video files go in DIR (the parent removes it
when the worker ends, even killed).

A job and its answer are each a pickle behind an 8-byte big-endian length: the job `(MediaItem, MediaLimits)`, the
answer the video's vPDQ features (a tuple of `VpdqFeature`) or the typed `MediaError` for a video that cannot be
hashed. Only the parent that started it writes to it: the pickles come from that process, never from a request.
Knows nothing of banks, HTTP or the engine.
"""
from __future__ import annotations

import os
import pickle
import struct
import sys
import tempfile
from typing import BinaryIO

from preprocess.errors import MediaError
from preprocess.hashes import VpdqFeature, vpdq_of_video

HEADER = struct.Struct(">Q")


def write_message(stream: BinaryIO, value: object) -> None:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(HEADER.pack(len(data)) + data)
    while view:                                  # a raw pipe may take part of it at a time
        written = stream.write(view)
        view = view[len(view) if written is None else written:]
    stream.flush()


def read_exactly(stream: BinaryIO, size: int) -> bytes | None:
    """`size` bytes, or None at the end of the stream."""
    chunks, left = [], size
    while left:
        chunk = stream.read(left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def answer(job: tuple) -> tuple[VpdqFeature, ...] | MediaError:
    item, limits = job
    try:
        return vpdq_of_video(item, limits)
    except MediaError as exc:
        return exc


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--tmpdir"] and len(args) == 2:    # the temporary video files go where the parent removes them
        tempfile.tempdir = args[1]
    # the answers get a descriptor of their own; anything a library prints to stdout goes to stderr instead
    source, sink = sys.stdin.buffer, os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    while (header := read_exactly(source, HEADER.size)) is not None:
        body = read_exactly(source, HEADER.unpack(header)[0])
        if body is None:
            return 0
        write_message(sink, answer(pickle.loads(body)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
