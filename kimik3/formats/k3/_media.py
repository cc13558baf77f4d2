"""Images and video in requests: what each engine sends, and how many tokens they cost.

- Sources: ``data:`` URLs always; http(s) image URLs are passed to a remote server (it fetches
  them; every engine that encodes the prompt locally, the embedded engine and ScriptedEngine,
  refuses them with :class:`~kimik3.MediaError`: nothing there fetches a URL); a local file
  path only when the engine allows it
  (``engine.allow_local_files = True``), so a message from an untrusted source cannot make the
  client read files (the same :class:`~kimik3.MediaError` whether the path exists or not).
  Video URLs: ``data:video/...`` or, when allowed, a local path; an http(s) video must be
  downloaded first (no engine fetches video).
- Images are prepared by :func:`kimik3.media.prepare_image` (NaViT resize, chessboard compositing
  of transparency, EXIF orientation) before they leave the client: the embedded engine passes the
  prepared PIL images as vLLM ``multi_modal_data`` for the prompt's ``<|kimi_image_placeholder|>``
  tokens; remote chat mode uploads them as lossless PNG data URLs, so the server's model sees the
  chessboard (stock vLLM drops alpha, docs/k3-format.md § Pixels). http(s) image URLs are passed through
  to a remote server unchanged (it fetches them; kimik3's compositing then does not apply).
- Video parts are sampled at 8 fps (:func:`kimik3.media.sample_video`). Decision: K3's released
  serving stack is image-only (vLLM 0.32's K3 processor has no video modality), so each 4-frame
  chunk is sent as its ``HH:MM:SS.mmm`` timestamp (text) followed by the chunk's first frame as an
  image at the chunk's size — the same token cost as K3's video contract (a chunk costs one
  frame's tokens), readable by every K3 server.
- Token accounting: each image costs ``<|media_begin|>image WxH<|media_content|>`` + N x
  ``<|media_pad|>`` + ``<|media_end|>`` (W x H as sent, N from the NaViT size), i.e. 3 + the
  tokens of ``"image WxH"`` + N, in place of the one placeholder token.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ..._exceptions import MediaError
from ...types import ImagePart, ImageURL, Message, TextPart, VideoPart
from ._tokenizer import K3Tokenizer, estimate_tokens

__all__ = [
    "expand_videos",
    "image_prompt_tokens",
    "prepare_request_image",
    "upload_url",
]

_PREPARED: OrderedDict[str, Any] = OrderedDict()  # url -> PreparedImage (small LRU)
_VIDEOS: OrderedDict[str, list[TextPart | ImagePart]] = OrderedDict()
_CACHE_SIZE = 64


def _lru_get(cache: OrderedDict[str, Any], key: str) -> Any:
    value = cache.get(key)
    if value is not None:
        cache.move_to_end(key)
    return value


def _lru_put(cache: OrderedDict[str, Any], key: str, value: Any) -> None:
    cache[key] = value
    if len(cache) > _CACHE_SIZE:
        cache.popitem(last=False)


def check_local_source(url: str, kind: str, allow_local_files: bool) -> None:
    """Refuse a part URL that names a local file unless the engine allows local files.

    Args:
        url: an image or video part's URL.
        kind: "image" or "video" (for the message).
        allow_local_files: the engine's ``allow_local_files``.

    Raises:
        MediaError: a path (anything but ``data:`` / ``http(s)://``) while local files are not
            allowed; the message is the same whether the file exists or not.
    """
    if allow_local_files or url.startswith(("data:", "http://", "https://")):
        return
    raise MediaError(
        f"{'an' if kind == 'image' else 'a'} {kind} part names a local file ({url[:80]!r}); files are read only "
        "when the engine allows it (engine.allow_local_files = True); send a data: URL otherwise"
    )


@contextmanager
def _read_errors(url: str, kind: str) -> Iterator[None]:
    """OSError of reading an allowed local file -> MediaError (typed, with the OS reason)."""
    try:
        yield
    except OSError as e:
        raise MediaError(f"cannot read the {kind} file {url[:80]!r}: {e.strerror or e}") from e


def prepare_request_image(url: str, *, allow_local_files: bool = False) -> Any:
    """The :class:`~kimik3.media.PreparedImage` for an image part's URL (a data URL, or a path
    when ``allow_local_files``), cached by URL so a long conversation does not decode the same
    screenshot every turn.

    Raises:
        MediaError (and subclasses): a local path that is not allowed or cannot be read, an
            unreadable or too large image.
    """
    check_local_source(url, "image", allow_local_files)  # before the cache: a hit must not bypass it
    prepared = _lru_get(_PREPARED, url)
    if prepared is None:
        from ...media import prepare_image  # Pillow is loaded only when a request has an image

        with _read_errors(url, "image"):
            prepared = prepare_image(url)
        _lru_put(_PREPARED, url, prepared)
    return prepared


def upload_url(url: str, *, allow_local_files: bool = False) -> str:
    """The URL to send to a remote chat endpoint: data URLs (and local files when allowed)
    become the prepared image as a PNG data URL; http(s) URLs are passed through."""
    if url.startswith(("http://", "https://")):
        return url
    return str(prepare_request_image(url, allow_local_files=allow_local_files).data_url())


def _check_video_url(url: str, allow_local_files: bool) -> None:
    if url.startswith(("http://", "https://")):
        raise MediaError(f"video URLs are not fetched ({url[:80]!r}): download it and send a data: URL")
    check_local_source(url, "video", allow_local_files)


def _video_parts(url: str, allow_local_files: bool) -> list[TextPart | ImagePart]:
    _check_video_url(url, allow_local_files)
    parts: list[TextPart | ImagePart] | None = _lru_get(_VIDEOS, url)
    if parts is None:
        from ...media import prepare_image, sample_video  # loaded only when a request has a video

        with _read_errors(url, "video"):
            video = sample_video(url)
        parts = []
        for chunk in video.chunks:
            prepared = prepare_image(chunk.frames[0])  # already at the chunk's size: kept as is
            parts.append(TextPart(text=chunk.timestamp))
            parts.append(ImagePart(image_url=ImageURL(url=prepared.data_url())))
        _lru_put(_VIDEOS, url, parts)
    return parts


_EXPANDED: OrderedDict[int, tuple[Message, Message]] = OrderedDict()  # id(msg) -> (msg, copy)


def expand_videos(messages: Sequence[Message], *, allow_local_files: bool = False) -> list[Message]:
    """Replace every video part by its sampled chunks (timestamp text + first-frame image).

    Messages without a video are returned as the same objects; a message with one is replaced by
    a copy (never mutated), the same copy on every call, so incremental prompt encoding keeps
    working across turns.

    Raises:
        MediaDecodeError, NoVideoStreamError: an unreadable video.
        VideoTooLongError: more samples or tokens than ``MediaConfig``'s caps.
        MediaError: an http(s) video URL, or a local path while local files are not allowed.
    """
    out: list[Message] = []
    for msg in messages:
        content = getattr(msg, "content", None)
        if not isinstance(content, list) or not any(isinstance(p, VideoPart) for p in content):
            out.append(msg)
            continue
        for part in content:  # checked on every call: a cached expansion must not bypass it
            if isinstance(part, VideoPart):
                _check_video_url(part.video_url.url, allow_local_files)
        hit = _EXPANDED.get(id(msg))
        if hit is not None and hit[0] is msg:
            out.append(hit[1])
            continue
        parts: list[Any] = []
        for part in content:
            if isinstance(part, VideoPart):
                parts.extend(_video_parts(part.video_url.url, allow_local_files))
            else:
                parts.append(part)
        copy = msg.model_copy(update={"content": parts})
        _EXPANDED[id(msg)] = (msg, copy)
        if len(_EXPANDED) > _CACHE_SIZE:
            _EXPANDED.popitem(last=False)
        out.append(copy)
    return out


def image_prompt_tokens(tokenizer: K3Tokenizer | None, width: int, height: int, token_count: int) -> int:
    """Tokens one image occupies in the expanded prompt:
    ``<|media_begin|>`` + ``"image WxH"`` + ``<|media_content|>`` + N pads + ``<|media_end|>``."""
    label = f"image {width}x{height}"
    label_tokens = len(tokenizer.encode_text(label)) if tokenizer is not None else estimate_tokens(label)
    return 3 + label_tokens + token_count
