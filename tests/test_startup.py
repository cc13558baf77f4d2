"""Start-up (issue 30, point 5): ``import kimik3`` leaves the heavy dependencies for first use.

Each check runs in a fresh interpreter (``sys.modules`` of this test process is shared with every
other test). What is asserted is which modules are loaded, never a time: the time is measured by
``bench/startup.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# The modules that made most of `import kimik3`'s time (openai alone ~45%), none needed to import it.
HEAVY = ("openai", "PIL", "av", "numpy", "httpx", "jsonschema", "tiktoken", "kimik3.media", "kimik3._verify")

FIRST_USE = '''
import json, sys
import kimik3
out = {}
out["tiktoken_before"] = "tiktoken" in sys.modules
tok = kimik3.K3Tokenizer()
out["vocab"] = tok.decode(tok.encode_text("hello, world"))
out["jsonschema_before"] = "jsonschema" in sys.modules
@kimik3.tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b
out["schema"] = add.parameters["required"]
out["jsonschema"] = "jsonschema" in sys.modules
out["openai_before"] = "openai" in sys.modules
kimik3.RemoteEngine(base_url="http://127.0.0.1:9/v1", model="m")
out["openai"] = "openai" in sys.modules
import httpx, openai
from kimik3.engines._endpoint import map_openai_error
req = httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
out["mapped"] = type(map_openai_error(openai.APITimeoutError(request=req))).__name__
out["verify_before"] = "kimik3._verify" in sys.modules
from kimik3 import *  # every name of __all__, the lazy ones included
out["star"] = sorted(set(kimik3.__all__) - set(globals()))
out["dir"] = "verify" in dir(kimik3)
out["verify"] = [kimik3.verify.__module__, kimik3.verify.__name__, "kimik3._verify" in sys.modules]
try:
    kimik3.no_such_name
except AttributeError as e:
    out["missing"] = str(e)
print(json.dumps(out))
'''


def child(code: str) -> object:
    """The JSON a fresh ``python -c code`` prints (run in the repository root, 120 s at most)."""
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_kimik3_loads_none_of_the_heavy_dependencies() -> None:
    loaded = child(f"import json, sys, kimik3; print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))")
    assert loaded == []


def test_every_public_name_resolves_and_the_heavy_ones_load_at_first_use() -> None:
    assert child(FIRST_USE) == {
        "tiktoken_before": False,
        "vocab": "hello, world",
        "jsonschema_before": False,
        "schema": ["a", "b"],
        "jsonschema": True,
        "openai_before": False,
        "openai": True,
        "mapped": "APITimeoutError",
        "verify_before": False,
        "star": [],
        "dir": True,
        "verify": ["kimik3", "verify", True],
        "missing": "module 'kimik3' has no attribute 'no_such_name'",
    }


# Modules `import kimik3` + `from kimik3 import Agent` do not need (issue 44, point 5): the
# completions and vLLM engines, vLLM's presets, the GPU table and the pre-flight checks.
LAZY_ENGINES = ("kimik3.engines._completions", "kimik3.engines._vllm", "kimik3.engines._presets",
                "kimik3.engines._gpus", "kimik3.engines._preflight")

ENGINES_FIRST_USE = f'''
import json, sys
import kimik3
from kimik3 import Agent, ScriptedEngine
out = {{"before": [m for m in {LAZY_ENGINES!r} if m in sys.modules]}}
from kimik3 import VLLMEngine, RemoteCompletionsEngine
from kimik3.engines import PRESETS, preflight, ChatForImages
import kimik3.engines as engines
out["names"] = [VLLMEngine.__name__, RemoteCompletionsEngine.__name__, preflight.__name__, ChatForImages.__name__]
out["same"] = [kimik3.VLLMEngine is engines.VLLMEngine, engines.RemoteCompletionsEngine is RemoteCompletionsEngine]
out["presets"] = isinstance(PRESETS, dict) and len(PRESETS) > 0
out["after"] = [m for m in {LAZY_ENGINES!r} if m in sys.modules]
out["dir"] = all(n in dir(engines) for n in engines.__all__)
try:
    engines.NoSuchEngine
except AttributeError as e:
    out["missing"] = str(e)
print(json.dumps(out))
'''


def test_the_engines_an_agent_does_not_need_load_at_first_use() -> None:
    assert child(ENGINES_FIRST_USE) == {
        "before": [],
        "names": ["VLLMEngine", "RemoteCompletionsEngine", "preflight", "ChatForImages"],
        "same": [True, True],
        "presets": True,
        "after": list(LAZY_ENGINES),
        "dir": True,
        "missing": "module 'kimik3.engines' has no attribute 'NoSuchEngine'",
    }
