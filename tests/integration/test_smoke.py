from sqlalchemy.engine import Connection

from dms.testing.factories import DocumentFactory, FolderFactory


def test_factories_insert_valid_rows(tenant_conn: Connection, user_id: object) -> None:
    folder = FolderFactory(conn=tenant_conn, created_by=user_id)
    doc = DocumentFactory(conn=tenant_conn, created_by=user_id, folder_id=folder["id"])
    assert doc["folder_id"] == folder["id"]
    assert doc["version"] == 1
