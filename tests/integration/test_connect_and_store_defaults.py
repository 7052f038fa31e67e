"""What an engine of ``dms.create_engine`` says when it cannot connect, and which blob store a
database uses when none is named."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import URL

from dms import create_engine
from dms.config import Settings
from dms.errors import ConfigurationError, DatabaseUnreachable, DmsError
from dms.storage import BlobStore, LocalBlobStore, S3BlobStore, store_of
from dms.uow import UnitOfWork


def test_a_refused_connection_is_a_dms_error_with_the_reason_and_no_password() -> None:
    engine = create_engine("postgresql://someone:s3cret@127.0.0.1:1/archive")

    with pytest.raises(DatabaseUnreachable) as caught, UnitOfWork(engine, tenant="acme"):
        pass

    message = str(caught.value)
    assert message.startswith("cannot connect to postgresql+psycopg://someone:***@127.0.0.1:1/")
    assert "Connection refused" in message
    assert "s3cret" not in message
    # Still the driver's error for code that retries on it (workers while a server restarts).
    assert isinstance(caught.value, ConfigurationError | sa.exc.OperationalError)
    assert str(pickle.loads(pickle.dumps(caught.value))) == message  # noqa: S301 (our own)


def test_a_missing_database_is_named_by_the_server(server_url: URL) -> None:
    engine = create_engine(server_url.set(database="dms_no_such_database"))

    with pytest.raises(DmsError, match='database "dms_no_such_database" does not exist'):
        engine.connect().close()


def test_each_database_has_its_own_default_store_under_any_url(
    server_url: URL, database_url: URL, tmp_path: Path
) -> None:
    settings = Settings(data_dir=tmp_path)
    mine = _default_store(database_url, settings)
    again = _default_store(database_url.update_query_dict({"application_name": "again"}), settings)
    other = _default_store(server_url, settings)

    assert isinstance(mine, LocalBlobStore)
    assert isinstance(again, LocalBlobStore)
    assert isinstance(other, LocalBlobStore)
    assert mine.root.parent == tmp_path / "blobs"
    assert mine.root.name.startswith(f"{database_url.database}-")
    assert mine.root == again.root
    assert other.root != mine.root


def _default_store(url: URL, settings: Settings) -> BlobStore:
    engine = create_engine(url, settings=settings, poolclass=sa.NullPool)
    try:
        return store_of(engine)
    finally:
        engine.dispose()


def test_dms_blobs_names_the_store_of_every_command(database_url: URL, tmp_path: Path) -> None:
    s3 = store_of(create_engine(database_url, settings=Settings(blobs="s3://archive/dms")))
    local = store_of(create_engine(database_url, settings=Settings(blobs=str(tmp_path))))
    named = store_of(create_engine(database_url), "s3://other")

    assert isinstance(s3, S3BlobStore)
    assert s3.location == "s3://archive/dms/"
    assert isinstance(local, LocalBlobStore)
    assert local.root == tmp_path
    assert named.location == "s3://other/"
