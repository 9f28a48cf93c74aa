from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "vllm: starts a real vLLM server (CPU build)")
    config.addinivalue_line("markers", "slow: takes more than a few seconds")
