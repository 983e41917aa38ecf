"""Every README code block runs as pasted: each ```python block as a program from the repository
root (with OPENAI_BASE_URL pointing at a scripted server, so no real model is needed), and
every ```bash block is valid shell whose commands exist.

A python block that talks to a model says which scripted conversation it needs in an HTML
comment on the line before it, e.g. `<!-- readme-test: weather -->` (see `SCRIPTS`); a block
without one must not send a model request at all.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from llmrtc.cli import build_parser
from llmrtc.testing import ScriptedOpenAIServer, StreamReply, text_reply, tool_call_reply
from llmrtc.testing.openai_audio import tone_reply
from tests._requirements import require

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

SCRIPTS: dict[str, Callable[[], list[StreamReply]]] = {
    "no-model": list,
    "weather": lambda: [
        tool_call_reply([("call_1", "lookupWeather", '{"city": "Tokyo"}')]),
        text_reply("It is 21 degrees and sunny in Tokyo."),
    ],
    "support": lambda: [text_reply("Sorry to hear that! Could you give me your email?")],
    "booking": lambda: [
        tool_call_reply([("call_1", "bookTable", '{"restaurant": "Nopa", "time": "7 pm"}')]),
        text_reply("I'm booking Nopa for 7 pm now."),
        text_reply("Your table at Nopa is booked, reference A12."),
    ],
    "summary": lambda: [text_reply("The meeting is now on Friday at 10.")],
    "voice": lambda: [
        tool_call_reply([("call_1", "lookupWeather", '{"city": "Tokyo"}')]),
        text_reply("It is 21 degrees and sunny in Tokyo."),
    ],
}
"""The scripted model replies each `readme-test` name stands for."""

SPEECH: dict[str, Callable[[], list[Any]]] = {"voice": lambda: [tone_reply(1.0)]}
"""Scripted `/audio/speech` replies (OpenAI speech mode) of the blocks that speak; such a block
also loads the real Silero VAD, so it needs the voice extra (`voice_model`)."""

EXPECTED_OUTPUT = {
    "weather": "It is 21 degrees and sunny in Tokyo.",
    "support": "Could you give me your email?",
    "booking": "Your table at Nopa is booked, reference A12.",
    "summary": "The meeting is now on Friday at 10.",
    "voice": "heard: It is 21 degrees and sunny in Tokyo.",
}


@dataclass
class Block:
    """One fenced code block of the README."""

    language: str
    code: str
    line: int
    script: str

    def __str__(self) -> str:
        return f"README.md:{self.line} ({self.language}, {self.script})"


def readme_blocks() -> list[Block]:
    """The README's fenced blocks, with the `readme-test` name above each (default no-model)."""
    text = README.read_text()
    blocks = []
    pattern = re.compile(r"(?:<!-- readme-test: ([\w-]+) -->\n)?```(\w+)\n(.*?)```", re.DOTALL)
    for match in pattern.finditer(text):
        line = text.count("\n", 0, match.start(2)) + 1
        blocks.append(Block(match.group(2), match.group(3), line, match.group(1) or "no-model"))
    return blocks


PYTHON = [block for block in readme_blocks() if block.language == "python"]
BASH = [block for block in readme_blocks() if block.language == "bash"]


def test_the_readme_starts_with_the_run_and_test_commands() -> None:
    first = readme_blocks()[0]
    assert first.language == "bash"
    commands = [line.split("#")[0].strip() for line in first.code.splitlines()]
    assert commands == ["bash scripts/run", "bash scripts/test"]


def test_every_python_block_names_a_known_script() -> None:
    assert len(PYTHON) >= 4
    for block in PYTHON:
        assert block.script in SCRIPTS, f"{block}: unknown readme-test {block.script!r}"


@pytest.mark.parametrize(
    "block",
    [
        pytest.param(
            block, marks=pytest.mark.requires("voice_model") if block.script in SPEECH else ()
        )
        for block in PYTHON
    ],
    ids=str,
)
@pytest.mark.anyio
async def test_python_block_runs_as_pasted(block: Block, tmp_path: Path) -> None:
    if "llmrtc.rtc" in block.code:  # the WebRTC example needs the rtc extra (aiortc)
        require("rtc")
    program = tmp_path / "readme_block.py"
    program.write_text(block.code)
    speech = SPEECH.get(block.script, list)()
    async with ScriptedOpenAIServer(SCRIPTS[block.script](), speech=speech) as server:
        env = {**os.environ, "OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "test"}
        env.pop("LLMRTC_MODEL", None)
        env.pop("LLMRTC_SPEECH", None)
        with anyio.fail_after(120):
            result = await anyio.run_process(
                [sys.executable, str(program)], cwd=ROOT, env=env, check=False
            )
    out, err = result.stdout.decode(), result.stderr.decode()
    assert result.returncode == 0, f"{block} failed:\n{err}"
    assert not server.unexpected, f"{block} sent more model requests than its script holds"
    assert not server.replies, f"{block} left scripted replies unused"
    assert not server.speech, f"{block} left scripted speech unused"
    if block.script in EXPECTED_OUTPUT:
        assert EXPECTED_OUTPUT[block.script] in out


@pytest.mark.parametrize("block", BASH, ids=str)
def test_bash_block_is_valid_shell_with_commands_that_exist(block: Block) -> None:
    subprocess.run(["bash", "-n"], input=block.code, text=True, check=True)
    for raw in block.code.splitlines():
        words = shlex.split(raw, comments=True)
        if not words:
            continue
        command, *args = words
        if command == "bash":
            assert (ROOT / args[0]).is_file(), f"{block}: no script {args[0]}"
        elif command == "llmrtc":
            assert (Path(sys.executable).parent / "llmrtc").is_file()
            build_parser().parse_args(args)  # exits (fails the test) on unknown options
            files = [arg for arg in args if "/" in arg and not arg.startswith("-")]
            for file in files:
                assert (ROOT / file).is_file(), f"{block}: {file} does not exist"
        else:
            assert shutil.which(command), f"{block}: command {command!r} not found"
