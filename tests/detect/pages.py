"""Realistic generated HTML pages (~30 KB) with rotating nonces, for tests and benchmarks."""

from __future__ import annotations

import random
from functools import lru_cache

WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "lazy",
    "dog",
    "lorem",
    "ipsum",
    "dolor",
    "sit",
    "amet",
    "consectetur",
    "adipiscing",
    "elit",
    "sed",
    "do",
    "eiusmod",
    "tempor",
    "incididunt",
    "ut",
    "labore",
    "et",
    "dolore",
    "magna",
    "aliqua",
    "news",
    "market",
    "city",
]


# The tests ask for the same pages again (390 calls, 198 pages in tests/detect), and a page
# costs 2-4 ms of CPU to generate; bytes cannot be changed by the test that gets them.
@lru_cache(maxsize=256)
def page(seed: int, *, nonce: int = 0, size: int = 30_000, extra_text: str = "") -> bytes:
    """Same ``seed`` = same visible text; ``nonce`` changes only invisible parts."""
    r = random.Random(seed)
    n = random.Random(nonce * 7919 + seed)

    def words(k: int) -> str:
        return " ".join(r.choice(WORDS) for _ in range(k))

    parts = [
        "<!DOCTYPE html>\n<html lang='en'>\n<head>\n  <meta charset='utf-8'>\n",
        f"  <meta name='csrf-token' content='{n.getrandbits(64):x}'>\n",
        f"  <title>{words(6)}</title>\n",
        "  <style>body{margin:0;font-family:sans-serif} .nav a{color:#333}</style>\n",
        f"  <script nonce='{n.getrandbits(32):x}'>",
        f"window.__STATE__={{t:{n.getrandbits(40)}}};</script>\n",
        f"</head>\n<body>\n<!-- rendered in {n.random():.4f}s by web-{n.randint(1, 9)} -->\n",
        "<header class='nav'><ul>\n",
    ]
    parts += [f"  <li><a href='/section/{i}'>{words(2)}</a></li>\n" for i in range(15)]
    parts.append("</ul></header>\n<main>\n<form method='post'>")
    parts.append(f"<input type='hidden' name='csrfmiddlewaretoken' value='{n.getrandbits(64):x}'>")
    parts.append("<input type='text' name='q'><button>Search</button></form>\n")
    if extra_text:
        parts.append(f"<p class='extra'>{extra_text}</p>\n")
    while sum(map(len, parts)) < size - 600:
        parts.append(f"<article class='post' id='p{r.randint(0, 10**6)}'>\n  <h2>{words(5)}</h2>\n")
        for _ in range(3):
            link = f"<a href='/x/{r.randint(0, 999)}'>{words(2)}</a>"
            parts.append(f"  <p>{words(25)} {link} {words(10)}.</p>\n")
        parts.append("  <div class='meta'><span>12 comments</span> &middot; <time>2024</time>")
        parts.append("</div>\n</article>\n")
    parts.append("</main>\n<footer><p>&copy; 2024 Example</p></footer>\n")
    parts.append(f"<script src='/app.js?v={n.getrandbits(20)}'></script>\n</body>\n</html>\n")
    return "".join(parts).encode()
