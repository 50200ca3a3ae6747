"""The S3 page's table of server differences is what moto and SeaweedFS answer now (issue 19)."""

from __future__ import annotations

import re
from pathlib import Path

from .differences import RACES, probe, table

PAGE = Path(__file__).parents[2] / "docs" / "adapters" / "s3.md"


def test_the_s3_pages_server_table_is_what_the_servers_answer(
    moto_endpoint: str, seaweedfs_endpoint: str
) -> None:
    shown = re.search(
        r"<!-- s3-differences: .*? -->\n(.*?)\n<!-- /s3-differences -->", PAGE.read_text(), re.S
    )
    assert shown, "docs/adapters/s3.md must show the table of scripts/s3-differences"
    # the races' rows are left out: their answers change with the machine's load (RACES)
    races = tuple(f"| {race} " for race in RACES)
    page = "\n".join(line for line in shown[1].splitlines() if not line.startswith(races))
    answers = {
        "moto": probe(moto_endpoint, race=False),
        "SeaweedFS": probe(seaweedfs_endpoint, race=False),
    }
    now = table(answers)
    assert page == now, f"rerun scripts/s3-differences; the servers now answer:\n{now}"
