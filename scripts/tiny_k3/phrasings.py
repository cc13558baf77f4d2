"""Free phrasings: requests typed the way people type them, on ``examples/sample_workspace``,
written by hand and never used in training (``gen_data.py`` asserts that no training request
equals one of them, case, punctuation and spaces ignored). ``measure.py --free`` runs each one through kimik3's
agent end to end and checks the result; ``MORE`` is a second set, written after v3's data and used
to choose between its two training runs (``measure.py --free --more``).

Each entry: ``ask`` (the request), ``shape`` (for the per-shape table) and the checks:

- ``answer``: texts the final answer must contain (case-insensitive; a text that starts or ends
  with a letter or digit must not touch another one there, so "2" does not match "12");
- ``files``: files that must hold exactly this content afterwards (others must be unchanged);
- ``honest``: the answer says it is k3-tiny (the short reply for what it cannot do) and no file
  changed.

The workspace (examples/sample_workspace): notes.txt ("Ship the parser before the agent." /
"Then the tools."), server.cfg ("port = 8080" / "host = localhost"), hello.py ("import sys" /
'print("hello from kimik3")'), docs/todo.md ("# Todo" / "- tokenizer" / "- engines").
"""

from __future__ import annotations

import re
from typing import Any

NOTES = "Ship the parser before the agent.\nThen the tools.\n"
CFG = "port = 8080\nhost = localhost\n"
HELLO = 'import sys\nprint("hello from kimik3")\n'

FREE: list[dict[str, Any]] = [
    # count lines or words
    {"shape": "count", "ask": "how many lines are in notes.txt", "answer": ["2"]},
    {"shape": "count", "ask": "count the lines of server.cfg", "answer": ["2"]},
    {"shape": "count", "ask": "How many words does notes.txt have?", "answer": ["9"]},
    {"shape": "count", "ask": "number of lines in docs/todo.md?", "answer": ["3"]},
    {"shape": "count", "ask": "hello.py - how many lines??", "answer": ["2"]},
    # list files or a folder
    {"shape": "list", "ask": "list the files here", "answer": ["notes.txt", "server.cfg", "hello.py", "docs"]},
    {"shape": "list", "ask": "what files are in this folder?", "answer": ["notes.txt", "server.cfg", "hello.py"]},
    {"shape": "list", "ask": "whats in the docs folder", "answer": ["todo.md"]},
    {"shape": "list", "ask": "Show me all the files.", "answer": ["notes.txt", "server.cfg", "hello.py"]},
    {"shape": "list", "ask": "ls", "answer": ["notes.txt", "server.cfg", "hello.py"]},
    # show a file
    {"shape": "show", "ask": "show me notes.txt", "answer": ["Ship the parser before the agent.", "Then the tools."]},
    {"shape": "show", "ask": "cat server.cfg", "answer": ["port = 8080", "host = localhost"]},
    {"shape": "show", "ask": "what's in hello.py?", "answer": ['print("hello from kimik3")']},
    {"shape": "show", "ask": "Can you open docs/todo.md for me?", "answer": ["- tokenizer", "- engines"]},
    {"shape": "show", "ask": "display the contents of server.cfg", "answer": ["port = 8080", "host = localhost"]},
    # the n-th or last line
    {"shape": "line", "ask": "what does the first line of server.cfg say?", "answer": ["port = 8080"]},
    {"shape": "line", "ask": "give me the last line of notes.txt", "answer": ["Then the tools."]},
    {"shape": "line", "ask": "What is the second line of docs/todo.md?", "answer": ["- tokenizer"]},
    {"shape": "line", "ask": "last line in server.cfg?", "answer": ["host = localhost"]},
    {"shape": "line", "ask": "print line 2 of hello.py", "answer": ['print("hello from kimik3")']},
    {"shape": "line", "ask": "first line of hello.py pls", "answer": ["import sys"]},
    # run a script
    {"shape": "run", "ask": "run hello.py", "answer": ["hello from kimik3"]},
    {"shape": "run", "ask": "what does hello.py print?", "answer": ["hello from kimik3"]},
    {"shape": "run", "ask": "Execute hello.py and tell me what it outputs", "answer": ["hello from kimik3"]},
    {"shape": "run", "ask": "can you run the python script hello.py", "answer": ["hello from kimik3"]},
    # search a word
    {"shape": "search", "ask": "which file mentions localhost?", "answer": ["server.cfg"]},
    {"shape": "search", "ask": "find the word engines", "answer": ["docs/todo.md"]},
    {"shape": "search", "ask": "search for parser", "answer": ["notes.txt"]},
    {"shape": "search", "ask": "where does 8080 appear?", "answer": ["server.cfg"]},
    {"shape": "search", "ask": "grep kimik3", "answer": ["hello.py"]},
    # create a file with given content
    {"shape": "create", "ask": "create a file called greeting.txt with the text hello world",
     "files": {"greeting.txt": "hello world\n"}},
    {"shape": "create", "ask": "make a new file todo.txt containing: buy milk", "files": {"todo.txt": "buy milk\n"}},
    {"shape": "create", "ask": "write 'version 2' to version.txt", "files": {"version.txt": "version 2\n"}},
    # append a line
    {"shape": "append", "ask": "add the line debug = true to server.cfg", "files": {"server.cfg": CFG + "debug = true\n"}},
    {"shape": "append", "ask": "append 'Then the tests.' to notes.txt", "files": {"notes.txt": NOTES + "Then the tests.\n"}},
    # replace text in a file
    {"shape": "replace", "ask": "change the port in server.cfg to 9090", "files": {"server.cfg": "port = 9090\nhost = localhost\n"}},
    {"shape": "replace", "ask": "replace localhost with 0.0.0.0 in server.cfg", "files": {"server.cfg": "port = 8080\nhost = 0.0.0.0\n"}},
    {"shape": "replace", "ask": "in docs/todo.md, rename tokenizer to lexer",
     "files": {"docs/todo.md": "# Todo\n- lexer\n- engines\n"}},
    # copy a file
    {"shape": "copy", "ask": "copy notes.txt to notes.bak", "files": {"notes.bak": NOTES}},
    {"shape": "copy", "ask": "make a copy of server.cfg named backup.cfg", "files": {"backup.cfg": CFG}},
    {"shape": "copy", "ask": "duplicate hello.py as hello2.py", "files": {"hello2.py": HELLO}},
    # arithmetic beyond one digit
    {"shape": "math", "ask": "what's 2+2?", "answer": ["4"]},
    {"shape": "math", "ask": "What is 3 + 4?", "answer": ["7"]},
    {"shape": "math", "ask": "what is 12 * 7", "answer": ["84"]},
    {"shape": "math", "ask": "calculate 345 + 678", "answer": ["1023"]},
    {"shape": "math", "ask": "how much is 100 - 37?", "answer": ["63"]},
    {"shape": "math", "ask": "15 times 4?", "answer": ["60"]},
    {"shape": "math", "ask": "whats 1000 divided by 8", "answer": ["125"]},
    # greetings and "what can you do"
    {"shape": "hello", "ask": "hi! who are you?", "answer": ["k3-tiny"]},
    {"shape": "hello", "ask": "hello", "answer": ["k3-tiny"]},
    {"shape": "hello", "ask": "What can you do?", "answer": ["k3-tiny"]},
    {"shape": "hello", "ask": "hey there, what are you able to help with", "answer": ["k3-tiny"]},
    # the existing shapes, said otherwise
    {"shape": "existing", "ask": "first lines of notes.txt and server.cfg?",
     "answer": ["Ship the parser before the agent.", "port = 8080"]},
    {"shape": "existing", "ask": "put the first line of notes.txt into first.txt",
     "files": {"first.txt": "Ship the parser before the agent.\n"}},
    {"shape": "existing", "ask": "echo hello there", "answer": ["hello there"]},
    # outside what it knows: the honest short reply
    {"shape": "honest", "ask": "write me a poem about the sea", "honest": True},
    {"shape": "honest", "ask": "what's the weather in Paris today?", "honest": True},
    {"shape": "honest", "ask": "fix the typo in notes.txt", "honest": True},
    {"shape": "honest", "ask": "translate notes.txt into French", "honest": True},
    {"shape": "honest", "ask": "who won the world cup in 2018?", "honest": True},
    {"shape": "honest", "ask": "refactor hello.py to use a main function", "honest": True},
    {"shape": "honest", "ask": "deploy this to production", "honest": True},
]

MORE: list[dict[str, Any]] = [  # a second hand-written set, written after measuring FREE (run selection)
    {"shape": "count", "ask": "count words in server.cfg", "answer": ["6"]},
    {"shape": "count", "ask": "how many lines does hello.py have", "answer": ["2"]},
    {"shape": "list", "ask": "what's in this directory", "answer": ["notes.txt", "server.cfg", "hello.py"]},
    {"shape": "list", "ask": "list docs", "answer": ["todo.md"]},
    {"shape": "show", "ask": "print notes.txt", "answer": ["Ship the parser before the agent.", "Then the tools."]},
    {"shape": "show", "ask": "open hello.py", "answer": ['print("hello from kimik3")']},
    {"shape": "show", "ask": "can I see docs/todo.md?", "answer": ["- tokenizer", "- engines"]},
    {"shape": "line", "ask": "what's the 2nd line of notes.txt", "answer": ["Then the tools."]},
    {"shape": "line", "ask": "last line of hello.py?", "answer": ['print("hello from kimik3")']},
    {"shape": "line", "ask": "read the first line of docs/todo.md", "answer": ["# Todo"]},
    {"shape": "run", "ask": "please run hello.py", "answer": ["hello from kimik3"]},
    {"shape": "run", "ask": "launch hello.py", "answer": ["hello from kimik3"]},
    {"shape": "run", "ask": "python hello.py", "answer": ["hello from kimik3"]},
    {"shape": "search", "ask": "which file has the word tools", "answer": ["notes.txt"]},
    {"shape": "search", "ask": "where is localhost", "answer": ["server.cfg"]},
    {"shape": "create", "ask": "create notes2.txt with the text remember the milk", "files": {"notes2.txt": "remember the milk\n"}},
    {"shape": "create", "ask": "make a file hi.txt that says hi there", "files": {"hi.txt": "hi there\n"}},
    {"shape": "append", "ask": "append the line timeout = 30 to server.cfg", "files": {"server.cfg": CFG + "timeout = 30\n"}},
    {"shape": "replace", "ask": "set host to example.com in server.cfg", "files": {"server.cfg": "port = 8080\nhost = example.com\n"}},
    {"shape": "replace", "ask": "replace parser with lexer in notes.txt", "files": {"notes.txt": "Ship the lexer before the agent.\nThen the tools.\n"}},
    {"shape": "copy", "ask": "cp server.cfg server.bak", "files": {"server.bak": CFG}},
    {"shape": "math", "ask": "what is 25 times 25", "answer": ["625"]},
    {"shape": "math", "ask": "1234 + 4321 = ?", "answer": ["5555"]},
    {"shape": "math", "ask": "what's 99 minus 100", "answer": ["-1"]},
    {"shape": "hello", "ask": "hey! what can you do for me?", "answer": ["k3-tiny"]},
    {"shape": "honest", "ask": "write a unit test for hello.py", "honest": True},
    {"shape": "honest", "ask": "what is the capital of Italy?", "honest": True},
    {"shape": "honest", "ask": "sing me a song", "honest": True},
]

WORKSPACE_FILES = {"notes.txt": NOTES, "server.cfg": CFG, "hello.py": HELLO, "docs/todo.md": "# Todo\n- tokenizer\n- engines\n"}


def normalized(text: str) -> str:
    """A request compared without case, punctuation and extra spaces (training must not contain
    these): "What's 2+2?" and "whats 2 2" are the same."""
    text = re.sub(r"[^a-z0-9 ]", " ", text.lower().replace("'", ""))
    return " ".join(text.split())


FORBIDDEN_REQUESTS = frozenset(normalized(f["ask"]) for f in FREE)
"""Requests training never draws (MORE was written after the data: none of its requests occurs in it)."""
