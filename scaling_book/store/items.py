"""Writing validated item specs into the store, and reading them back.

The store does not import the seed format (`scaling_book.content.specs.ItemSpec`): `item_row` reads the
attributes it maps, so the import arrow points from content to store only. `replace_items` replaces the whole item catalogue in the caller's transaction (run history is never
touched: rollouts keep the item id and content hash, not a foreign key). Each item is flushed on its
own, so a constraint the database refuses is reported with the item id and the field it guards.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from scaling_book.store.models import (
    CodeTask,
    CodeTestCase,
    FormulaAnswer,
    FormulaEquivalent,
    FormulaSymbol,
    Item,
    McqAnswer,
    McqChoice,
    NumericTarget,
)

# Which seed field each named constraint guards, for error messages.
CONSTRAINT_FIELDS = {
    "ck_items_chapter_known": "chapter",
    "ck_items_split_matches_chapter": "chapter",
    "ck_items_grader_known": "grader",
    "ck_items_provenance_known": "provenance",
    "ck_items_tolerance_in_open_unit_interval": "tolerance",
    "ck_items_numeric_has_tolerance": "tolerance",
    "ck_items_question_not_empty": "question",
    "ck_items_section_not_empty": "section",
    "ck_items_counterpart_only_heldout": "counterpart",
    "ck_numeric_targets_value_finite": "target",
    "ck_mcq_choices_letter_known": "choices",
    "ck_code_tasks_compare_known": "compare",
    "ck_code_tasks_rel_has_tolerance": "tolerance",
    "pk_items": "id",
}


@dataclass(frozen=True)
class RefusedRow:
    """One item the database refused: where it came from, the seed field the constraint guards, why."""

    source_file: str
    item_id: str
    field: str | None
    message: str


class RowsRefused(Exception):
    """Raised by `replace_items` with every `RefusedRow` of one replacement."""

    def __init__(self, refused: list[RefusedRow]):
        self.refused = refused
        super().__init__("; ".join(f"{r.item_id}: {r.message}" for r in refused))


def _field_of(error: IntegrityError) -> str | None:
    message = str(error.orig)
    for name, field in CONSTRAINT_FIELDS.items():
        if name in message:
            return field
    if "UNIQUE constraint failed: items.id" in message:
        return "id"
    if "FOREIGN KEY" in message:
        return "answer or counterpart (foreign key)"
    return None


def item_row(spec: Any) -> Item:
    """The ORM object graph of one item spec (a `scaling_book.content.specs.ItemSpec`)."""
    item = Item(
        id=spec.id, chapter=spec.chapter, split=spec.split, section=spec.section,
        provenance=spec.provenance, grader=spec.grader, question=spec.question,
        tolerance=spec.tolerance if spec.grader in ("numeric", "numeric_multi") else None,
        notes=spec.notes, book_value=spec.book_value, erratum=spec.erratum,
        counterpart_id=spec.counterpart, source_file=spec.source_file, content_hash=spec.content_hash(),
    )
    for position, (value, expression) in enumerate(zip(spec.targets, spec.target_expressions, strict=True)):
        unit = spec.units[position] if position < len(spec.units) else ""
        item.targets.append(NumericTarget(position=position, value=value, unit=unit, expression=expression))
    for letter, text in spec.choices.items():
        item.choices.append(McqChoice(letter=letter, text=text))
    if spec.grader == "formula":
        item.formula = FormulaAnswer(expression=spec.formula_answer)
        item.formula_symbols = [FormulaSymbol(position=i, name=s) for i, s in enumerate(spec.formula_symbols)]
        item.formula_equivalents = [
            FormulaEquivalent(position=i, expression=e) for i, e in enumerate(spec.formula_equivalents)
        ]
    if spec.grader == "code":
        task = CodeTask(
            function_name=spec.code_function, signature=spec.code_signature, docstring=spec.code_docstring,
            compare=spec.code_compare, tolerance=spec.tolerance if spec.code_compare == "rel" else None,
            reference_module=spec.reference_module, reference_function=spec.reference_function,
            reference_source=spec.reference_source,
        )
        task.tests = [
            CodeTestCase(position=i, args_json=json.dumps(t.args), expected_json=json.dumps(t.expected))
            for i, t in enumerate(spec.tests)
        ]
        item.code_task = task
    return item


def replace_items(session: Session, specs: list[Any]) -> None:
    """Replace every item in the store with `specs`, inside the caller's transaction.

    Raises `RowsRefused` naming the file, item and field of every row the database refuses.
    """
    session.execute(delete(Item).where(Item.split == "heldout"))
    session.execute(delete(Item))
    session.flush()
    issues: list[RefusedRow] = []
    # Train items first: held-out items reference them as counterparts.
    for spec in sorted(specs, key=lambda s: (s.split != "train", s.chapter)):
        savepoint = session.begin_nested()
        try:
            session.add(item_row(spec))
            session.flush()
            if spec.grader == "mcq":
                # After the choices exist: the answer is a foreign key into them.
                session.add(McqAnswer(item_id=spec.id, letter=spec.answer_letter))
                session.flush()
            savepoint.commit()
        except IntegrityError as error:
            savepoint.rollback()
            detail = re.sub(r"\s+", " ", str(error.orig))
            issues.append(RefusedRow(spec.source_file, spec.id, _field_of(error), f"refused by the store: {detail}"))
    if issues:
        raise RowsRefused(issues)


def all_items(session: Session) -> list[Item]:
    """Every item, ordered by chapter then id."""
    return list(session.scalars(select(Item).order_by(Item.chapter, Item.id)))
