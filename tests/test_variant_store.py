"""Variant definitions in the store: written by the build, and refused when a range is not finite and
ordered or a template placeholder is unbound (constraints of migration 0008)."""

from __future__ import annotations

import math

import pytest
from sqlalchemy import create_engine, func, select
from sqlalchemy.exc import IntegrityError

from scaling_book.content.variants import load_context
from scaling_book.paths import SEED_DIR
from scaling_book.store.items import replace_items
from scaling_book.store.models import (
    VariantDefinition,
    VariantInputRow,
    VariantPlaceholder,
)


def test_the_build_stores_every_parametric_declaration(built):
    engine = create_engine(built["db_url"])
    with engine.connect() as connection:
        stored = connection.scalar(select(func.count()).select_from(VariantDefinition))
        placeholders = connection.scalar(select(func.count()).select_from(VariantPlaceholder))
    engine.dispose()
    assert stored == len(load_context(SEED_DIR).parametric_ids())
    assert placeholders > 0


def _item(session_factory):
    from scaling_book.content.specs import ItemSpec

    spec = ItemSpec(id="ch01-x", chapter=1, section="s", provenance="book_stated_fact", grader="numeric",
                    question="q 1.0", source_file="ch01_x.toml", tolerance=0.1, targets=[1.0],
                    target_expressions=["1.0"], units=["u"])
    with session_factory() as session, session.begin():
        replace_items(session, [spec])


@pytest.mark.parametrize(("low", "high"), [(2.0, 1.0), (1.0, math.inf), (math.nan, 1.0), (None, 1.0)])
def test_a_range_not_finite_and_ordered_is_refused(session_factory, low, high):
    _item(session_factory)
    with pytest.raises(IntegrityError), session_factory() as session, session.begin():
        row = VariantDefinition(item_id="ch01-x", source_file="variants/ch01.toml", template="q {{a}}",
                                constraints_json="[]")
        row.inputs.append(VariantInputRow(name="a", distribution="uniform", low=low, high=high, sig=3,
                                          style="plain", scale=1.0, hidden=0))
        session.add(row)


def test_an_unbound_placeholder_is_refused(session_factory):
    _item(session_factory)
    with pytest.raises(IntegrityError), session_factory() as session, session.begin():
        row = VariantDefinition(item_id="ch01-x", source_file="variants/ch01.toml", template="q {{b}}",
                                constraints_json="[]")
        row.inputs.append(VariantInputRow(name="a", distribution="uniform", low=0.5, high=2.0, sig=3,
                                          style="plain", scale=1.0, hidden=0))
        row.placeholders.append(VariantPlaceholder(name="b"))
        session.add(row)
