"""Request-level media limits: counts, bytes per item, group totals; each error names the item and the limit."""
from __future__ import annotations

import pytest

from preprocess.errors import MediaTooLarge
from preprocess.item import MediaItem
from preprocess.media import MediaLimits, MiB
from preprocess.media import check_request as check_items

pytestmark = pytest.mark.unit


def check_request(limits: MediaLimits = MediaLimits(), **sizes: list[int]) -> None:
    """Items of the given sizes per slot (zero bytes: only sizes are checked here), in prompt order."""
    check_items([MediaItem(slot, i, bytes(size)) for slot in ("images", "audio", "videos")
                 for i, size in enumerate(sizes.get(slot, []))], limits)


def refused(**kwargs) -> MediaTooLarge:
    with pytest.raises(MediaTooLarge) as info:
        check_request(**kwargs)
    return info.value


def test_within_limits_passes():
    check_request(images=[10] * 4, audio=[1000] * 4, videos=[2000, 3000])
    check_request()


def test_the_error_carries_the_item_itself():
    items = [MediaItem("images", i, bytes(10)) for i in range(5)]
    with pytest.raises(MediaTooLarge) as info:
        check_items(items)
    assert info.value.item is items[4] and info.value.item.loc == ("images", 4)


@pytest.mark.parametrize(("slot", "count", "label", "limit"), [("images", 5, "images[4]", "max_images=4"),
                                                       ("audio", 5, "audio[4]", "max_audio_clips=4"),
                                                       ("videos", 3, "videos[2]", "max_videos=2")])
def test_item_count_names_the_first_item_over(slot, count, label, limit):
    error = refused(**{slot: [10] * count})
    assert error.label == label
    assert limit in str(error) and f"{count} items" in str(error)


@pytest.mark.parametrize(("slot", "limit_name", "limit"), [("images", "max_image_bytes", 4 * MiB),
                                                     ("audio", "max_audio_bytes", 8 * MiB),
                                                     ("videos", "max_video_bytes", 16 * MiB)])
def test_bytes_per_item(slot, limit_name, limit):
    check_request(**{slot: [limit]})  # exactly at the limit is fine
    error = refused(**{slot: [10, limit + 1]})
    assert error.label == f"{slot}[1]"
    assert f"{limit + 1} bytes" in str(error) and f"{limit_name}={limit}" in str(error)


def test_images_total():
    error = refused(images=[3 * MiB, 3 * MiB, 3 * MiB])
    assert error.label == "images[2]"
    assert f"max_images_total_bytes={8 * MiB}" in str(error) and str(9 * MiB) in str(error)


def test_audio_and_video_share_one_total():
    check_request(audio=[8 * MiB], videos=[8 * MiB])
    error = refused(audio=[6 * MiB, 6 * MiB], videos=[1 * MiB, 4 * MiB])
    assert error.label == "videos[1]"
    assert f"max_audio_video_total_bytes={16 * MiB}" in str(error)


def test_images_do_not_count_towards_audio_video_total():
    check_request(images=[4 * MiB, 4 * MiB], audio=[8 * MiB], videos=[8 * MiB])


def test_counts_are_checked_before_sizes():
    error = refused(images=[5 * MiB] * 5)
    assert error.label == "images[4]" and "max_images=4" in str(error)


def test_custom_limits():
    limits = MediaLimits(max_videos=1, max_video_bytes=100)
    assert refused(videos=[10, 10], limits=limits).label == "videos[1]"
    error = refused(videos=[101], limits=limits)
    assert error.label == "videos[0]" and "max_video_bytes=100" in str(error)
