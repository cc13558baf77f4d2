"""A run's token counts (:class:`RunTokens`): text, and each message as K3 frames it, counted once."""

from __future__ import annotations

from collections.abc import Sequence

from .._client import Client
from ..formats.k3 import K3Tokenizer, default_tokenizer, message_tokens
from ..types import Message, ToolSpec

__all__ = ["RunTokens"]


class RunTokens:
    """The token counts of one run, with one tokenizer: the agent's, else the engine's, else K3's
    real vocabulary (:func:`~kimik3.formats.k3.default_tokenizer`), resolved on first use.

    :meth:`message` counts a message with its K3 framing (:func:`~kimik3.formats.k3.message_tokens`)
    once, when it enters the history; later counts of it (compaction, usage a server did not
    report) are a look-up.

    Args:
        tokenizer: the agent's tokenizer (None: the client's, then K3's).
        client: the client (its ``tokenizer`` and ``allow_local_files``), if any.
    """

    def __init__(self, tokenizer: K3Tokenizer | None, client: Client | None) -> None:
        self._tokenizer = tokenizer
        self._client = client
        # id(message) -> its tokens; _held keeps each counted message alive, so an id is never
        # another message's while its entry is there (a pair a message was 0.1 KB more: issue 44)
        self._sizes: dict[int, int] = {}
        self._held: list[Message] = []

    @property
    def tokenizer(self) -> K3Tokenizer:
        """The tokenizer counts use."""
        client = self._client
        return self._tokenizer or (client.tokenizer if client is not None else None) or default_tokenizer()

    def text(self, text: str) -> int:
        """Tokens of plain text."""
        return len(self.tokenizer.encode_text(text))

    def head(self, tools: Sequence[ToolSpec]) -> int:
        """Tokens of a prompt without messages: the tool declarations of its head and the
        template around them (what every request carries beside its messages)."""
        return len(self.tokenizer.encode_messages([], list(tools)))

    def message(self, message: Message) -> int:
        """Tokens ``message`` takes in the prompt, framing included (counted once per message)."""
        hit = self._sizes.get(id(message))
        if hit is not None:
            return hit
        local = self._client is not None and self._client.allow_local_files
        n = message_tokens(message, self.tokenizer, allow_local_files=local)
        self._sizes[id(message)] = n
        self._held.append(message)
        return n

    def keep(self, messages: list[Message]) -> None:
        """Forget the counts of messages no longer in ``messages`` (once they are most of the
        cache: amortised O(1) a message)."""
        if len(self._sizes) > 2 * len(messages) + 64:
            live = {id(m) for m in messages}
            self._sizes = {k: v for k, v in self._sizes.items() if k in live}
            self._held = [m for m in self._held if id(m) in live]
