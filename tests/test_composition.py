"""The dataset's composition, asserted exactly (the specification's counts), plus the content rules
that hold across the whole dataset: distinct items, held-out items with train counterparts, no GPU
constants in train items."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from scaling_book.content.loader import load_seed
from scaling_book.paths import SEED_DIR

CHAPTERS = {1: 8, 2: 12, 3: 13, 4: 17, 5: 11, 6: 9, 7: 11, 8: 8, 12: 28}
CONFIGS = {"qa": 69, "code": 20, "train": 89, "heldout_qa": 24, "heldout_code": 4, "heldout": 28, "all": 117}
PROVENANCE = {"book_stated_fact": 64, "book_worked_problem": 48, "synthesized_from_book": 5}
# Per chapter: (book_stated_fact, book_worked_problem, synthesized_from_book, code items).
PER_CHAPTER = {1: (5, 3, 0, 2), 2: (8, 4, 0, 2), 3: (7, 5, 1, 3), 4: (11, 5, 1, 3),
               5: (6, 4, 1, 3), 6: (5, 3, 1, 2), 7: (7, 4, 0, 3), 8: (5, 3, 0, 2), 12: (10, 17, 1, 4)}


@pytest.fixture(scope="module")
def items():
    return load_seed(SEED_DIR)


def test_items_per_chapter(items) -> None:
    assert dict(Counter(i.chapter for i in items)) == CHAPTERS
    assert len(items) == 117


def test_chapters_2_to_4_hold_42_items_and_ten_code_items_with_chapter_1(items) -> None:
    assert sum(1 for i in items if i.chapter in (2, 3, 4)) == 42
    assert sum(1 for i in items if i.chapter in (1, 2, 3, 4) and i.grader == "code") == 10


def test_chapters_5_to_8_complete_the_train_half(items) -> None:
    assert sum(1 for i in items if i.chapter in (5, 6, 7, 8)) == 39
    assert sum(1 for i in items if i.split == "train" and i.grader == "code") == 20
    assert sum(1 for i in items if i.split == "train" and i.grader != "code") == 69


def test_provenance_totals_and_per_chapter(items) -> None:
    assert dict(Counter(i.provenance for i in items)) == PROVENANCE
    for chapter, (stated, worked, synthesized, code) in PER_CHAPTER.items():
        mine = [i for i in items if i.chapter == chapter]
        counts = Counter(i.provenance for i in mine)
        assert (counts["book_stated_fact"], counts["book_worked_problem"], counts["synthesized_from_book"]) == \
            (stated, worked, synthesized), f"chapter {chapter}"
        assert sum(i.grader == "code" for i in mine) == code, f"chapter {chapter}"


def test_config_sizes(items) -> None:
    from scaling_book.content.export import config_members

    assert {c: sum(config_members(c, i.split, i.kind) for i in items) for c in CONFIGS} == CONFIGS


def test_every_grader_appears_in_each_content_issue_and_in_heldout_qa(items) -> None:
    graders = {"numeric", "numeric_multi", "mcq", "formula", "code"}
    assert {i.grader for i in items if i.chapter in (2, 3, 4)} == graders
    assert {i.grader for i in items if i.chapter in (5, 6, 7, 8)} == graders
    assert {i.grader for i in items if i.chapter == 12 and i.grader != "code"} == graders - {"code"}


def test_reference_solutions_and_test_cases(items) -> None:
    code = [i for i in items if i.grader == "code"]
    assert len(code) == 24
    assert all(i.reference_function for i in code)
    assert sum(len(i.tests) for i in code) >= 72
    assert all(len(i.tests) >= 3 for i in code)


def test_every_heldout_item_names_a_train_counterpart(items) -> None:
    train_ids = {i.id for i in items if i.split == "train"}
    assert all(i.counterpart in train_ids for i in items if i.split == "heldout")


def test_no_two_items_share_a_question(items) -> None:
    normalized = Counter(re.sub(r"\W+", " ", i.question.lower()).strip() for i in items)
    assert [q for q, n in normalized.items() if n > 1] == []


def test_train_items_use_no_gpu_constants() -> None:
    for path in sorted(SEED_DIR.glob("ch0*.toml")):
        text = path.read_text()
        assert not re.search(r"\bgpu_\w+\.", text), f"{path.name} uses a GPU constant"


def test_every_numeric_target_is_an_expression_or_given(items) -> None:
    """No target is typed as a final number unless it is one of the question's own stated inputs."""
    for item in items:
        for expression, value in zip(item.target_expressions, item.targets, strict=True):
            if re.fullmatch(r"[-+]?[\d.]+(e[-+]?\d+)?", expression.strip()):
                assert str(expression) in item.question or json.dumps(value) in item.question, \
                    f"{item.id}: target {expression} typed as a literal"


def test_method_stated_rates_of_the_two_halves_are_within_10_points(items) -> None:
    """A held-out half that gives the formula away more often than the train half would flatter the gap."""
    rate = {split: sum(i.method_stated for i in items if i.split == split) / sum(i.split == split for i in items)
            for split in ("train", "heldout")}
    assert abs(rate["train"] - rate["heldout"]) <= 0.10, rate

