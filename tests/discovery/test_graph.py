"""The generated site: scale-free, small-world, growing; its rewired copy is not a small world."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from crawler.testsite._graph import LinkGraph, clustering, generate, rewire


@pytest.fixture(scope="module")
def site() -> LinkGraph:
    return generate(pages=2_000, sections=20, duration=2 * 86_400.0, seed=5)


def test_degrees_are_heavy_tailed_and_clustering_high(site: LinkGraph) -> None:
    indegree = Counter(v for targets in site.out for v in targets)
    degrees = np.array(sorted(indegree.values(), reverse=True))
    assert degrees[0] > 20 * np.median(degrees)  # a few hubs
    assert clustering(site) > 0.2


def test_rewired_copy_keeps_degrees_and_loses_clustering(site: LinkGraph) -> None:
    rewired = rewire(site)
    before = sum(len(t) for t in site.out)
    after = sum(len(t) for t in rewired.out)
    assert after > 0.97 * before  # only self-loops and duplicates are dropped
    assert clustering(rewired) < clustering(site) / 5


def test_new_pages_appear_on_their_section_index_newest_first(site: LinkGraph) -> None:
    new = site.new_pages()
    assert len(new) == pytest.approx(8 * 48, rel=0.25)
    page = int(new[len(new) // 2])
    t = float(site.created[page])
    hub = int(site.section[page])
    assert not site.exists(page, t - 1) and site.exists(page, t)
    assert page not in site.links_at(hub, t - 1)
    links = site.links_at(hub, t)
    assert links[0] == page
    later = site.links_at(hub, float(site.created[new[-1]]))
    listed = [p for p in later if site.created[p] > 0]
    assert len(listed) <= site.listing
    assert all(site.created[p] <= t + 2 * 86_400 for p in later)
    assert all(site.created[p] <= t for p in site.links_at(page, t))


def test_states_are_unit_vectors_and_edits_follow_creation(site: LinkGraph) -> None:
    assert np.allclose(np.linalg.norm(site.states, axis=1), 1.0)
    for page in site.new_pages()[:50].tolist():
        assert all(e >= site.created[page] for e in site.edits[page])
        assert site.version_at(page, float(site.created[page])) == 0


def test_generation_is_deterministic() -> None:
    a = generate(pages=300, sections=5, duration=86_400.0, seed=9)
    b = generate(pages=300, sections=5, duration=86_400.0, seed=9)
    assert a.out == b.out and np.array_equal(a.created, b.created)


def test_navigation_links_every_page_to_its_section_index() -> None:
    site = generate(pages=400, sections=8, duration=3_600.0, seed=2)
    assert set(range(1, 8)) <= set(site.out[0])
    assert all(int(site.section[v]) in site.out[v] for v in range(8, site.size))
    bare = generate(pages=400, sections=12, duration=3_600.0, navigation=False, seed=2)
    assert set(bare.out[0]) & set(range(1, 12)) == set(range(1, 9))
