"""An update needs the right on the row as it was as well as on the row as it becomes
(finding 6 of the review, docs/security.md): a user who may manage only her own folder cannot
move the root's entries there, nor move a tag off a document she may only view."""

from __future__ import annotations

from sqlalchemy.engine import Engine

from tests.adversarial.conftest import World, raw_as, read_as_system, refused_as

ROOT_ENTRIES = (
    "SELECT user_id, group_id, rights FROM {s}.access_entries"
    " WHERE folder_id IS NULL AND document_id IS NULL ORDER BY 1, 2, 3"
)


def test_moving_the_roots_entries_into_ones_own_folder_is_refused(
    engine: Engine, app_engine: Engine, world: World
) -> None:
    before = read_as_system(engine, world, ROOT_ENTRIES)

    sqlstate = refused_as(
        app_engine,
        world,
        world.eve,
        "UPDATE {s}.access_entries SET folder_id = "
        f"'{world.eves}' WHERE folder_id IS NULL AND document_id IS NULL",
    )

    assert sqlstate == "42501"
    assert read_as_system(engine, world, ROOT_ENTRIES) == before
    assert len(before) == 2


def test_moving_a_tag_off_a_document_one_may_only_view_is_refused(
    engine: Engine, app_engine: Engine, world: World
) -> None:
    tags_of_doc = f"SELECT tag_id FROM {{s}}.document_tags WHERE document_id = '{world.doc}'"

    sqlstate = refused_as(
        app_engine,
        world,
        world.eve,
        f"UPDATE {{s}}.document_tags SET document_id = '{world.eve_doc}'"
        f" WHERE document_id = '{world.doc}'",
    )

    assert sqlstate == "42501"
    assert read_as_system(engine, world, tags_of_doc) == [(world.tag,)]


def test_what_the_rights_allow_on_both_sides_still_goes(
    engine: Engine, app_engine: Engine, world: World
) -> None:
    # Eve edits both of her own document's sides: a tag moved between her documents is fine.
    second = raw_as(
        app_engine,
        world,
        world.eve,
        "INSERT INTO {s}.documents (title, folder_id, created_by) VALUES"
        f" ('second', '{world.eves}', '{world.eve}')",
    )
    assert second == 1
    second_id = "SELECT id FROM {s}.documents WHERE title = 'second'"
    ((other,),) = read_as_system(engine, world, second_id)
    raw_as(
        app_engine,
        world,
        world.admin,
        f"INSERT INTO {{s}}.document_tags (document_id, tag_id) VALUES ('{world.eve_doc}',"
        f" '{world.tag}')",
    )

    moved = raw_as(
        app_engine,
        world,
        world.eve,
        f"UPDATE {{s}}.document_tags SET document_id = '{other}'"
        f" WHERE document_id = '{world.eve_doc}'",
    )

    assert moved == 1
