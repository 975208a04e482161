from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
AOL_TOP1000 = SHARED / "aol" / "aol-top1000-users.tsv.gz"
AOL_215 = SHARED / "aol" / "aol-gayo-avello-215-users.tsv"
MSNBC = SHARED / "msnbc" / "msnbc990928-head10k.seq"
ADULT_DIR = SHARED / "adult"
WIKI_VOTE = SHARED / "graphs" / "wiki-Vote.txt"
FACEBOOK = SHARED / "graphs" / "facebook_combined.txt"
# small real fixtures that ship with the repository, so the default suite keeps real coverage
# without ../shared: the 215-user AOL sample is bundled in the package (the same file, same
# SHA-256, as ../shared's), and 500 MSNBC sequences are in tests/data/msnbc/
BUNDLED_AOL_215 = ROOT / "src" / "searchveil" / "data" / "aol-gayo-avello-215-users.tsv"
MSNBC_500 = ROOT / "tests" / "data" / "msnbc" / "msnbc990928-head500.seq"


def _need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(
            f"shared data missing: {path} (these tests read ../shared/data beside the repository; "
            "a plain clone has none)"
        )
    return path


@pytest.fixture(scope="session")
def aol_top1000_path() -> Path:
    return _need(AOL_TOP1000)


@pytest.fixture(scope="session")
def aol_215_path() -> Path:
    return AOL_215 if AOL_215.exists() else _need(BUNDLED_AOL_215)


@pytest.fixture(scope="session")
def msnbc_500_path() -> Path:
    return _need(MSNBC_500)


@pytest.fixture(scope="session")
def msnbc_path() -> Path:
    return _need(MSNBC)


@pytest.fixture(scope="session")
def adult_dir() -> Path:
    return _need(ADULT_DIR)


@pytest.fixture(scope="session")
def wiki_vote_path() -> Path:
    return _need(WIKI_VOTE)


@pytest.fixture(scope="session")
def facebook_path() -> Path:
    return _need(FACEBOOK)


@pytest.fixture(scope="session")
def aol_top1000(aol_top1000_path):
    from searchveil.io.readers import read_log

    return read_log(aol_top1000_path)


@pytest.fixture(scope="session")
def aol_215(aol_215_path):
    from searchveil.io.readers import read_log

    return read_log(aol_215_path)
