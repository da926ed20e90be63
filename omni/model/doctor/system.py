"""What this machine offers the model, found without loading one: omni-decide and the pins it was built with, torch
(a CUDA build or not), transformers, PyAV / FFmpeg and their decoders, CUDA devices and their free memory, bfloat16,
and the optional Chromium (browser tests) and Ray (`omni serve --ray`).

Each probe returns one `Finding`. Absent optional tools are `info`, never a failure; a missing decoder or a CUDA device
asked for but not there is a `fail`. Ray is found by its package metadata, never imported (that takes seconds);
Chromium on the executable search path (`shutil.which`), asked only for its version. Knows nothing of checkpoints,
argv, `OMNI_*` settings or how findings are printed.
"""
from __future__ import annotations

import importlib.metadata
import platform
import shutil
import subprocess
from collections.abc import Callable
from typing import Any

import torch

from omni.model.doctor.findings import Finding, gib

DISTRIBUTION = "omni-decide"
# Each kind of media the decoders must read, and FFmpeg decoder names that read it, preferred first. FFmpeg's native
# "av1" decoder only drives hardware decoders: without libdav1d or libaom a software AV1 file does not decode.
DECODERS = {"h264": ("h264",), "vp9": ("vp9", "libvpx-vp9"), "av1": ("libdav1d", "libaom-av1", "av1"),
            "aac": ("aac", "aac_fixed"), "opus": ("opus", "libopus"), "mp3": ("mp3float", "mp3")}
HARDWARE_ONLY = {"av1"}
CHROMIUM_NAMES = ("chromium", "chromium-browser")
VERSION_TIMEOUT_S = 10.0


def system_findings(device: str, dtype: torch.dtype) -> list[Finding]:
    """Every probe, in the order they are printed. `device` is resolved ("cpu", "cuda", "cuda:1"); `dtype` the one
    the weights would load in."""
    return [omni_decide(), torch_build(device), transformers_release(), pyav(), decoders(), cuda_devices(device),
            bfloat16(device, dtype), chromium(), ray()]


def installed_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def pinned(name: str) -> str | None:
    """omni-decide's requirement on `name` ("==5.23.0", ">=2.9"), from its installed metadata; None when it has none."""
    from packaging.requirements import Requirement

    try:
        requirements = importlib.metadata.requires(DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for line in requirements:
        requirement = Requirement(line)
        if requirement.name == name:
            return str(requirement.specifier) or None
    return None


def pin_note(name: str, version: str) -> tuple[bool, str]:
    """(within the pin, words saying which pin) for an installed `version` of `name`."""
    from packaging.specifiers import SpecifierSet

    pin = pinned(name)
    if pin is None:
        return True, ""
    ok = SpecifierSet(pin).contains(version, prereleases=True)
    return ok, f" (wants {pin})" if not ok else f" (pinned {pin})" if pin.startswith("==") else ""


def omni_decide() -> Finding:
    version = installed_version(DISTRIBUTION)
    where = f"Python {platform.python_version()} on {platform.system()} {platform.machine()}"
    if version is None:
        return Finding("omni-decide", "warn", f"not installed as a package (run from a source tree?); {where}",
                       {"python": platform.python_version()})
    return Finding("omni-decide", "ok", f"{version}; {where}", {"version": version, "python": platform.python_version()})


def torch_build(device: str) -> Finding:
    cuda = torch.version.cuda
    ok, pin = pin_note("torch", torch.__version__)
    data = {"version": torch.__version__, "cuda": cuda}
    if cuda is None:
        words = f"{torch.__version__}{pin}, a CPU build (no CUDA)"
        if device.startswith("cuda"):
            return Finding("torch", "fail", words + f": --device {device} needs a CUDA build of torch (see "
                           "docs/deployment.md)", data)
        return Finding("torch", "ok" if ok else "warn", words, data)
    return Finding("torch", "ok" if ok else "warn", f"{torch.__version__}{pin}, a CUDA {cuda} build", data)


def transformers_release() -> Finding:
    try:
        import transformers
    except ImportError as exc:
        return Finding("transformers", "fail", f"cannot be imported: {exc}")
    ok, pin = pin_note("transformers", transformers.__version__)
    data = {"version": transformers.__version__}
    if not hasattr(transformers, "Qwen3OmniMoeForConditionalGeneration"):
        return Finding("transformers", "fail", f"{transformers.__version__} has no Qwen3-Omni classes{pin}", data)
    if not ok:
        return Finding("transformers", "warn", f"{transformers.__version__}{pin}: the cache keyword and "
                       "use_audio_in_video change between releases", data)
    return Finding("transformers", "ok", f"{transformers.__version__}{pin}", data)


def pyav() -> Finding:
    try:
        import av
    except ImportError as exc:
        return Finding("PyAV / FFmpeg", "fail", f"PyAV cannot be imported ({exc}): no audio or video can be decoded")
    ffmpeg = getattr(av, "ffmpeg_version_info", None) or "?"
    codec = ".".join(map(str, av.library_versions.get("libavcodec", ())))
    return Finding("PyAV / FFmpeg", "ok", f"PyAV {av.__version__}, FFmpeg {ffmpeg} (libavcodec {codec})",
                   {"pyav": av.__version__, "ffmpeg": ffmpeg, "libavcodec": codec})


def find_decoder(names: tuple[str, ...]) -> str | None:
    """The first of `names` FFmpeg has as a decoder."""
    import av.codec

    for name in names:
        try:
            av.codec.Codec(name, "r")
        except ValueError:       # PyAV's UnknownCodecError
            continue
        return name
    return None


def decoders() -> Finding:
    try:
        import av  # noqa: F401 - that it imports is the check
    except ImportError:
        return Finding("decoders", "fail", "none: PyAV cannot be imported")
    found = {kind: find_decoder(names) for kind, names in DECODERS.items()}
    missing = [kind for kind, name in found.items() if name is None]
    hardware = [kind for kind, name in found.items() if kind in HARDWARE_ONLY and name == kind]
    words = " ".join(kind if name in (kind, None) else f"{kind}({name})" for kind, name in found.items()
                     if name is not None)
    if missing:
        return Finding("decoders", "fail", f"missing {', '.join(missing)} (media of that kind will be refused); "
                       f"have {words or 'none'}", {"decoders": found})
    if hardware:
        return Finding("decoders", "warn", f"{words}; {', '.join(hardware)} only through FFmpeg's hardware-only "
                       "decoder (no libdav1d)", {"decoders": found})
    return Finding("decoders", "ok", words, {"decoders": found})


def cuda_devices(device: str) -> Finding:
    if not torch.cuda.is_available():
        reason = "torch is a CPU build" if torch.version.cuda is None else "no CUDA device is visible"
        status = "fail" if device.startswith("cuda") else "info"
        return Finding("CUDA devices", status, f"none ({reason})", {"devices": []})
    devices: list[dict[str, Any]] = []
    for index in range(torch.cuda.device_count()):
        free, total = torch.cuda.mem_get_info(index)
        major, minor = torch.cuda.get_device_capability(index)
        devices.append({"index": index, "name": torch.cuda.get_device_name(index), "capability": f"{major}.{minor}",
                        "free_bytes": free, "total_bytes": total})
    words = "; ".join(f"cuda:{d['index']} {d['name']} {gib(d['free_bytes'])} free of {gib(d['total_bytes'])}"
                      for d in devices)
    chosen = torch.device(device)
    if chosen.type == "cuda" and (chosen.index or 0) >= len(devices):
        return Finding("CUDA devices", "fail", f"{device} asked for, but only {words}", {"devices": devices})
    return Finding("CUDA devices", "ok", words, {"devices": devices})


def bfloat16(device: str, dtype: torch.dtype) -> Finding:
    dtype_name = str(dtype).removeprefix("torch.")
    if not device.startswith("cuda"):
        return Finding("bfloat16", "info", f"CPU: weights load as {dtype_name}"
                       + (" (dtype auto on CPU)" if dtype == torch.float32 else ""), {"dtype": dtype_name})
    if not torch.cuda.is_available():
        return Finding("bfloat16", "info", "unknown: no CUDA device", {"dtype": dtype_name})
    supported = torch.cuda.is_bf16_supported()
    data = {"dtype": dtype_name, "supported": supported}
    if dtype == torch.bfloat16 and not supported:
        return Finding("bfloat16", "fail", f"{device} has no bfloat16, and the weights would load in it: "
                       "pass --dtype float16 (or float32)", data)
    return Finding("bfloat16", "ok" if supported else "info",
                   f"{'supported' if supported else 'not supported'} on {device}; weights load as {dtype_name}", data)


def chromium(which: Callable[[str], str | None] = shutil.which) -> Finding:
    path = next((p for p in map(which, CHROMIUM_NAMES) if p), None)
    if path is None:
        return Finding("Chromium", "info", "not installed (only the workbench's browser tests use it)")
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=VERSION_TIMEOUT_S,
                              check=False)
        version = done.stdout.strip().splitlines()[-1].split(" built on ")[0] if done.stdout.strip() else "?"
    except (OSError, subprocess.TimeoutExpired) as exc:
        version = f"version unknown ({type(exc).__name__})"
    return Finding("Chromium", "info", f"{path}: {version}", {"path": path, "version": version})


def ray() -> Finding:
    version = installed_version("ray")
    if version is None:
        return Finding("Ray", "info", "not installed (only omni serve --ray uses it: the [cluster] extra)")
    ok, pin = pin_note("ray", version)
    return Finding("Ray", "info" if ok else "warn", f"{version}{pin} (omni serve --ray)", {"version": version})
