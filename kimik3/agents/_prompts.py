"""Default instructions of kimik3's built-in agents, and the requests the agent writes itself.

The tiny K3-speaking test model (``models/k3-tiny``) was trained on prompts that use
:data:`CODING_INSTRUCTIONS` verbatim with the tools of the full coding harness
(:class:`kimik3.harness.CodingHarness`, what ``kimik3 run`` sends): changing either changes what
that model sees (``tests/test_k3_tiny.py`` pins the prompt).
"""

from __future__ import annotations

__all__ = [
    "CLEARED_RESULT", "CLEARED_START", "CLEARED_TOO_BIG", "CLEARED_USER", "CODING_INSTRUCTIONS", "COMPACTION_REQUEST",
    "COMPACTION_RETRY",
    "CONTINUE_REQUEST", "INTERRUPTED_REQUEST", "LOOP_NOTE", "LOOP_THEN", "SUMMARY_INSTRUCTIONS", "SUMMARY_NOTE",
    "SUMMARY_START",
]  # fmt: skip

CODING_INSTRUCTIONS = (
    "You are a coding agent. You work in a workspace directory through tools: read, write and "
    "edit files, search them, and run shell commands. Paths are relative to the workspace. "
    "When the task is done, answer the user briefly."
)
"""System prompt of the coding agent (``kimik3 run``)."""

SUMMARY_INSTRUCTIONS = (
    "A budget of this run is used up. Do not call tools. Answer the user now with what you "
    "found and what remains to be done."
)
"""Appended (as a system message) for the final tool-free turn when a budget runs out."""

COMPACTION_REQUEST = (
    "Summarise the conversation so far for your own later use: the task, what you did, what you "
    "found (file names, facts, results), and what remains. Be concise and concrete. Do not call tools."
)
"""The user message that asks for a compaction summary."""

SUMMARY_START = "[Summary of "
SUMMARY_NOTE = SUMMARY_START + "{n} earlier messages, written by you]\n{summary}"
"""What replaces older turns once the model summarised them (a user message)."""

CLEARED_START = "[Result cleared from the context"
CLEARED_RESULT = (CLEARED_START + " to save room: {call} returned {tokens:,} tokens here. Call it again if "
                  "you need it.]")
"""What an old tool result becomes when the agent clears it (:mod:`kimik3.agents._clearing`;
Anthropic's context editing): ``call`` is the call's name and arguments."""

CLEARED_TOO_BIG = (CLEARED_START + ": {call} returned {tokens:,} tokens, more than the context can hold. "
                   "Called again as it is, it gives the same: ask for a smaller part.]")
"""What a result of the last turn becomes when nothing else is left to clear and the request is
over the window (a result bigger than the window: calling it again would not help)."""

CLEARED_USER = ("[An earlier message of the user, {tokens:,} tokens, cut from the context: it did not fit the "
                "context window. It began: {start}]")
"""What an old user message becomes when nothing else is left to make the context fit the window
(:func:`kimik3.agents._clearing.shorten_users`): ``start`` is its first characters."""

COMPACTION_RETRY = "Your summary {problem}. Write the summary again, shorter, as plain text."
"""Asks once more when the summary came back empty or cut (``problem`` says which)."""

CONTINUE_REQUEST = "Your last message was cut off by the output limit. Continue where you stopped."
"""Sent after a reply (no tool call) that ``max_tokens`` cut."""

INTERRUPTED_REQUEST = "Your last message was cut off: the connection closed. Continue where you stopped."
"""Sent instead after a reply (no tool call) whose stream ended before the server finished it."""

LOOP_NOTE = ("[Note: you made {loop}. You already have this result: do not call it again; use it, try "
             "something different, or answer.{then}]\n")
"""Put before a call's result once the loop breaker counts ``Budgets.loop_warn`` repetitions
(``loop``: what was repeated, :class:`~kimik3.agents._loops.Loop`; ``then``: :data:`LOOP_THEN`
when calls get blocked, else empty)."""
LOOP_THEN = " Made {n} times in a row, it will not be run."
"""What :data:`LOOP_NOTE` says comes next (``n``: ``Budgets.loop_block``): the calls before it still run."""
