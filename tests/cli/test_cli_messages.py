"""What the command line prints when something is wrong, its help, and its terminal marks."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import pytest

from llmrtc.cli import main
from llmrtc.cli.terminal import ModelProgress, Screen


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_syntax_error_in_a_tools_file_shows_file_line_column_and_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    broken = tmp_path / "broken_tools.py"
    broken.write_text("from llmrtc import tool\n\ndef f(:\n    pass\n")
    handlers = list(logging.getLogger().handlers)
    assert main(["chat", "--tools", str(broken)]) == 1
    assert logging.getLogger().handlers == handlers  # the chat's log setup is undone
    err = capsys.readouterr().err
    assert "broken_tools.py:3:7: SyntaxError: invalid syntax" in err
    assert "def f(:" in err
    assert "Traceback" not in err
    assert len(err.splitlines()) <= 5


def test_a_failing_import_in_a_tools_file_shows_the_users_line_and_the_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "tools_with_bad_import.py"
    broken.write_text("import json\n\nCONFIG = json.loads('{oops')\n")
    assert main(["tools", str(broken)]) == 1
    err = capsys.readouterr().err
    assert "tools_with_bad_import.py:3, in <module>" in err
    assert "CONFIG = json.loads('{oops')" in err
    assert "JSONDecodeError: Expecting property name" in err
    assert "Traceback" not in err
    assert len(err.splitlines()) <= 5


def test_help_describes_the_commands_not_the_package_internals(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "public face" not in out
    for command in ("llmrtc chat", "llmrtc tools", "llmrtc validate"):
        assert command in out
    with pytest.raises(SystemExit):
        main(["chat", "--help"])
    assert "Ctrl-C" in capsys.readouterr().out


def test_bot_prefix_appears_only_before_text() -> None:
    out = io.StringIO()
    screen = Screen(out, io.StringIO())
    screen.thinking()
    screen.line("  -> lookupWeather({})")
    screen.thinking()
    screen.text("Rainy.")
    screen.end_turn()
    assert out.getvalue() == "  -> lookupWeather({})\nbot> Rainy.\n"


def test_blank_lines_around_an_answer_are_not_shown() -> None:
    out = io.StringIO()
    screen = Screen(out, io.StringIO())
    for piece in ("\n", "Let me check.", "\n\n", " "):
        screen.text(piece)
    screen.line("  -> lookupWeather({})")
    for piece in ("It is", " ", "rainy.\n\nBring", " an umbrella.", "\n"):
        screen.text(piece)
    screen.end_turn()
    assert out.getvalue() == (
        "bot> Let me check.\n  -> lookupWeather({})\nbot> It is rainy.\n\nBring an umbrella.\n"
    )


def test_the_thinking_mark_is_erased_on_a_terminal() -> None:
    out = _Terminal()
    screen = Screen(out, io.StringIO())
    screen.thinking()
    screen.text("Hi")
    screen.thinking()  # already writing: no second mark
    screen.end_turn()
    written = out.getvalue()
    assert written.startswith("bot> ")
    assert written.endswith("\b \bHi\n")
    out = _Terminal()
    screen = Screen(out, io.StringIO())
    screen.thinking()
    screen.line("  -> a()")
    assert "\r\033[K" in out.getvalue()  # the whole "bot> ⠋" taken back before a tool line


def test_model_progress_is_a_bar_on_a_terminal_and_plain_lines_otherwise() -> None:
    plain = io.StringIO()
    progress = ModelProgress(plain)
    for fraction in (0.0, 0.5, 1.0):
        progress("joining model", fraction)
    progress("loading model", None)
    progress.done()
    assert plain.getvalue() == "llmrtc: joining model...\nllmrtc: loading model...\n"
    terminal = _Terminal()
    progress = ModelProgress(terminal, width=10)
    progress("joining model", 0.5)
    assert "[#####-----]  50%" in terminal.getvalue()
    progress.done()
    assert terminal.getvalue().endswith("\r\033[K")
