"""TREC Session Track XML (2011-2014) as rows of a search log.

Layout (the track's published ``sessiontrack20XX.xml``)::

    <session num="12" userid="3" starttime="0">
      <topic num="4"> ... </topic>
      <interaction num="1" starttime="1.2">
        <query>hiking trails</query>
        <results><result rank="1"><url>http://...</url> ...</result> ...</results>
        <clicked><click num="1"><rank>3</rank></click> ...</clicked>
      </interaction>
      <currentquery starttime="..."><query>...</query></currentquery>
    </session>

Decisions: the user is the session (``t<topic>-s<session>``: a TREC session is one searcher
on one topic, and sessions are not linked to people); each interaction gives one row per
clicked URL in rank order (the click's rank looked up in the interaction's results), or one
row with no URL when nothing was clicked; the ``currentquery`` is one more row with no URL.
Times are not used (they are offsets from the session start); the session id is the session.

Safety: the file is parsed with :mod:`xml.etree.ElementTree`, which does not fetch external
entities; documents with a DTD (``<!DOCTYPE``/``<!ENTITY``) are refused outright, as
defusedxml does, so entity expansion cannot blow up memory.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import polars as pl

from searchveil.errors import InputFormatError

__all__ = ["read_trec_session"]


def _text(el: ET.Element | None) -> str:
    return "" if el is None or el.text is None else el.text.strip()


def read_trec_session(path: Path, data: bytes) -> pl.DataFrame:
    """Rows ``user, query, rank, url, session_id`` (all strings but rank) of a TREC file."""
    head = data[:65536].lower()
    if b"<!doctype" in head or b"<!entity" in head:
        raise InputFormatError(str(path), "XML with a DTD or entities is refused (unsafe)")
    try:
        root = ET.fromstring(data)
    except ET.ParseError as exc:
        line, col = exc.position if exc.position else (None, None)
        what = re.sub(r": line \d+, column \d+$", "", exc.msg)
        if what == "no element found":
            what = "the XML ends early (is the file truncated?)"
        at = f" at column {col + 1}" if col is not None else ""
        raise InputFormatError(
            str(path), f"not well-formed XML{at}: {what} (TREC Session Track XML expected)", line
        ) from None
    users: list[str] = []
    queries: list[str] = []
    ranks: list[int | None] = []
    urls: list[str | None] = []
    sessions: list[str] = []
    found = root.iter("session")
    for sess in found:
        snum = sess.get("num", "")
        topic = sess.find("topic")
        tnum = topic.get("num", "") if topic is not None else ""
        user = f"t{tnum}-s{snum}"

        def add(
            query: str, rank: int | None, url: str | None, user: str = user, snum: str = snum
        ) -> None:
            users.append(user)
            queries.append(query)
            ranks.append(rank)
            urls.append(url)
            sessions.append(snum)

        for inter in sess.iter("interaction"):
            q = _text(inter.find("query"))
            by_rank = {}
            for res in inter.iter("result"):
                r = res.get("rank")
                if r is not None and r.strip().isdigit():
                    by_rank[int(r)] = _text(res.find("url")) or None
            clicked = sorted(
                {
                    int(_text(c.find("rank")))
                    for c in inter.iter("click")
                    if _text(c.find("rank")).isdigit()
                }
            )
            if not clicked:
                add(q, None, None)
            for rank_no in clicked:
                add(q, rank_no, by_rank.get(rank_no))
        cur = sess.find("currentquery")
        if cur is not None:
            add(_text(cur.find("query")), None, None)
    if not users:
        raise InputFormatError(str(path), "no <session> elements (is it TREC Session Track XML?)")
    return pl.DataFrame(
        {"user": users, "query": queries, "rank": ranks, "url": urls, "session_id": sessions},
        schema={
            "user": pl.String,
            "query": pl.String,
            "rank": pl.Int64,
            "url": pl.String,
            "session_id": pl.String,
        },
    )
