"""The shared SNAP edge-list reader (io/graphs.py)."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from searchveil.errors import InputFormatError
from searchveil.io.graphs import graph_from_edges, read_edge_list


def test_reader_merges_duplicates_drops_loops_and_relabels(tmp_path) -> None:
    p = tmp_path / "g.txt"
    p.write_text("# comment\n10\t20\n20 10\n10 10\n\n30   20\n10\t20\n")
    g = read_edge_list(p, undirected=True)
    assert g.n_nodes == 3 and g.n_edges == 2
    assert g.info["self_loops"] == 1 and g.info["duplicate_edges"] == 2
    assert list(g.node_ids) == [10, 20, 30]
    a = g.adjacency.toarray()
    assert (a == a.T).all() and a.diagonal().sum() == 0
    assert list(g.degrees) == [1, 2, 1]
    d = read_edge_list(p, undirected=False)
    assert d.n_edges == 3 and d.info["duplicate_edges"] == 1


def test_reader_gz_equals_plain(tmp_path) -> None:
    text = "1 2\n2 3\n3 1\n"
    (tmp_path / "g.txt").write_text(text)
    with gzip.open(tmp_path / "g.txt.gz", "wt") as f:
        f.write(text)
    a = read_edge_list(tmp_path / "g.txt", undirected=True).adjacency
    b = read_edge_list(tmp_path / "g.txt.gz", undirected=True).adjacency
    assert (a != b).nnz == 0 and a.nnz == 6


@pytest.mark.parametrize("bad", ["1 2\n3\n", "1 2\nx y\n", "1 2 3\n"])
def test_malformed_line_is_a_typed_error_naming_the_line(tmp_path, bad) -> None:
    p = tmp_path / "g.txt"
    p.write_text(bad)
    with pytest.raises(InputFormatError) as e:
        read_edge_list(p, undirected=True)
    assert e.value.line == 2 if bad.startswith("1 2\n") else e.value.line == 1


def test_graph_from_edges_keeps_isolated_nodes() -> None:
    g = graph_from_edges(np.array([0, 1]), np.array([1, 2]), undirected=True, n_nodes=5)
    assert g.n_nodes == 5 and g.n_edges == 2 and list(g.degrees) == [1, 2, 1, 0, 0]


def test_wiki_vote_matches_the_thesis(wiki_vote_path) -> None:
    g = read_edge_list(wiki_vote_path, undirected=True)
    # Korolova thesis §5.5: G_WV has 7,115 nodes, 100,762 edges, max degree 1,065
    assert (g.n_nodes, g.n_edges, int(g.degrees.max())) == (7_115, 100_762, 1_065)
