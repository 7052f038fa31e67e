"""The rule sources (dms/schema/sql): how a file is read, rendered for a schema and for Citus,
and that the revisions leave exactly what the files say (docs/rules.md)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory

from dms.cli import main
from dms.migrations import alembic_config, script_location
from dms.migrations.frozen import RuleChange, frozen_rules, pending, write_revision
from dms.schema import rules
from dms.schema.rules import RuleKind, RuleSourceError

FILE = """\
-- The file's header: a blank line follows, so it belongs to no statement.

-- What this function is for.
CREATE OR REPLACE FUNCTION pick(x integer, y text)
    RETURNS text LANGUAGE plpgsql
    SET search_path = :"schema", pg_temp
AS $$
BEGIN
    -- a comment; with a semicolon, and ':"schema"' that psql would not replace either
    RETURN ';' || y;
END
$$;

CREATE TRIGGER picked
    AFTER UPDATE OF x ON things
    FOR EACH ROW
    WHEN (old.x IS DISTINCT FROM new.x)
    EXECUTE FUNCTION pick();

ALTER TABLE things ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;

-- Who may see a thing.
-- on citus: thing_visible(owner uuid, kind text)
CREATE POLICY visible ON things USING (
    owner = (SELECT me())
    OR kind IN ( 'a  b', 'c' )
    OR EXISTS (
        SELECT 1 FROM :"schema".other o WHERE o.id = owner)
);
"""


def _render(statement: object) -> str:
    assert hasattr(statement, "as_string")
    return str(statement.as_string(None))


def test_a_file_is_read_as_one_rule_per_statement_with_the_comment_above_it() -> None:
    found = rules.parse(FILE, area="things")

    assert [(rule.kind, rule.identity) for rule in found] == [
        (RuleKind.FUNCTION, "function pick(x integer, y text)"),
        (RuleKind.TRIGGER, "trigger things.picked"),
        (RuleKind.ROW_SECURITY, "row security things"),
        (RuleKind.POLICY, "policy things.visible"),
    ]
    assert found[0].text.startswith("-- What this function is for.\nCREATE OR REPLACE")
    assert found[0].text.endswith("END\n$$")
    assert "header" not in "".join(rule.text for rule in found)
    assert found[3].citus_function == ("thing_visible", "owner uuid, kind text")
    assert rules.code_of(found[3].text).startswith("CREATE POLICY visible ON things USING (")


def test_the_schema_is_put_in_quoted_where_psql_would_put_it_and_nowhere_else() -> None:
    function = rules.parse(FILE, area="things")[0]

    (statement,) = function.statements('tenant_a"b', on_citus=False)
    text = _render(statement)

    assert 'SET search_path = "tenant_a""b", pg_temp' in text
    assert """':"schema"' that psql would not replace""" in text


def test_on_plain_postgresql_a_policy_is_created_as_written() -> None:
    policy = rules.parse(FILE, area="things")[3]

    (statement,) = policy.statements("tenant_x", on_citus=False)

    assert _render(statement) == policy.text.replace(':"schema"', '"tenant_x"')


def test_on_citus_a_policy_calls_its_condition_written_on_one_line_as_a_function() -> None:
    policy = rules.parse(FILE, area="things")[3]

    function, created = (_render(s) for s in policy.statements("tenant_x", on_citus=True))

    assert function == (
        'CREATE OR REPLACE FUNCTION "thing_visible"(owner uuid, kind text) RETURNS boolean'
        ' LANGUAGE sql STABLE SET search_path = "tenant_x", pg_temp AS '
        "'SELECT owner = (SELECT me()) OR kind IN (''a  b'', ''c'') OR EXISTS (SELECT 1"
        ' FROM "tenant_x".other o WHERE o.id = owner)\''
    )
    assert created == 'CREATE POLICY visible ON things USING ("thing_visible"(owner, kind))'


def test_policies_that_share_a_citus_function_must_share_its_condition() -> None:
    other = FILE.replace("CREATE POLICY visible ON things", "CREATE POLICY seen ON things")
    other = other.replace("OR kind IN", "AND kind IN")
    both = rules.parse(FILE, area="a") + rules.parse(other, area="b")[3:]

    with pytest.raises(RuleSourceError, match="thing_visible on Citus with another condition"):
        rules.validate(both)


def test_a_rule_written_twice_is_refused() -> None:
    twice = rules.parse(FILE, area="a") + rules.parse(FILE, area="b")[:1]

    with pytest.raises(RuleSourceError, match=r"function pick\(x integer, y text\) is written"):
        rules.validate(twice)


@pytest.mark.parametrize(
    ("text", "refusal"),
    [
        ("CREATE TABLE t (id int);", "not a rule"),
        ("CREATE OR REPLACE FUNCTION f() RETURNS int AS $$ SELECT 1", "unterminated"),
        ("ALTER TABLE t ENABLE ROW LEVEL SECURITY", "without ';'"),
    ],
)
def test_what_is_not_a_rule_is_refused_by_name(text: str, refusal: str) -> None:
    with pytest.raises(RuleSourceError, match=refusal):
        rules.parse(text, area="x")


def test_every_function_pins_its_search_path_to_its_tenant() -> None:
    # Otherwise a function's names would resolve in whatever schema its caller has first.
    functions = [rule for rule in rules.load() if rule.kind is RuleKind.FUNCTION]

    assert len(functions) > 40
    unpinned = [
        rule.identity
        for rule in functions
        if 'SET search_path = :"schema", pg_temp' not in rules.code_of(rule.text)
    ]
    assert unpinned == []


def test_every_rule_says_what_it_is_for_or_follows_one_that_does() -> None:
    found = rules.load()

    uncommented = [
        rule.identity
        for rule in found
        if rule.kind is RuleKind.FUNCTION and not rule.text.startswith("--")
    ]
    assert uncommented == []


def test_the_revisions_leave_exactly_what_the_sources_say() -> None:
    script = ScriptDirectory.from_config(alembic_config())

    changes = pending(frozen_rules(script), rules.load())

    assert [change.identity for change in changes] == [], (
        "the rule sources differ from what the revisions leave: run dms rules revision -m ..."
    )


def _rule(text: str) -> rules.Rule:
    (rule,) = rules.parse(f"{text};", area="t")
    return rule


def test_a_change_of_comment_alone_is_no_change_but_a_changed_citus_function_is() -> None:
    policy = rules.parse(FILE, area="t")[3]
    frozen = {policy.identity: policy.text}

    recommented = _rule(policy.text.replace("-- Who may see a thing.", "-- Whoever."))
    renamed = _rule(policy.text.replace("thing_visible", "thing_seen"))

    assert pending(frozen, [recommented]) == []
    assert pending(frozen, [renamed]) == [
        RuleChange(identity=policy.identity, before=policy.text, after=renamed.text)
    ]


def test_pending_adds_what_is_new_and_removes_what_is_gone_in_reverse_order() -> None:
    function, trigger, switch, policy = rules.parse(FILE, area="t")
    frozen = {rule.identity: rule.text for rule in (function, trigger, switch)}

    changes = pending(frozen, [function, policy])

    assert changes == [
        RuleChange(identity=policy.identity, before=None, after=policy.text),
        RuleChange(identity=switch.identity, before=switch.text, after=None),
        RuleChange(identity=trigger.identity, before=trigger.text, after=None),
    ]


def test_a_written_revision_freezes_whole_texts_and_follows_head(tmp_path: Path) -> None:
    scripts = tmp_path / "alembic"
    shutil.copytree(script_location(), scripts, ignore=shutil.ignore_patterns("__pycache__"))
    config = alembic_config()
    config.set_main_option("script_location", str(scripts))
    script = ScriptDirectory.from_config(config)
    head = script.get_current_head()
    assert head is not None
    was = frozen_rules(script)
    identity = "function access_right_names(wanted integer)"
    changed = _rule(was[identity].replace("' and '", "' & '"))
    tricky = _rule(
        '-- """ in a comment\nCREATE OR REPLACE FUNCTION f() RETURNS text LANGUAGE sql'
        " SET search_path = :\"schema\", pg_temp AS $$SELECT '\\'$$"
    )
    changes = [
        RuleChange(identity=identity, before=was[identity], after=changed.text),
        RuleChange(identity=tricky.identity, before=None, after=tricky.text),
    ]

    path = write_revision(script, "Rights joined by an ampersand.", changes)

    again = ScriptDirectory.from_config(config)
    written = again.get_revision(f"{int(head) + 1:04d}")
    assert written is not None
    assert path.name == f"{int(head) + 1:04d}_rights_joined_by_an_ampersand.py"
    assert (written.revision, written.down_revision) == (f"{int(head) + 1:04d}", head)
    assert list(written.module.RULES) == changes
    assert frozen_rules(again) == {**was, identity: changed.text, tricky.identity: tricky.text}
    assert frozen_rules(again, head) == was


def test_dms_rules_diff_says_the_sources_are_what_head_leaves(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["rules", "diff"]) == 0

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert capsys.readouterr().out == f"the rule sources are what revision {head} leaves\n"


def test_dms_rules_revision_refuses_to_write_an_empty_revision(
    capsys: pytest.CaptureFixture[str],
) -> None:
    versions = sorted(Path(script_location(), "versions").glob("*.py"))

    assert main(["rules", "revision", "-m", "nothing"]) == 1

    assert "error: the rule sources are what revision" in capsys.readouterr().err
    assert sorted(Path(script_location(), "versions").glob("*.py")) == versions
