"""Property-based attacks on what the bot posts: Slack mrkdwn and Matrix HTML (hypothesis).

Everything rendered is the agent's text or what people typed. Whatever it holds, the Slack
rendering must contain no live mention, broadcast or channel link (every ``<`` left opens a
link the renderer wrote, to http(s) or mailto), and the Matrix HTML must hold no markup the
text brought in (no script, no event handler, no ``javascript:`` link, no image from
outside the homeserver). Text is drawn from the pieces injections are made of.
"""

from __future__ import annotations

from html.parser import HTMLParser
from urllib.parse import urlparse

from hypothesis import example, given
from hypothesis import strategies as st

from gateway_bot.channels.matrix.render import markdown_to_html
from gateway_bot.channels.slack.render import split_mrkdwn, to_mrkdwn

_INJECTIONS = [
    "<!channel>",
    "<!here>",
    "<!everyone>",
    "<!subteam^S1>",
    "<@U123>",
    "<#C123>",
    "<https://evil.example|click>",
    "[x](!here)",
    "[x](@U1)",
    "[a](https://ok.example)",
    "[a](javascript:alert(1))",
    "![i](https://track.example/p.png)",
    "![i](mxc://hs/abc)",
    "<script>alert(1)</script>",
    '<img src=x onerror="alert(1)">',
    '<a href="javascript:alert(1)">x</a>',
    "<iframe src=//evil>",
    "&lt;",
    "&amp;",
    "`code <!here>`",
    "```\n<!channel>\n```",
    "**bold**",
    "_it_",
    "> quote",
    "- item",
    "| a | b |\n|---|---|\n| <!here> | c |",
    "\n",
    " ",
    "<",
    ">",
    "|",
    "text",
    "@room",
]
texts = st.lists(st.sampled_from(_INJECTIONS), max_size=10).map("".join) | st.text(max_size=200)


@given(texts)
@example("[x](!here)")
@example("<https://evil.example|<!channel>>")
@example("![i](https://t.example/p.png)<b>x</b>&lt;[a](https://ok.example)[a](https://ok.example)")
def test_slack_text_never_carries_a_live_mention_or_a_foreign_link(text: str) -> None:
    rendered = to_mrkdwn(text)
    for index, char in enumerate(rendered):
        if char == "<":
            assert rendered.startswith(("<http://", "<https://", "<mailto:"), index), (
                text,
                rendered,
            )
    # Split below Slack's limit, a chunk never makes a mention, broadcast or channel link.
    for chunk in split_mrkdwn(rendered, limit=120):
        assert not any(live in chunk for live in ("<!", "<@", "<#")), (text, chunk)


_links = st.builds(
    "<https://example.test/{}|{}>".format,
    st.text("abcdefgh", min_size=1, max_size=20),
    st.text("xyz", min_size=1, max_size=10),
)
_glued = st.lists(st.one_of(_links, st.text("abc&;", min_size=1, max_size=30)), max_size=40)


@given(_glued.map("".join))
@example("a" * 90 + "<https://example.test/abcdefgh|label> tail")
def test_slack_split_never_cuts_a_short_link_in_two(text: str) -> None:
    """A hard cut (a line without spaces) moves back to the start of a link that would
    straddle it; seen before: a chunk ending in ``<https:/``."""
    for chunk in split_mrkdwn(text, limit=120):
        assert chunk.count("<") == chunk.count(">"), (text, chunk)


_ALLOWED_TAGS = {
    "p",
    "br",
    "em",
    "strong",
    "del",
    "s",
    "code",
    "pre",
    "blockquote",
    "ul",
    "ol",
    "li",
    "a",
    "img",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "hr",
    "table",
    "thead",
    "tbody",
    "tr",
    "th",
    "td",
}


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, list[tuple[str, str | None]]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.seen.append((tag, attrs))


@given(texts)
@example('<img src=x onerror="alert(1)">')
@example("[a](javascript:alert(1))")
@example("![i](https://track.example/p.png)")
def test_matrix_html_holds_no_markup_from_the_text(text: str) -> None:
    parser = _Tags()
    parser.feed(markdown_to_html(text))
    for tag, attrs in parser.seen:
        assert tag in _ALLOWED_TAGS, (text, tag)
        for name, value in attrs:
            assert not name.startswith("on"), (text, name)
            if name == "href":  # relative links are inert; no other scheme may run
                assert urlparse(value or "").scheme in ("", "http", "https", "mailto"), text
            if name == "src":
                assert tag == "img", text
                assert (value or "").startswith("mxc://"), text
