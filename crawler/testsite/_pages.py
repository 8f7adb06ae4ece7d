"""Realistic HTML for a page at a given version, with per-request noise."""

from __future__ import annotations

import random

_WORDS = (  # noqa: SIM905  (a word list reads better as a sentence)
    "crawler budget change poll slot automaton knapsack frequency page site learn rate "
    "estimate optimal uniform limit update monitor news price stock weather score report "
    "article section market river city energy garden library station museum harbor "
    "festival council school bridge forest season travel history science music theater"
).split()


class PageRenderer:
    """Renders page ``k`` at ``version`` as roughly ``size`` bytes of HTML.

    The visible text depends only on (k, version); each call adds fresh nonces in a
    script, an HTML comment and a hidden CSRF input.
    """

    def __init__(self, size: int = 30_000) -> None:
        self.size = max(1_000, size)
        # Each page's latest version only: a site serves the current version of a page.
        self._latest: dict[int, tuple[int, tuple[str, str]]] = {}

    def _body(self, k: int, version: int) -> tuple[str, str]:
        hit = self._latest.get(k)
        if hit is not None and hit[0] == version:
            return hit[1]
        rng = random.Random(k * 1_000_003 + version)
        parts: list[str] = []
        length = paragraph = 0
        while length < self.size * 0.8:
            words = " ".join(rng.choices(_WORDS, k=60))
            block = (
                f'<div class="entry" id="e{paragraph}"><h2>{rng.choice(_WORDS).title()} '
                f"{paragraph}</h2><p>{words}.</p>"
                f'<a href="/page/{rng.randrange(1, 1000)}">related</a></div>\n'
            )
            parts.append(block)
            length += len(block)
            paragraph += 1
        result = (f"Page {k} - edition {version}", "".join(parts))
        self._latest[k] = (version, result)
        return result

    def render(self, k: int, version: int, nonce: str) -> bytes:
        title, body = self._body(k, version)
        return (
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>{title}</title>"
            f'<script>window.__nonce = "{nonce}"; var t = {nonce!r};</script>'
            "<style>body { font-family: sans-serif }</style></head>\n<body>"
            f"<!-- rendered {nonce} -->"
            f'<form method="post"><input type="hidden" name="csrf_token" value="{nonce}">'
            '<input type="text" name="q"></form>'
            f"<main><h1>{title}</h1>\n{body}</main>"
            f"<noscript>enable scripts {nonce}</noscript></body></html>\n"
        ).encode()
