"""Pages/s of change detection on realistic ~30 KB HTML.

    .venv/bin/python benchmarks/normalize_speed.py [--pages 2000] [--workers 2]

Prints: parser choice (lexbor vs modest), inline normalize+hash, the raw hashes per page
(exact and skeleton, also on the test site's pages), ChangeDetector with a worker pool on pages
that all need parsing, and the two raw-hash pre-checks (byte-identical pages; pages whose only
differences are nonces in scripts/comments/hidden inputs).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from collections.abc import Callable, Sequence

from selectolax.lexbor import LexborHTMLParser
from selectolax.parser import HTMLParser

from crawler.detect import (
    ChangeDetector,
    DetectItem,
    Verdict,
    content_hash,
    extract,
    judge,
    normalize,
)
from crawler.detect._hash import exact_hash, skeleton_hash
from crawler.testsite import PageRenderer

HTML = "text/html; charset=utf-8"
_VOCABULARY = (
    "the of and to in is for on that with as by at from city market report says new year "
    "government people data study team game price season company week police school water"
)
WORDS = tuple(_VOCABULARY.split())


def make_page(seed: int, nonce: int = 0, size: int = 30_000) -> bytes:
    """A news-like page: head with meta/scripts/styles, nav, articles, sidebar, footer."""
    r = random.Random(seed)
    n = random.Random(seed * 1_000_003 + nonce)

    def words(k: int) -> str:
        return " ".join(r.choice(WORDS) for _ in range(k))

    out = [
        "<!DOCTYPE html>\n<html lang='en'>\n<head>\n<meta charset='utf-8'>\n",
        f"<meta name='csrf-token' content='{n.getrandbits(96):x}'>\n<title>{words(7)}</title>\n",
        "<link rel='stylesheet' href='/static/site.css'>\n",
        "<style>.nav{display:flex}.card{padding:1em;border:1px solid #ddd}</style>\n",
        f"<script nonce='{n.getrandbits(48):x}'>window.dataLayer=[{{'t':{n.getrandbits(40)}}}];",
        "function track(e){dataLayer.push(e)}</script>\n</head>\n<body class='home'>\n",
        f"<!-- served by app-{n.randint(1, 40)} in {n.random():.3f}s -->\n<nav class='nav'><ul>\n",
    ]
    out += [f"<li><a href='/s/{i}'>{words(2).title()}</a></li>\n" for i in range(20)]
    out.append("</ul></nav>\n<main id='content'>\n")
    out.append(f"<form><input type='hidden' name='_token' value='{n.getrandbits(128):x}'>")
    out.append("<input name='q' placeholder='Search'><button>Go</button></form>\n")
    head = sum(map(len, out))  # varies with the nonces: keep the article count independent of it
    while sum(map(len, out)) - head < size - 4000:
        out.append(f"<article class='card'>\n  <h2><a href='/a/{r.randint(1, 10**6)}'>")
        out.append(f"{words(8)}</a></h2>\n  <p class='byline'>By {words(2).title()} &middot; ")
        out.append(f"{r.randint(1, 28)} May</p>\n")
        for _ in range(r.randint(1, 3)):
            out.append(f"  <p>{words(r.randint(20, 50))}.</p>\n")
        out.append(f"  <img src='/img/{r.randint(1, 10**6)}.jpg' alt='{words(3)}'>\n</article>\n")
    out.append("</main>\n<aside><h3>Most read</h3><ol>")
    out += [f"<li>{words(6)}</li>" for _ in range(5)]
    out.append("</ol></aside>\n<footer><p>&copy; 2026 Example News</p></footer>\n")
    out.append(f"<script src='/static/app.js?v={n.getrandbits(24)}'></script>\n</body></html>\n")
    return "".join(out).encode()


def rate(label: str, count: int, fn: Callable[[], object]) -> float:
    cpu0, wall0 = time.process_time(), time.perf_counter()
    fn()
    wall = time.perf_counter() - wall0
    cpu = time.process_time() - cpu0
    per_s = count / wall
    print(f"  {label:<58} {per_s:>9,.0f} pages/s  ({wall / count * 1e6:7.1f} µs wall, "
          f"{cpu / count * 1e6:7.1f} µs CPU in this process)")  # fmt: skip
    return per_s


def parser_choice(pages: Sequence[bytes]) -> None:
    print("parser (parse + drop script/style/noscript/template + text), single core:")
    drop = ["script", "style", "noscript", "template"]

    def lexbor() -> None:
        for p in pages:
            tree = LexborHTMLParser(p)
            tree.strip_tags(drop)
            tree.root.text_lexbor()

    def lexbor_sep() -> None:
        for p in pages:
            tree = LexborHTMLParser(p)
            tree.strip_tags(drop)
            tree.root.text(separator=" ", strip=True)

    def modest() -> None:
        for p in pages:
            tree = HTMLParser(p)
            tree.strip_tags(drop)
            tree.root.text(separator=" ", strip=True)

    rate("selectolax lexbor, text_lexbor() (used)", len(pages), lexbor)
    rate("selectolax lexbor, text(separator=' ', strip=True)", len(pages), lexbor_sep)
    rate("selectolax modest, text(separator=' ', strip=True)", len(pages), modest)


def raw_hashes(pages: Sequence[bytes], nonce_pages: Sequence[bytes]) -> None:
    print("\nraw hashes, inline (one core):")
    rate("exact_hash()  (the byte-identical pre-check)", len(pages),
         lambda: [exact_hash(p) for p in pages])  # fmt: skip
    rate("skeleton_hash()  (the nonces-only pre-check)", len(pages),
         lambda: [skeleton_hash(p, HTML) for p in nonce_pages])  # fmt: skip
    for size in (30_000, 200_000):
        renderer = PageRenderer(int(size / 0.82))  # as in the test site
        count = max(50, len(pages) // (size // 10_000))
        site = [renderer.render(k % 50, 0, f"{k:x}") for k in range(count)]
        label = f"skeleton_hash(), test-site pages of {len(site[0]) / 1024:.0f} KiB"
        rate(label, len(site), lambda site=site: [skeleton_hash(p, "text/html") for p in site])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pages", type=int, default=2000)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    pages = [make_page(i) for i in range(args.pages)]
    nonce_pages = [make_page(i, nonce=1) for i in range(args.pages)]
    avg = sum(map(len, pages)) / len(pages)
    print(f"{len(pages)} generated pages, {avg / 1024:.1f} KiB on average\n")
    parser_choice(pages[: min(500, len(pages))])

    print("\nnormalize + xxh3-128, inline (one core):")
    rate("extract() + content_hash()  (the judging path)", len(pages),
         lambda: [content_hash(extract(p, HTML)[0]) for p in pages])  # fmt: skip
    rate("normalize() + content_hash()  (also collapses whitespace)", len(pages),
         lambda: [content_hash(normalize(p, HTML)) for p in pages])  # fmt: skip
    raw_hashes(pages, nonce_pages)
    base: list[Verdict] = [judge(DetectItem(p, HTML)) for p in pages[:1]]

    def items(bodies: Sequence[bytes], prev: Sequence[Verdict] | None) -> list[DetectItem]:
        if prev is None:
            return [DetectItem(b, HTML) for b in bodies]
        return [
            DetectItem(b, HTML, previous_hash=v.content_hash, previous_raw_hash=v.raw_hash)
            for b, v in zip(bodies, prev, strict=True)
        ]

    async def pooled() -> None:
        nonlocal base
        with ChangeDetector(workers=args.workers) as det:
            await det.judge_many(items(pages[:64], None))  # start the workers
            print(f"\nChangeDetector(workers={args.workers}), batches of 500:")
            t0 = time.perf_counter()
            base = []
            for k in range(0, len(pages), 500):
                base += await det.judge_many(items(pages[k : k + 500], None))
            dt = time.perf_counter() - t0
            print(f"  {'baseline: every page parsed in the pool':<58} "
                  f"{len(pages) / dt:>9,.0f} pages/s")  # fmt: skip
            for label, bodies in (
                ("pre-check hit: byte-identical pages (no parse)", pages),
                ("skeleton hit: only nonces differ (no parse)", nonce_pages),
            ):
                t0 = time.perf_counter()
                verdicts = []
                for k in range(0, len(pages), 500):
                    verdicts += await det.judge_many(items(bodies[k : k + 500], base[k : k + 500]))
                dt = time.perf_counter() - t0
                assert all(v.changed is False and not v.parsed for v in verdicts)
                print(f"  {label:<58} {len(pages) / dt:>9,.0f} pages/s")

    asyncio.run(pooled())
    print("\nsame, inline (workers=0):")
    det0 = ChangeDetector(workers=0)
    rate("baseline (all parsed)", len(pages), lambda: det0.judge_inline(items(pages, None)))
    rate("pre-check hit: byte-identical", len(pages),
         lambda: det0.judge_inline(items(pages, base)))  # fmt: skip
    rate("skeleton hit: only nonces differ", len(pages),
         lambda: det0.judge_inline(items(nonce_pages, base)))  # fmt: skip
    changed_pages = [make_page(i + args.pages) for i in range(args.pages)]  # other text
    rate("changed: parsed and hashed, its text kept", len(pages),
         lambda: det0.judge_inline(items(changed_pages, base)))  # fmt: skip
    assert all(v.changed for v in det0.judge_inline(items(changed_pages, base)))


if __name__ == "__main__":
    main()
