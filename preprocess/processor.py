"""Decoded media -> the thinker's media kwargs + the placeholder ids of the media segment (after "STATE:\\n").

The only module that calls the checkpoint's processor classes (passed in; nothing is loaded here):

* images: the checkpoint's `Qwen2VLImageProcessorPil` with the reference size `IMAGE_SIZE` (smart resize to
  multiples of 32 within [65,536, 1,048,576] px, bicubic, normalise, patchify): `pixel_values`, `image_grid_thw`.
* audio: ONE `WhisperFeatureExtractor` call over all clips (standalone clips first, then the soundtracks of heard
  videos), `padding="longest"` (the reference's `padding=True`), `truncation=False, return_attention_mask=True`:
  `input_features` (N, 128, T), `feature_attention_mask` (N, T). Token counts come from the mask.
  When the longest clip is too short for the torch STFT the extractor picks when torch is installed (its centred
  reflect pad of n_fft/2 = 200 needs 201 samples), the same extractor's numpy path computes the features (its
  reflect pad may be wider than the signal: one frame from 160 samples), as the extractor does without torch.
* videos: the decoder already wrote each frame (at its final size, by the reference's resize chain, see
  `preprocess.video`) into uint8 patch rows in the HF layout (rows: t, h/m, w/m, m, m; columns: C, temporal,
  patch, patch). They stay uint8 to the model's device, where `media_on_device` normalises them as the reference's
  video processor does ((x - 127.5) / 127.5 in float32 for the Qwen3-Omni constants; another processor's constants
  are applied here instead): `pixel_values_videos`, `video_grid_thw`, and `video_second_per_grid` =
  temporal_patch_size / fps = 1.0 (frames really are 2 per second; the reference passes fps=2.0; the cookbook
  chain's 2.0 would stamp video at half the speed of its audio).

A request is encoded in two steps: `encode_item` makes each item model-ready on its own (`ItemEncoding`: an image's
pixel rows, a video's uint8 patches and soundtrack, an audio clip's samples — what a media cache can keep), then
`assemble_media` joins the items of one request: it concatenates, runs the ONE feature-extractor
call over every clip that is heard, decides whether videos are heard and lays out the ids. `encode_media` is both
steps at once; the result is the same whichever items came from a cache.

Position ids are not made here (the backbone calls the thinker's `get_rope_index`).
Knows nothing of prompts, questions, HTTP or decoding; does not import `omni`.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import torch

from preprocess import align
from preprocess.audio import SAMPLE_RATE_HZ, DecodedAudio
from preprocess.image import DecodedImage
from preprocess.patches import patchify_frames
from preprocess.video_frames import DecodedVideo

if TYPE_CHECKING:   # the classes of the processors passed in; nothing here imports transformers
    from transformers import BatchFeature, Qwen2VLImageProcessorPil, WhisperFeatureExtractor

T = TypeVar("T")
IMAGE_SIZE = {"shortest_edge": 65_536, "longest_edge": 1_048_576}  # reference (JSM IMAGE_SIZE), in pixels
VIDEO_FPS = 2.0


@dataclass(frozen=True)
class EncodedMedia:
    ids: list[int]  # the media segment: images, audio, videos; every block ends with the ids of "\n"
    tensors: dict[str, torch.Tensor]  # thinker forward kwargs, only those of the modalities present
    use_audio_in_video: bool
    tokens_by_modality: dict[str, int]  # image / audio / video / video_audio pad counts
    tokens_per_item: dict[str, list[int]] = field(default_factory=dict)  # same keys, one count per item
    # the pixel tensors, when not built yet (`complete()` builds them): position ids need only the grids and audio
    # lengths in `tensors`, and a forward that reuses a cached prefix needs no pixels at all
    deferred: Callable[[], dict[str, torch.Tensor]] | None = field(default=None, repr=False, compare=False)

    def complete(self) -> EncodedMedia:
        """This media with every thinker tensor built."""
        if self.deferred is None:
            return self
        return replace(self, tensors={**self.tensors, **self.deferred()}, deferred=None)


def _pixels(image: DecodedImage | np.ndarray) -> np.ndarray:
    return image.pixels if isinstance(image, DecodedImage) else np.asarray(image, dtype=np.uint8)


def _samples(clip: DecodedAudio | np.ndarray) -> np.ndarray:
    return clip.samples if isinstance(clip, DecodedAudio) else np.asarray(clip, dtype=np.float32)


def encode_images(images: Sequence[DecodedImage | np.ndarray],
                  image_processor: Qwen2VLImageProcessorPil) -> tuple[dict[str, torch.Tensor], list[int]]:
    """RGB (H, W, 3) uint8 images -> {pixel_values (P, C*tp*ps*ps) float32, image_grid_thw (N, 3)}, tokens."""
    if not images:
        return {}, []
    out = image_processor(images=[_pixels(image) for image in images], size=IMAGE_SIZE, return_tensors="pt",
                          input_data_format="channels_last")
    grids = out["image_grid_thw"]
    merge = image_processor.merge_size
    tokens = [align.video_tokens_for_grid(grid.tolist(), merge) for grid in grids]
    return {"pixel_values": out["pixel_values"], "image_grid_thw": grids}, tokens


def encode_audio(clips: Sequence[np.ndarray], feature_extractor: WhisperFeatureExtractor,
                 n_window: int = 50) -> tuple[dict[str, torch.Tensor], list[int]]:
    """16 kHz mono float32 clips -> {input_features (N, mel, T), feature_attention_mask (N, T)}, tokens."""
    if not clips:
        return {}, []
    if max(len(clip) for clip in clips) > feature_extractor.n_fft // 2:
        out = feature_extractor(list(clips), sampling_rate=SAMPLE_RATE_HZ, padding="longest", truncation=False,
                                return_attention_mask=True, return_tensors="pt")
    else:
        out = _numpy_path_features(clips, feature_extractor)
    mask = out["attention_mask"]
    tokens = [align.audio_tokens_for_mel_frames(int(n), n_window) for n in mask.sum(-1).tolist()]
    return {"input_features": out["input_features"], "feature_attention_mask": mask}, tokens


def _numpy_path_features(clips: Sequence[np.ndarray], feature_extractor: WhisperFeatureExtractor) -> BatchFeature:
    """What the extractor's `__call__` returns for `clips` (same arguments as `encode_audio`) when torch is not
    installed: its own `pad`, `_np_extract_fbank_features` and attention-mask rescale, steps in `__call__`'s order.

    For clips whose longest is at most n_fft/2 samples, which torch's centred STFT cannot reflect-pad; numpy's
    reflect pad repeats the reflection, so 160..200 samples give one frame. Below one hop (160) there is none, and
    the extractor raises: `omni.model.media` refuses such a request before it gets here.
    """
    from transformers import BatchFeature  # loaded already: the extractor passed in is one of its classes

    batch = BatchFeature({"input_features": [np.asarray(clip, dtype=np.float32)[:, None] for clip in clips]})
    out = feature_extractor.pad(batch, padding="longest", max_length=feature_extractor.n_samples, truncation=False,
                                return_attention_mask=True)
    waveforms = out["input_features"].transpose(2, 0, 1)[0]
    out["input_features"] = feature_extractor._np_extract_fbank_features(waveforms, "cpu")
    hop = feature_extractor.hop_length
    mask = out["attention_mask"][:, ::hop]
    if out["attention_mask"].shape[1] % hop != 0:  # the frame past the end is dropped, as by the extractor
        mask = mask[:, :-1]
    out["attention_mask"] = mask
    return out.convert_to_tensors("pt")


def video_pixel_affine(image_processor: Qwen2VLImageProcessorPil) -> tuple[list[float], list[float]]:
    """Per channel (offset, scale) with normalised = (x - offset) / scale on the uint8 value x: the processors'
    rescale and normalise fused as transformers' video processor fuses them (mean / rescale, std / rescale)."""
    rescale = float(image_processor.rescale_factor)
    return ([float(m) * (1.0 / rescale) for m in image_processor.image_mean],
            [float(s) * (1.0 / rescale) for s in image_processor.image_std])


def normalize_patches(patches_u8: np.ndarray | torch.Tensor,
                      image_processor: Qwen2VLImageProcessorPil) -> torch.Tensor:
    """uint8 patches (rows, C*tp*ps*ps) -> float32 (x - mean[c]/rescale) / (std[c]/rescale), the reference's values."""
    offset, scale = video_pixel_affine(image_processor)
    return _affine(torch.as_tensor(patches_u8), offset, scale)


def _affine(patches_u8: torch.Tensor, offset: Sequence[float], scale: Sequence[float]) -> torch.Tensor:
    channels = len(offset)
    x = patches_u8.to(torch.float32)
    view = x.view(x.shape[0], channels, -1)
    view.sub_(torch.tensor(offset, dtype=torch.float32, device=x.device).view(1, channels, 1))
    view.div_(torch.tensor(scale, dtype=torch.float32, device=x.device).view(1, channels, 1))
    return x


# The Qwen3-Omni processors' rescale 1/255, mean 0.5 and std 0.5, fused: x -> (x - 127.5) / 127.5. Video patches
# whose processor has these constants stay uint8 until the model's device (`media_on_device`), 4x less memory
# before it; any other processor's are normalised here, in float32.
DEVICE_AFFINE = ([127.5] * 3, [127.5] * 3)


def media_on_device(media: dict[str, torch.Tensor], device: torch.device | str,
                    dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Thinker media tensors on `device`: floating ones in `dtype` (not `video_second_per_grid`), uint8 video
    patches normalised there (float32, as the reference, then `dtype`), the rest as they are."""
    out = {}
    for key, value in media.items():
        if key == "pixel_values_videos" and value.dtype == torch.uint8:
            out[key] = _affine(value.to(device), *DEVICE_AFFINE).to(dtype)
        elif value.is_floating_point() and key != "video_second_per_grid":
            out[key] = value.to(device, dtype)
        else:
            out[key] = value.to(device)
    return out


def encode_videos(videos: Sequence[DecodedVideo], image_processor: Qwen2VLImageProcessorPil
                  ) -> tuple[dict[str, torch.Tensor], list[tuple[int, int, int]]]:
    """Decoded videos -> {pixel_values_videos, video_grid_thw, video_second_per_grid}, grids."""
    items = [encode_item(video, "videos", image_processor) for video in videos]
    grids = [_present(item.grid, "a video's grid") for item in items]
    return {**_video_layout(items), **_video_pixels(items, image_processor)}, grids


def _present(value: T | None, what: str) -> T:
    """`value`, which `encode_item` always sets for the slot it is read for."""
    if value is None:
        raise ValueError(f"{what} is missing: not an ItemEncoding made by encode_item for this slot")
    return value


def _video_layout(videos: Sequence[ItemEncoding]) -> dict[str, torch.Tensor]:
    """What position ids need of the videos: their grids and seconds per temporal grid."""
    if not videos:
        return {}
    return {"video_grid_thw": torch.tensor([v.grid for v in videos], dtype=torch.int64),
            "video_second_per_grid": torch.tensor([v.seconds_per_grid for v in videos], dtype=torch.float32)}


def _video_pixels(videos: Sequence[ItemEncoding],
                  image_processor: Qwen2VLImageProcessorPil) -> dict[str, torch.Tensor]:
    """The videos' patches, all videos together: {pixel_values_videos}, uint8 (normalised on the model's device by
    `media_on_device`) when the processor's constants are the Qwen3-Omni ones, else normalised here (float32)."""
    if not videos:
        return {}
    parts = [_present(v.patches, "a video's patches") for v in videos]
    patches = torch.cat(parts) if len(parts) > 1 else parts[0]
    if video_pixel_affine(image_processor) == DEVICE_AFFINE:
        return {"pixel_values_videos": patches}
    return {"pixel_values_videos": normalize_patches(patches, image_processor)}


def _image_pixels(images: Sequence[ItemEncoding]) -> dict[str, torch.Tensor]:
    if not images:
        return {}
    return {"pixel_values": torch.cat([_present(image.patches, "an image's pixels") for image in images])}


def _video_ids(grids: Sequence[tuple[int, int, int]], seconds_per_grid: Sequence[float],
               soundtrack_tokens: Sequence[int], heard: bool, ids: align.PlaceholderIds, merge: int,
               position_id_per_seconds: float) -> tuple[list[int], list[int]]:
    blocks: list[int] = []
    video_tokens: list[int] = []
    for index, grid in enumerate(grids):
        video_tokens.append(align.video_tokens_for_grid(grid, merge))
        if heard:
            blocks += align.video_audio_block(grid, soundtrack_tokens[index], ids, merge_size=merge,
                                              second_per_grid=seconds_per_grid[index],
                                              position_id_per_seconds=position_id_per_seconds)
        else:
            blocks += align.video_block(video_tokens[-1], ids)
    return blocks, video_tokens


@dataclass(frozen=True)
class ItemEncoding:
    """One media item made model-ready on its own: what does not depend on the other items of its request.

    images: `patches` float32 pixel rows from the image processor; videos: `patches` uint8 (normalised when
    assembled: 4x smaller while kept) plus `samples` = the soundtrack (None without one); audio: `samples` only.
    """

    slot: str                                   # "images" | "audio" | "videos"
    patches: torch.Tensor | None = None
    grid: tuple[int, int, int] | None = None
    seconds_per_grid: float | None = None
    samples: np.ndarray | None = None
    container: str = ""                         # the sniffed format ("" for arrays given directly)
    used: dict[str, Any] = field(default_factory=dict)   # what the model sees of it (JSON-ready; the audit record)


def encode_item(decoded: DecodedImage | DecodedAudio | DecodedVideo | np.ndarray, slot: str,
                image_processor: Qwen2VLImageProcessorPil) -> ItemEncoding:
    """A decoded item of `slot` -> its ItemEncoding (the image processor for images, patchify for video frames).

    An image may also be a (H, W, 3) uint8 array and an audio clip (n,) float samples at 16 kHz."""
    used: dict[str, Any]
    if slot == "images" and isinstance(decoded, (DecodedImage, np.ndarray)):
        tensors, tokens = encode_images([decoded], image_processor)
        grid_t, grid_h, grid_w = (int(n) for n in tensors["image_grid_thw"][0].tolist())
        pixels, patch = _pixels(decoded), image_processor.patch_size
        used = {"source_width": int(pixels.shape[1]), "source_height": int(pixels.shape[0]),
                "orientation": decoded.orientation if isinstance(decoded, DecodedImage) else 1,
                "width": grid_w * patch, "height": grid_h * patch, "tokens": tokens[0]}
        return ItemEncoding(slot, tensors["pixel_values"], (grid_t, grid_h, grid_w), container=_container(decoded),
                            used=used)
    if slot == "audio" and isinstance(decoded, (DecodedAudio, np.ndarray)):
        samples = _samples(decoded)
        used = {"seconds": round(len(samples) / SAMPLE_RATE_HZ, 6), "samples": len(samples),
                "sample_rate_hz": SAMPLE_RATE_HZ}
        if isinstance(decoded, DecodedAudio):
            used |= {"source_sample_rate_hz": decoded.source_sample_rate_hz,
                     "source_channels": decoded.source_channels}
        return ItemEncoding(slot, samples=samples, container=_container(decoded), used=used)
    if slot == "videos" and isinstance(decoded, DecodedVideo):
        patch, temporal = image_processor.patch_size, image_processor.temporal_patch_size
        layout = (decoded.layout.patch_size, decoded.layout.temporal_patch_size, decoded.layout.merge_size)
        if layout == (patch, temporal, image_processor.merge_size):
            patches, grid = decoded.patches, decoded.grid       # written in this layout while decoding
        else:
            patches, grid = patchify_frames(decoded.frames, patch, temporal, image_processor.merge_size)
        track = decoded.soundtrack
        used = {"source_width": decoded.source_width, "source_height": decoded.source_height,
                "rotation_degrees": decoded.rotation_degrees, "width": decoded.width,
                "height": decoded.height, "fps": decoded.fps, "frames": decoded.frame_count,
                "frame_times_s": list(decoded.frame_times_s),
                "soundtrack_seconds": round(len(track) / SAMPLE_RATE_HZ, 6) if track is not None else None}
        return ItemEncoding(slot, torch.from_numpy(patches), grid, temporal / decoded.fps, track,
                            container=decoded.container, used=used)
    raise TypeError(f"a {type(decoded).__name__} is not an item of the {slot!r} slot")


def _container(decoded: DecodedImage | DecodedAudio | np.ndarray) -> str:
    return decoded.container if isinstance(decoded, (DecodedImage, DecodedAudio)) else ""


def assemble_media(items: Sequence[ItemEncoding], *, image_processor: Qwen2VLImageProcessorPil,
                   feature_extractor: WhisperFeatureExtractor,
                   token_ids: align.PlaceholderIds, position_id_per_seconds: float = 13.0,
                   n_window: int = 50) -> EncodedMedia:
    """The ItemEncodings of one request, in prompt order -> its EncodedMedia (ids, thinker kwargs, token counts).

    The pixel tensors are deferred (`EncodedMedia.complete()` builds them); the audio features are built at once,
    since their mask gives the audio token counts. `position_id_per_seconds` and `n_window` must be the thinker
    config's values (13 and 50 for Qwen3-Omni).
    """
    images = [item for item in items if item.slot == "images"]
    videos = [item for item in items if item.slot == "videos"]
    heard = align.hear_videos([video.samples for video in videos])
    clips = [_present(item.samples, "an audio clip's samples") for item in items if item.slot == "audio"]
    tracks = [_present(video.samples, "a heard video's soundtrack") for video in videos] if heard else []
    image_tensors: dict[str, torch.Tensor] = {}
    image_tokens: list[int] = []
    if images:
        image_grids = [_present(image.grid, "an image's grid") for image in images]
        image_tensors = {"image_grid_thw": torch.tensor(image_grids, dtype=torch.int64)}
        image_tokens = [align.video_tokens_for_grid(grid, image_processor.merge_size) for grid in image_grids]
    audio_tensors, all_audio_tokens = encode_audio(clips + tracks, feature_extractor, n_window)
    video_tensors = _video_layout(videos)
    grids = [_present(video.grid, "a video's grid") for video in videos]
    audio_tokens, track_tokens = all_audio_tokens[:len(clips)], all_audio_tokens[len(clips):]
    ids: list[int] = []
    for count in image_tokens:
        ids += align.image_block(count, token_ids)
    for count in audio_tokens:
        ids += align.audio_block(count, token_ids)
    seconds_per_grid = video_tensors["video_second_per_grid"].tolist() if videos else []
    video_ids, video_tokens = _video_ids(grids, seconds_per_grid, track_tokens, heard, token_ids,
                                         image_processor.merge_size, position_id_per_seconds)
    ids += video_ids
    per_item = {"image": image_tokens, "audio": audio_tokens, "video": video_tokens, "video_audio": track_tokens}
    pixels = (lambda: {**_image_pixels(images), **_video_pixels(videos, image_processor)}) if images or videos else None
    return EncodedMedia(ids=ids, tensors={**image_tensors, **audio_tensors, **video_tensors}, use_audio_in_video=heard,
                        tokens_by_modality={key: sum(value) for key, value in per_item.items()},
                        tokens_per_item=per_item, deferred=pixels)


def encode_media(images: Sequence[DecodedImage | np.ndarray] = (),
                 audio_clips: Sequence[DecodedAudio | np.ndarray] = (),
                 videos: Sequence[DecodedVideo] = (), *, image_processor: Qwen2VLImageProcessorPil,
                 feature_extractor: WhisperFeatureExtractor,
                 token_ids: align.PlaceholderIds, position_id_per_seconds: float = 13.0,
                 n_window: int = 50) -> EncodedMedia:
    """Decoded media of one request -> EncodedMedia: `encode_item` for each, then `assemble_media`."""
    items = [encode_item(image, "images", image_processor) for image in images] + \
        [encode_item(clip, "audio", image_processor) for clip in audio_clips] + \
        [encode_item(video, "videos", image_processor) for video in videos]
    return assemble_media(items, image_processor=image_processor, feature_extractor=feature_extractor,
                          token_ids=token_ids, position_id_per_seconds=position_id_per_seconds,
                          n_window=n_window).complete()
