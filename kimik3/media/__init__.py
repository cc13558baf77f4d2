"""Images and video the way Kimi K3 sees them (docs/k3-format.md § Media tokens).

Images: :func:`prepare_image` decodes, orients (EXIF), NaViT-resizes and composites transparency
over K3's chessboard, giving a :class:`PreparedImage` (RGB pixels, ``size``, ``token_count``,
PNG bytes / data URL, prompt text). :func:`navit_size` and :func:`image_token_count` do the size
and token arithmetic without pixels.

Video: :func:`sample_video` (or the streaming :func:`iter_video_chunks`) samples by timestamp at
8 fps, applies rotation metadata, and cuts 4-frame chunks with ``HH:MM:SS.mmm`` timestamps and
per-chunk sizes and token counts.

Numbers come from :class:`MediaConfig` (K3 defaults built in; ``MediaConfig.from_pretrained``
reads a model's ``preprocessor_config.json``). Errors: :class:`~kimik3.ImageTooLargeError`,
:class:`~kimik3.MediaDecodeError`, :class:`~kimik3.NoVideoStreamError` (all
:class:`~kimik3.MediaError`).
"""

from ._config import K3_MEDIA_CONFIG, MediaConfig, TransparentBgConfig
from ._image import PreparedImage, prepare_image
from ._image_decode import ImageSource, decode_data_url
from ._sizes import (
    MEDIA_BEGIN,
    MEDIA_CONTENT,
    MEDIA_END,
    MEDIA_PAD,
    image_prompt,
    image_token_count,
    navit_fixed_point,
    navit_size,
)
from ._video import (
    SampledVideo,
    VideoChunk,
    format_timestamp,
    iter_video_chunks,
    sample_video,
    video_chunk_prompt,
)
from ._video_decode import VideoSource

__all__ = [
    "ImageSource",
    "K3_MEDIA_CONFIG",
    "MEDIA_BEGIN",
    "MEDIA_CONTENT",
    "MEDIA_END",
    "MEDIA_PAD",
    "MediaConfig",
    "PreparedImage",
    "SampledVideo",
    "TransparentBgConfig",
    "VideoChunk",
    "VideoSource",
    "decode_data_url",
    "format_timestamp",
    "image_prompt",
    "image_token_count",
    "iter_video_chunks",
    "navit_fixed_point",
    "navit_size",
    "prepare_image",
    "sample_video",
    "video_chunk_prompt",
]
