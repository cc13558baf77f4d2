"""How many tokens one message takes in a K3 prompt (:func:`message_tokens`): its framing too.

A message is more than its text: K3 frames it (``<|open|>message role="tool" tool="read_file"
index="1"<|sep|>`` ... ``<|close|>message<|sep|><|end_of_msg|>``, an assistant's think and
response tags, each call's and argument's tags). In a long run of small tool calls the framing is
most of the context; counting it with the message is what lets compaction tell what it can
shrink (the history) from what truly stays (the header: declarations, the template).
"""

from __future__ import annotations

from ..._exceptions import MediaError
from ...types import ImagePart, Message, ToolMessage, VideoPart
from ._encode import RenderedMessage, Segment, message_segments
from ._media import image_prompt_tokens, prepare_request_image
from ._tokenizer import K3Tokenizer, estimate_tokens

__all__ = ["message_tokens"]


def message_tokens(message: Message, tokenizer: K3Tokenizer | None, *, allow_local_files: bool = False) -> int:
    """Tokens ``message`` takes in a K3 prompt (thinking on: an assistant's reasoning is kept, as
    K3 replays it), framing included, encoded as :class:`~kimik3.PromptEncoder` encodes it.

    A tool message is framed with its own ``name`` (the encoder takes the call's, usually the
    same); an image counts its whole block (``<|media_begin|>image WxH<|media_content|>`` and its
    pads, docs/k3-format.md § Media tokens) when it can be prepared here (a ``data:`` URL, a local
    file when ``allow_local_files``), else its placeholder only (an http(s) URL: the server
    fetches it); a video part counts nothing (its frames are sampled by the engine).

    Args:
        message: a typed message.
        tokenizer: the K3 tokenizer; None: :func:`estimate_tokens` of the message's K3 text.
        allow_local_files: image parts may name local files (the engine's option).

    Returns:
        The token count (>= 1 for any message: its framing).

    Raises:
        InvalidRequestError, InvalidArgumentsError: a message K3 cannot encode (as the encoder).
    """
    content = message.content
    if tokenizer is not None and message.__class__ is ToolMessage and content.__class__ is str and content:
        # a tool's text result: its framing's tokens (the same for each result of that tool) plus
        # its text's (segments are encoded each on its own: the sum is exact; issue 44)
        return _tool_framing(tokenizer, message.name or "tool") + len(tokenizer.encode_segment(Segment(content, False)))
    images: list[ImagePart] = []
    if isinstance(content, list):
        images = [p for p in content if isinstance(p, ImagePart)]
        if any(isinstance(p, VideoPart) for p in content):
            message = message.model_copy(update={"content": [p for p in content if not isinstance(p, VideoPart)]})
    if isinstance(message, ToolMessage):
        item = RenderedMessage(message, message.name or "tool", 1)
    else:
        item = RenderedMessage(message)
    segments = message_segments(item, thinking=True)
    if tokenizer is None:
        n = estimate_tokens("".join(s.text for s in segments))
    else:
        n = len(tokenizer.encode_segments(segments))
    for part in images:
        url = part.image_url.url
        if url.startswith(("http://", "https://")):
            continue  # size unknown until the server fetches it: the placeholder
        try:
            prepared = prepare_request_image(url, allow_local_files=allow_local_files)
        except (MediaError, OSError):
            continue  # the request fails on it at the engine, with the reason
        width, height = prepared.size
        n += image_prompt_tokens(tokenizer, width, height, prepared.token_count) - 1  # minus the placeholder
    return n


_FRAMING: dict[tuple[int, str], tuple[K3Tokenizer, int]] = {}
_FRAMING_KEPT = 256


def _tool_framing(tokenizer: K3Tokenizer, name: str) -> int:
    """Tokens of a tool message's framing (``<|open|>message role="tool" tool="NAME" index="1"<|sep|>``
    through ``<|end_of_msg|>``), as :func:`message_tokens` frames it; counted once per tokenizer and
    tool name."""
    key = (id(tokenizer), name)
    hit = _FRAMING.get(key)
    if hit is None or hit[0] is not tokenizer:
        empty = ToolMessage(content="", tool_call_id="x", name=name)
        n = len(tokenizer.encode_segments(message_segments(RenderedMessage(empty, name, 1), thinking=True)))
        if len(_FRAMING) >= _FRAMING_KEPT:
            _FRAMING.pop(next(iter(_FRAMING)))
        hit = _FRAMING[key] = (tokenizer, n)
    return hit[1]
