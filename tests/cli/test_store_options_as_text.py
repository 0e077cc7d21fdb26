"""Store options given with ``-o KEY=VALUE`` keep credentials as written.

The command line turned every value that reads as a number into one, so a
secret key of digits (``-o aws_secret_access_key=80417263``) was refused with
"must be text, got int 80417263", the secret printed in the error, and one
with a leading zero would have lost it. Credentials, the region and the
endpoint are now always text; numeric options still become numbers; and no
error repeats a credential.
"""

from __future__ import annotations

import json

import pytest
from conftest import new_bucket

from merkle.cli.common import parse_store_option
from merkle.errors import UsageError
from merkle.storage.s3_client import check_text

from .helpers import Run


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("aws_secret_access_key=80417263", ("aws_secret_access_key", "80417263")),
        ("aws_access_key_id=0123", ("aws_access_key_id", "0123")),
        ("aws_session_token=1e5", ("aws_session_token", "1e5")),
        ("region_name=1", ("region_name", "1")),
        ("max_attempts=3", ("max_attempts", 3)),
        ("read_timeout=2.5", ("read_timeout", 2.5)),
        ("bulk_workers=four", ("bulk_workers", "four")),
    ],
)
def test_credentials_stay_text_and_numbers_become_numbers(
    text: str, expected: tuple[str, object]
) -> None:
    assert parse_store_option(text) == expected


def test_a_credential_of_the_wrong_type_is_refused_without_repeating_it() -> None:
    with pytest.raises(UsageError, match="aws_secret_access_key must be text, got int") as e:
        check_text("aws_secret_access_key", 80417263)
    assert "80417263" not in str(e.value)
    with pytest.raises(UsageError, match="region_name must be text, got int 7"):
        check_text("region_name", 7)


@pytest.mark.s3
def test_an_s3_lake_opens_with_a_secret_of_digits(moto_endpoint: str) -> None:
    run = Run(f"s3://{new_bucket(moto_endpoint)}/lake")
    options = (
        "-o",
        f"endpoint_url={moto_endpoint}",
        "-o",
        "region_name=us-east-1",
        "-o",
        "aws_access_key_id=0123",
        "-o",
        "aws_secret_access_key=80417263",
    )
    run.ok(*options, "db", "create", "shop")
    out = run.ok(*options, "db", "list", "--format", "json").stdout
    assert [row["name"] for row in json.loads(out)] == ["shop"]
