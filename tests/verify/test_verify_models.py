"""verify's report names the model as kimik3 knows it (issue 31): K3 and K3.1 ids, the window of
the host they are served at, and which of Moonshot's APIs it is; an unknown id stays as given."""

from __future__ import annotations

import pytest

from kimik3._verify import VerifyReport


@pytest.mark.parametrize(("model", "base_url", "line"), [
    ("kimi-k3.1-pro", "https://api.moonshot.ai/v1", "kimi-k3.1-pro (Kimi K3.1 Pro, 1,048,576-token window, Moonshot's API)"),
    ("kimi-k3.1-pro-highspeed", "https://api.moonshot.cn/v1",
     "kimi-k3.1-pro-highspeed (Kimi K3.1 Pro highspeed, 1,048,576-token window, Moonshot's API)"),
    ("kimi-k3", "https://api.moonshot.ai/v1", "kimi-k3 (Kimi K3, 1,048,576-token window, Moonshot's API)"),
    ("k3", "https://api.kimi.com/coding/v1", "k3 (Kimi K3, 1,048,576-token window, the Kimi Code API)"),
    ("kimi-k3", "https://api.kimi.com/coding/v1", "kimi-k3 (Kimi K3, 262,144-token window, the Kimi Code API)"),
    ("kimi-k3.1-pro", "http://127.0.0.1:8000/v1", "kimi-k3.1-pro (Kimi K3.1 Pro, 1,048,576-token window)"),
    ("moonshotai/Kimi-K3", "http://127.0.0.1:8000/v1", "moonshotai/Kimi-K3"),
    ("some-model", "https://api.moonshot.ai/v1", "some-model (Moonshot's API)"),
])  # fmt: skip
def test_the_report_header_names_the_model(model: str, base_url: str, line: str) -> None:
    report = VerifyReport(base_url=base_url, model=model)
    assert report.model_line == line
    assert str(report).splitlines()[0] == f"kimik3 verify {base_url} (model {line})"
