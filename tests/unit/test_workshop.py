"""docs/workshop.md maps each call of the ENCCS workshop to today's partorch:
every ```python block there runs for real, on its own, in a fresh interpreter
at the repository root (CPU, dataset/BBBP.csv only)."""

import os
import re
import subprocess
import sys

from helpers import ROOT
import pytest

DOC = ROOT / "docs" / "workshop.md"
ENTRIES = 11  # the numbered sections of the page; each has at least one block
BLOCK = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)
TIMEOUT = 60  # seconds per block; each takes a few


def python_blocks():
    return BLOCK.findall(DOC.read_text())


def test_every_entry_has_a_block():
    entries = re.findall(r"^## \d+\. ", DOC.read_text(), re.MULTILINE)
    assert len(entries) == ENTRIES
    assert len(python_blocks()) >= ENTRIES


def test_the_page_credits_the_workshop():
    text = DOC.read_text()
    assert "https://github.com/ENCCS/partorch" in text and "ENCCS" in text


BLOCKS = python_blocks()
# A block that trains with DDP ends as the project's own workers do: a process that exits
# through the interpreter's teardown after DDP's backward passes can abort in PyTorch's own
# threads once in some hundreds of runs (exit -6, "terminate called without an active
# exception"; docs/reliability.md, "A process that ends after training"). In a notebook the
# kernel lives on; here each block is a process of its own. An error in the block still ends
# it first, with its traceback and a non-zero status.
DDP_BLOCK_EXIT = """
from partorch.ddp.errors import exit_without_teardown
exit_without_teardown()
"""


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block{i + 1:02d}" for i in range(len(BLOCKS))])
def test_block_runs(block):
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)  # a plain interpreter, not a torchrun worker
    code = block + (DDP_BLOCK_EXIT if "init_process_group" in block else "")
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert result.returncode == 0, f"this block failed:\n{block}\n{result.stderr[-4000:]}"
