"""What the readable text (a line per block element) costs a judged page, and what the diff
costs a change.

    .venv/bin/python benchmarks/readable_text.py [--pages 300] [--rounds 5]

A miss is judged as before (parse, text, hash); a hit or a baseline also makes the readable
text from the same tree (line breaks inserted by lexbor, lines tidied). Prints CPU time per
page of both, interleaved in one process (best of the rounds), on the test site's ~30 KB
pages (30 KB and 4 KB), and the unified diff of two versions.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from crawler.detect import DetectItem, judge, readable_text, unified_diff
from crawler.testsite import PageRenderer

HTML = "text/html; charset=utf-8"


def per_page(work: Callable[[bytes], object], bodies: list[bytes]) -> float:
    start = time.process_time()
    for body in bodies:
        work(body)
    return (time.process_time() - start) / len(bodies)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    renderer = PageRenderer(30_000)
    small = PageRenderer(4_000)
    sets = {
        "test site, 30 KB": [renderer.render(k, 1, "n") for k in range(1, args.pages + 1)],
        "test site, 4 KB": [small.render(k, 1, "n") for k in range(1, args.pages + 1)],
    }

    hashes: dict[bytes, str] = {}

    def miss(body: bytes) -> object:  # the stored hash equals: no text made
        return judge(DetectItem(body, HTML, previous_hash=hashes[body]))

    def hit(body: bytes) -> object:  # a baseline: the readable text is made
        return judge(DetectItem(body, HTML))

    for name, bodies in sets.items():
        hashes.update((body, judge(DetectItem(body, HTML)).content_hash) for body in bodies)
        best_miss = best_hit = float("inf")
        for round_no in range(args.rounds):
            print(f"{name}: round {round_no + 1}/{args.rounds}", flush=True, end="\r")
            best_miss = min(best_miss, per_page(miss, bodies))
            best_hit = min(best_hit, per_page(hit, bodies))
        print(
            f"{name}: judged without the readable text {best_miss * 1e6:7.0f} µs/page, "
            f"with it {best_hit * 1e6:7.0f} µs/page (x{best_hit / best_miss:.2f})"
        )
    before = readable_text(renderer.render(1, 1, "n"), HTML) or b""
    after = readable_text(renderer.render(1, 2, "n"), HTML) or b""
    a, b = before.decode(), after.decode()
    start = time.process_time()
    for _ in range(20):
        diff = unified_diff(a, b)
    spent = (time.process_time() - start) / 20
    print(
        f"unified diff of two versions ({a.count(chr(10)) + 1} lines each): "
        f"{spent * 1e3:.1f} ms, {len(diff.encode())} bytes"
    )


if __name__ == "__main__":
    main()
