"""SQLAlchemy 2 models of the item store (items, choices, test cases, baselines, variant definitions);
the run-history tables are in `scaling_book.store.tracking`.

The table constraints are the static half of the validation gate: a bad row (a NaN target, a
tolerance of 0 or 1, an unknown grader, an mcq answer that is not one of its item's choices,
chapter 9) is refused by the database itself, so no code path can skip the gate.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    Boolean,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    ForeignKeyConstraint,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

GRADERS = ("numeric", "numeric_multi", "mcq", "formula", "code")
PROVENANCES = ("book_stated_fact", "book_worked_problem", "synthesized_from_book")
TRAIN_CHAPTERS = (1, 2, 3, 4, 5, 6, 7, 8)
HELDOUT_CHAPTERS = (12,)
RUN_STATUSES = ("running", "complete", "failed", "interrupted")
"""`interrupted`: stopped by a signal with its finished rollouts stored; `scaling-book resume` completes it."""
ROLLOUT_STATUSES = ("ok", "error", "truncated")
"""`truncated`: the reply was cut at the token limit (finish_reason "length"); scored 0."""
REASONING_STORED_CHARS = 20_000
"""Longest reasoning text stored per rollout (its full length is stored next to it)."""
COMPARISONS = ("rel", "exact", "bool")

# Largest finite double: a bound that rejects +-inf (SQLite stores inf as a REAL that compares above it).
_FINITE_BOUND = "1.7976931348623157e308"

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def _in(column: str, values: tuple) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def _finite(column: str) -> str:
    return f"{column} = {column} AND {column} <= {_FINITE_BOUND} AND {column} >= -{_FINITE_BOUND}"


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Item(Base):
    """One question of the dataset (chapter and section of the book it comes from)."""

    __tablename__ = "items"
    __table_args__ = (
        CheckConstraint(_in("chapter", TRAIN_CHAPTERS + HELDOUT_CHAPTERS), name="chapter_known"),
        CheckConstraint(
            f"(split = 'train' AND {_in('chapter', TRAIN_CHAPTERS)}) OR "
            f"(split = 'heldout' AND {_in('chapter', HELDOUT_CHAPTERS)})",
            name="split_matches_chapter",
        ),
        CheckConstraint(_in("grader", GRADERS), name="grader_known"),
        CheckConstraint(_in("provenance", PROVENANCES), name="provenance_known"),
        CheckConstraint(
            "tolerance IS NULL OR (tolerance > 0 AND tolerance < 1)", name="tolerance_in_open_unit_interval"
        ),
        CheckConstraint(
            "(grader IN ('numeric', 'numeric_multi') AND tolerance IS NOT NULL) OR grader NOT IN ('numeric', 'numeric_multi')",
            name="numeric_has_tolerance",
        ),
        CheckConstraint("length(question) > 0", name="question_not_empty"),
        CheckConstraint("length(section) > 0", name="section_not_empty"),
        CheckConstraint("counterpart_id IS NULL OR split = 'heldout'", name="counterpart_only_heldout"),
    )

    id: Mapped[str] = mapped_column(String(80), primary_key=True)
    chapter: Mapped[int] = mapped_column(Integer)
    split: Mapped[str] = mapped_column(String(10))
    section: Mapped[str] = mapped_column(String(200))
    provenance: Mapped[str] = mapped_column(String(30))
    grader: Mapped[str] = mapped_column(String(20))
    question: Mapped[str] = mapped_column(Text)
    tolerance: Mapped[float | None] = mapped_column(Float)
    notes: Mapped[str | None] = mapped_column(Text)
    book_value: Mapped[str | None] = mapped_column(Text)
    erratum: Mapped[str | None] = mapped_column(Text)
    counterpart_id: Mapped[str | None] = mapped_column(ForeignKey("items.id"))
    source_file: Mapped[str] = mapped_column(String(200))
    content_hash: Mapped[str] = mapped_column(String(64))

    targets: Mapped[list[NumericTarget]] = relationship(
        back_populates="item", cascade="all, delete-orphan", order_by="NumericTarget.position"
    )
    choices: Mapped[list[McqChoice]] = relationship(
        back_populates="item", cascade="all, delete-orphan", order_by="McqChoice.letter"
    )
    mcq_answer: Mapped[McqAnswer | None] = relationship(cascade="all, delete-orphan")
    formula: Mapped[FormulaAnswer | None] = relationship(cascade="all, delete-orphan")
    formula_symbols: Mapped[list[FormulaSymbol]] = relationship(
        cascade="all, delete-orphan", order_by="FormulaSymbol.position"
    )
    formula_equivalents: Mapped[list[FormulaEquivalent]] = relationship(
        cascade="all, delete-orphan", order_by="FormulaEquivalent.position"
    )
    code_task: Mapped[CodeTask | None] = relationship(back_populates="item", cascade="all, delete-orphan")


class NumericTarget(Base):
    """A numeric target: one for `numeric`, several in the asked order for `numeric_multi`."""

    __tablename__ = "numeric_targets"
    __table_args__ = (
        CheckConstraint(_finite("value"), name="value_finite"),
        CheckConstraint("position >= 0", name="position_nonnegative"),
    )

    item_id: Mapped[str] = mapped_column(ForeignKey("items.id", ondelete="CASCADE"), primary_key=True)
    position: Mapped[int] = mapped_column(Integer, primary_key=True)
    value: Mapped[float] = mapped_column(Float)
    unit: Mapped[str] = mapped_column(String(80))
    expression: Mapped[str] = mapped_column(Text)

    item: Mapped[Item] = relationship(back_populates="targets")


class McqChoice(Base):
    """One lettered choice of an mcq item."""

    __tablename__ = "mcq_choices"
    __table_args__ = (CheckConstraint("letter IN ('A', 'B', 'C', 'D', 'E', 'F')", name="letter_known"),)

    item_id: Mapped[str] = mapped_column(ForeignKey("items.id", ondelete="CASCADE"), primary_key=True)
    letter: Mapped[str] = mapped_column(String(1), primary_key=True)
    text: Mapped[str] = mapped_column(Text)

    item: Mapped[Item] = relationship(back_populates="choices")


class McqAnswer(Base):
    """An mcq item's answer letter: a composite foreign key into that item's own choices."""

    __tablename__ = "mcq_answers"
    __table_args__ = (
        ForeignKeyConstraint(
            ["item_id", "letter"],
            ["mcq_choices.item_id", "mcq_choices.letter"],
            name="fk_mcq_answers_choice",
            ondelete="CASCADE",
        ),
    )

    item_id: Mapped[str] = mapped_column(ForeignKey("items.id", ondelete="CASCADE"), primary_key=True)
    letter: Mapped[str] = mapped_column(String(1))


class FormulaAnswer(Base):
    """The reference expression (or relation) of a formula item."""

    __tablename__ = "formula_answers"

    item_id: Mapped[str] = mapped_column(ForeignKey("items.id", ondelete="CASCADE"), primary_key=True)
    expression: Mapped[str] = mapped_column(Text)


class FormulaSymbol(Base):
    """A symbol a formula item's answer may use."""

    __tablename__ = "formula_symbols"
    __table_args__ = (UniqueConstraint("item_id", "name", name="uq_formula_symbols_item_name"),)

    item_id: Mapped[str] = mapped_column(ForeignKey("items.id", ondelete="CASCADE"), primary_key=True)
    position: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(40))


class FormulaEquivalent(Base):
    """A hand-written accepted form of a formula item's answer."""

    __tablename__ = "formula_equivalents"

    item_id: Mapped[str] = mapped_column(ForeignKey("items.id", ondelete="CASCADE"), primary_key=True)
    position: Mapped[int] = mapped_column(Integer, primary_key=True)
    expression: Mapped[str] = mapped_column(Text)


class CodeTask(Base):
    """An implementation item: the function to write, how results compare, its reference solution."""

    __tablename__ = "code_tasks"
    __table_args__ = (
        CheckConstraint(_in("compare", COMPARISONS), name="compare_known"),
        CheckConstraint(
            "(compare = 'rel' AND tolerance > 0 AND tolerance < 1) OR (compare != 'rel' AND tolerance IS NULL)",
            name="rel_has_tolerance",
        ),
    )

    item_id: Mapped[str] = mapped_column(ForeignKey("items.id", ondelete="CASCADE"), primary_key=True)
    function_name: Mapped[str] = mapped_column(String(80))
    signature: Mapped[str] = mapped_column(Text)
    docstring: Mapped[str] = mapped_column(Text)
    compare: Mapped[str] = mapped_column(String(10))
    tolerance: Mapped[float | None] = mapped_column(Float)
    reference_module: Mapped[str] = mapped_column(String(200))
    reference_function: Mapped[str] = mapped_column(String(80))
    reference_source: Mapped[str] = mapped_column(Text)
    hidden_seed: Mapped[int | None] = mapped_column(Integer)
    """Seed the gate drew the hidden test cases with (None: none drawn)."""

    item: Mapped[Item] = relationship(back_populates="code_task")
    tests: Mapped[list[CodeTestCase]] = relationship(
        back_populates="task", cascade="all, delete-orphan", order_by="CodeTestCase.position"
    )
    baseline: Mapped[Baseline | None] = relationship(cascade="all, delete-orphan")


class CodeTestCase(Base):
    """One test case of a code item: arguments and expected value, both JSON. ``hidden``: drawn by the
    gate from the item's input domains (graded, never shown in a prompt or exported in ``info``)."""

    __tablename__ = "code_test_cases"
    __table_args__ = (
        UniqueConstraint("item_id", "position", name="uq_code_test_cases_item_position"),
        CheckConstraint("position >= 0", name="position_nonnegative"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    item_id: Mapped[str] = mapped_column(ForeignKey("code_tasks.item_id", ondelete="CASCADE"))
    position: Mapped[int] = mapped_column(Integer)
    args_json: Mapped[str] = mapped_column(Text)
    expected_json: Mapped[str] = mapped_column(Text)
    hidden: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())

    task: Mapped[CodeTask] = relationship(back_populates="tests")


class Baseline(Base):
    """The best pass fraction a knowledge-free constant achieves on a code item (measured at build)."""

    __tablename__ = "baselines"
    __table_args__ = (
        CheckConstraint("best_fraction >= 0 AND best_fraction < 1", name="no_constant_passes_all"),
    )

    item_id: Mapped[str] = mapped_column(ForeignKey("code_tasks.item_id", ondelete="CASCADE"), primary_key=True)
    best_fraction: Mapped[float] = mapped_column(Float)
    best_constant: Mapped[str] = mapped_column(Text)
    measured_at: Mapped[datetime] = mapped_column(DateTime)


VARIANT_DISTRIBUTIONS = ("log_uniform", "uniform", "int", "choices", "derived")
VARIANT_STYLES = ("sci", "plain", "int", "comma")


class VariantDefinition(Base):
    """The parametric declaration of one item (`seed/variants/chNN.toml`): its question template.
    Its inputs and placeholders are rows of `variant_inputs` and `variant_placeholders`."""

    __tablename__ = "variant_definitions"

    item_id: Mapped[str] = mapped_column(ForeignKey("items.id", ondelete="CASCADE"), primary_key=True)
    source_file: Mapped[str] = mapped_column(String(40))
    template: Mapped[str] = mapped_column(Text)
    constraints_json: Mapped[str] = mapped_column(Text)

    inputs: Mapped[list[VariantInputRow]] = relationship(cascade="all, delete-orphan", order_by="VariantInputRow.name")
    placeholders: Mapped[list[VariantPlaceholder]] = relationship(cascade="all, delete-orphan")


class VariantInputRow(Base):
    """One varying input (or derived value) of a parametric item. Ranges must be finite and ordered."""

    __tablename__ = "variant_inputs"
    __table_args__ = (
        CheckConstraint(_in("distribution", VARIANT_DISTRIBUTIONS), name="distribution_known"),
        CheckConstraint(_in("style", VARIANT_STYLES), name="style_known"),
        CheckConstraint(
            "distribution IN ('choices', 'derived') OR (low IS NOT NULL AND high IS NOT NULL AND "
            f"{_finite('low')} AND {_finite('high')} AND low < high)", name="range_finite_and_ordered"),
        CheckConstraint("distribution != 'log_uniform' OR low > 0", name="log_range_positive"),
        CheckConstraint("distribution != 'choices' OR choices_json IS NOT NULL", name="choices_given"),
        CheckConstraint("distribution != 'derived' OR expression IS NOT NULL", name="derived_has_expression"),
        CheckConstraint(f"{_finite('scale')} AND scale > 0", name="scale_positive"),
    )

    item_id: Mapped[str] = mapped_column(ForeignKey("variant_definitions.item_id", ondelete="CASCADE"),
                                         primary_key=True)
    name: Mapped[str] = mapped_column(String(80), primary_key=True)
    distribution: Mapped[str] = mapped_column(String(12))
    low: Mapped[float | None] = mapped_column(Float)
    high: Mapped[float | None] = mapped_column(Float)
    choices_json: Mapped[str | None] = mapped_column(Text)
    expression: Mapped[str | None] = mapped_column(Text)
    sig: Mapped[int] = mapped_column(Integer)
    style: Mapped[str] = mapped_column(String(8))
    scale: Mapped[float] = mapped_column(Float)
    hidden: Mapped[int] = mapped_column(Integer)


class VariantPlaceholder(Base):
    """A `{{name}}` of a template; the foreign key makes an unbound placeholder unstorable."""

    __tablename__ = "variant_placeholders"
    __table_args__ = (
        ForeignKeyConstraint(["item_id", "name"], ["variant_inputs.item_id", "variant_inputs.name"],
                             ondelete="CASCADE"),
    )

    item_id: Mapped[str] = mapped_column(ForeignKey("variant_definitions.item_id", ondelete="CASCADE"),
                                         primary_key=True)
    name: Mapped[str] = mapped_column(String(80), primary_key=True)
