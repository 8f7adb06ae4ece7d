"""The diff of a change: applied to the before, the unified diff gives the after, exactly."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler.detect import cap_diff, html_diff, text_lines, unified_diff

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def apply_unified_diff(before: str, diff: str) -> str:
    """A strict reader of unified diffs (for the tests): every context and removed line must
    match the before, and every hunk's line counts must add up."""
    source = text_lines(before)
    out: list[str] = []
    lines = diff.split("\n")
    assert lines[-1] == "", "every line of a diff ends with a newline"
    lines = lines[:-1]
    if not lines:
        return before
    assert lines[0].startswith("--- ") and lines[1].startswith("+++ ")
    at = 0  # next line of source to copy
    i = 2
    while i < len(lines):
        found = _HUNK.match(lines[i])
        assert found, f"not a hunk header: {lines[i]!r}"
        old_start, old_len = int(found.group(1)), int(found.group(2) or 1)
        new_len = int(found.group(4) or 1)
        start = old_start - 1 if old_len else old_start  # an empty range names the line before
        assert start >= at
        out += source[at:start]
        at = start
        i += 1
        seen_old = seen_new = 0
        while i < len(lines) and not lines[i].startswith("@@"):
            tag, line = lines[i][:1], lines[i][1:]
            if tag in (" ", "-"):
                assert source[at] == line, f"context does not match at line {at + 1}"
                at += 1
                seen_old += 1
            if tag in (" ", "+"):
                out.append(line)
                seen_new += 1
            assert tag in (" ", "-", "+"), f"bad line {lines[i]!r}"
            i += 1
        assert (seen_old, seen_new) == (old_len, new_len)
    out += source[at:]
    return "\n".join(out)


_LINE = st.text(alphabet=st.sampled_from("ab \t<>é+-@"), max_size=5)
_TEXT = st.lists(st.sampled_from(["x", "y", "z", ""]) | _LINE, max_size=25).map("\n".join)


@given(_TEXT, _TEXT)
def test_the_diff_turns_the_before_into_the_after(a: str, b: str) -> None:
    diff = unified_diff(a, b)
    assert apply_unified_diff(a, diff) == b
    assert (diff == "") == (a == b)


@settings(max_examples=50)
@given(st.text(max_size=60), st.text(max_size=60))
def test_any_texts_round_trip(a: str, b: str) -> None:
    assert "\n".join(text_lines(a)) == a
    assert apply_unified_diff(a, unified_diff(a, b, context=1)) == b


_PATCH = shutil.which("patch")


@pytest.mark.skipif(_PATCH is None, reason="GNU patch is not installed")
@settings(max_examples=40, deadline=None)
@given(_TEXT, _TEXT)
def test_gnu_patch_applies_the_diff(
    tmp_path_factory: pytest.TempPathFactory, a: str, b: str
) -> None:
    # GNU patch reads files whose lines all end with a newline (no "\ No newline" marker)
    assert _PATCH is not None
    folder = tmp_path_factory.mktemp("patch")
    target = Path(folder) / "page.txt"
    target.write_bytes((a + "\n").encode() if a else b"")
    diff = unified_diff(a, b)
    done = subprocess.run(
        [_PATCH, "--quiet", "--force", str(target)], input=diff.encode(), capture_output=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert target.read_bytes() == ((b + "\n").encode() if b else b"")


def test_cap_diff_cuts_at_a_line_end() -> None:
    diff = unified_diff("a\nb\nc", "a\nB\nc\nd")
    assert cap_diff(diff, 10_000) == (diff, False)
    cut, truncated = cap_diff(diff, 30)
    assert truncated and diff.startswith(cut) and cut.endswith("\n")
    assert len(cut.encode()) <= 30
    assert cap_diff(diff, 0) == ("", True)
    with pytest.raises(ValueError, match="at least 0"):
        cap_diff(diff, -1)


def test_html_diff_is_a_page_with_the_texts_escaped() -> None:
    page = html_diff("<b>old</b>\nsame", "<b>new</b>\nsame", before_label="x", after_label="y")
    assert page.lstrip().startswith("<!DOCTYPE") and "&lt;b&gt;" in page
    assert "<b>old</b>" not in page
