"""preprocess: caller bytes -> model inputs. No weights, no HTTP, no network, no file paths from users.

    item.py       the media-slot table and `MediaItem`: one media item as one typed value, carried by its errors
    errors.py     typed media errors (unsupported, too large, corrupt) in plain words; library messages kept apart
    media.py      MediaLimits (defaults = Clef-omni hosted) and the request-level checks on sizes, before decoding
    sniff.py      the format from the magic bytes, and whether it may be sent in a slot
    decode.py     one item -> its decoded arrays, by the slot it was sent in (image, audio or video)
    image.py      image bytes -> one upright RGB array (EXIF orientation, every mode to RGB), limits before decoding
    audio.py      audio bytes -> 16 kHz mono float32 (channels averaged, then resampled), bounded decoding
    video.py      video bytes -> uint8 patch rows of upright frames at 2 fps + the soundtrack, in one demux pass
    video_header.py  a video's picture stream and its header's limits (frame size, claimed duration), before decoding
    video_frames.py  the video frame policy (rule, rate, sizes, patch layout), REFERENCE_FRAMES, DecodedVideo
    resize.py     the reference's frame size chain: its pre-scale (swscale), then its processor's bicubic (torch)
    patches.py    frames <-> patch rows in the HF layout; PatchWriter writes them one frame at a time
    threads.py    ThreadBudget: the threads that decode media at once, lent to a request when idle
    side_thread.py  SideThread: a video's helper thread (soundtrack in order; frame scaling shared with the caller)
    processor.py  decoded media -> the thinker's media tensors + placeholder ids; `media_on_device` normalises video
                  pixels on the model's device
    align.py      placeholder token layout of the media segment, audio-in-video interleave, token-count formulas
    loader.py     a checkpoint's tokenizer, image processor and Whisper feature extractor
    hashes.py     what a medium is looked up in a hash bank by: a photo's PDQ hash (pdqhash), any bytes' sha256

Does not import `omni`.
"""
