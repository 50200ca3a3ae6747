"""`checkpointkit.urls.redact_url`: what every repr, error, log and report shows of a URL."""

from __future__ import annotations

import pytest
from checkpointkit.urls import redact_url


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://u:pw@h:1/0", "redis://u:***@h:1/0"),
        ("redis://u@h:1/0", "redis://u@h:1/0"),  # a user without a password is shown
        ("redis://:pw@h:1/0", "redis://:***@h:1/0"),
        ("redis://h:1/0?password=hunter2&db=0", "redis://h:1/0?password=***&db=0"),
        ("redis://h?password=hunter2", "redis://h?password=***"),  # no path before the query
        ("redis://h/0?db=0;pwd=hunter2", "redis://h/0?db=0;pwd=***"),
        ("postgresql://u:p@ss@h/db", "postgresql://u:***@h/db"),  # '@' in the password
        ("postgresql://u:p/ss@h/db", "postgresql://u:***@h/db"),  # '/' in the password
        (
            "postgresql://h/db?sslpassword=x1&sslmode=require",
            "postgresql://h/db?sslpassword=***&sslmode=require",
        ),
        ("s3://b/p?secret_key=abc&region=x", "s3://b/p?secret_key=***&region=x"),
        ("az://acct/c?sv=1&sig=abc&sp=r", "az://acct/c?sv=1&sig=***&sp=r"),
        ("az://acct/c?Account_Key=abc", "az://acct/c?Account_Key=***"),
        ("s3://b/p?x=u@v", "s3://b/p?x=u@v"),  # an '@' in the query is not a user part
        ("file:///tmp/a", "file:///tmp/a"),
        ("memory://", "memory://"),
        ("not a url", "not a url"),
    ],
)
def test_redact_url_shows_no_password_and_no_secret_parameter(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_redact_url_hides_the_whole_user_part_where_asked() -> None:
    assert redact_url("s3://AKIAKEY:secret@bucket/p", hide_user=True) == "s3://***@bucket/p"
    assert redact_url("s3://AKIAKEY@bucket/p", hide_user=True) == "s3://***@bucket/p"
    assert redact_url("s3://bucket/p", hide_user=True) == "s3://bucket/p"
