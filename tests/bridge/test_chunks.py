"""Long replies are split for Discord without losing a character or breaking code blocks."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.chunks import DISCORD_LIMIT, PICTURE_NOTE, pieces, split_reply, with_picture_note


def fences(chunk: str) -> int:
    return sum(1 for line in chunk.split("\n") if line.strip().startswith("```"))


def test_short_reply_is_one_message() -> None:
    """A reply within the limit goes out exactly as written, in one message."""
    assert split_reply("hello there") == ["hello there"]


def test_five_thousand_characters_arrive_whole_in_line_sized_chunks() -> None:
    """A 5,000-character reply is split at line breaks into ≤2,000-character messages that rebuild it."""
    text = "\n".join(f"line {i:04d} " + "word " * 8 for i in range(110))
    assert len(text) > 5000
    chunks = split_reply(text)
    assert len(chunks) == 3
    assert all(len(c) <= DISCORD_LIMIT for c in chunks)
    assert all(c.endswith("\n") for c in chunks[:-1])  # cut after a line break, not mid-line
    assert "".join(chunks) == text


def test_one_long_line_is_cut_between_words() -> None:
    """A single paragraph with no line breaks is cut at a space, never inside a word."""
    text = " ".join(f"w{i}" for i in range(1500))
    chunks = split_reply(text)
    assert all(len(c) <= DISCORD_LIMIT for c in chunks)
    assert all(c.endswith(" ") for c in chunks[:-1])
    assert "".join(chunks) == text


def test_code_fence_is_closed_and_reopened_with_its_language() -> None:
    """A code block cut in two is closed at the end of one message and reopened, with its language, in the next."""
    code = "```python\n" + "".join(f"x_{i} = {i}\n" for i in range(400)) + "```\nthat's the code."
    chunks = split_reply(code)
    assert len(chunks) >= 2
    assert chunks[0].endswith("\n```")
    assert chunks[1].startswith("```python\n")
    assert all(fences(c) % 2 == 0 for c in chunks)
    assert all(len(c) <= DISCORD_LIMIT for c in chunks)


def test_picture_note_follows_the_words() -> None:
    """When the picture is lost the note comes after the words, and alone if there were no words."""
    assert with_picture_note("look at this  ") == f"look at this\n\n{PICTURE_NOTE}"
    assert with_picture_note("") == PICTURE_NOTE


def test_words_plus_note_never_exceed_a_message() -> None:
    """A reply that already fills a message still gets the note, in a second message, and no word is cut."""
    words = "a" * 1990
    chunks = split_reply(with_picture_note(words))
    assert all(len(c) <= DISCORD_LIMIT for c in chunks)
    assert "".join(chunks).startswith(words)
    assert chunks[-1].endswith(PICTURE_NOTE)


tokens = st.sampled_from(["a", "bb", "word ", " ", "\n", "`", "```", "```py\n", "\n```\n", "é", "\t", "x" * 300])
text_st = st.lists(tokens, max_size=400).map("".join)


@settings(max_examples=300, deadline=None)
@given(text_st, st.integers(min_value=64, max_value=2000))
def test_split_properties(text: str, limit: int) -> None:
    """Any text: every message fits, code fences balance in each message, and the bodies rebuild the text."""
    ps = pieces(text, limit)
    assert "".join(p.body for p in ps) == text
    for p in ps:
        assert len(p.content) <= limit
        assert fences(p.content) % 2 == 0, p
    assert all(c.strip() for c in split_reply(text, limit))


def test_inline_fence_after_a_cut_does_not_open_a_block() -> None:
    """A cut never leaves a message starting with backticks that were mid-line in the reply."""
    text = "a" * 60 + " ```x" + "b" * 200
    chunks = split_reply(text, 100)
    assert "".join(chunks) == text
    assert all(not c.lstrip(" \t").startswith("```") for c in chunks[1:])


def test_a_fence_line_is_never_split() -> None:
    """A message never ends in the middle of a fence line, so the next one cannot start half a fence."""
    text = "a" * 40 + "\n```" + "p" * 70 + "\ncode\n```\n"
    ps = pieces(text, 100)
    assert "".join(p.body for p in ps) == text
    for p in ps[:-1]:
        assert not p.body.split("\n")[-1].startswith("```")
