"""The seed loader: targets are computed from named constants, and every malformed input is reported
with its file, item id and field."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from scaling_book.content.loader import load_seed
from scaling_book.content.specs import SeedError
from scaling_book.paths import SEED_DIR

GOOD_NUMERIC = '''
[[item]]
id = "ch01-intensity"
section = "Matrix multiplication"
provenance = "book_stated_fact"
grader = "numeric"
method_stated = false
question = "What is the critical intensity? Give FLOPs/byte."
target = "tpu_v5e.bf16_flops_per_s / tpu_v5e.hbm_bytes_per_s_as_in_ch1"
tolerance = 0.02
unit = "FLOPs/byte"
'''


@pytest.fixture
def seed(tmp_path: Path) -> Path:
    shutil.copy(SEED_DIR / "hardware.toml", tmp_path / "hardware.toml")
    shutil.copy(SEED_DIR / "derive.py", tmp_path / "derive.py")
    (tmp_path / "reference_solutions").mkdir()
    return tmp_path


def _write(seed: Path, body: str, name: str = "ch01_roofline.toml", chapter: int = 1) -> None:
    (seed / name).write_text(f"chapter = {chapter}\n{body}")


def _issues(seed: Path) -> list[str]:
    with pytest.raises(SeedError) as info:
        load_seed(seed)
    return [str(issue) for issue in info.value.issues]


def test_target_is_evaluated_from_named_constants(seed: Path) -> None:
    _write(seed, GOOD_NUMERIC)
    [item] = load_seed(seed)
    assert item.targets == [pytest.approx(1.97e14 / 8.2e11)]
    assert item.split == "train" and item.kind == "qa"


def test_given_inputs_are_usable_in_targets(seed: Path) -> None:
    _write(seed, GOOD_NUMERIC.replace('target = "tpu_v5e.bf16_flops_per_s / tpu_v5e.hbm_bytes_per_s_as_in_ch1"',
                                      'given = { B = 512, D = "2 * B" }\ntarget = "B * D"'))
    [item] = load_seed(seed)
    assert item.targets == [512 * 1024]


def test_unknown_constant_names_file_item_and_field(seed: Path) -> None:
    _write(seed, GOOD_NUMERIC.replace("tpu_v5e.bf16_flops_per_s", "tpu_v5e.bf17_flops_per_s"))
    [message] = _issues(seed)
    assert message.startswith("ch01_roofline.toml, item ch01-intensity, field target: cannot evaluate")


@pytest.mark.parametrize(("replace", "by", "field"), [
    ('tolerance = 0.02', 'tolerance = 1.0', "tolerance"),
    ('tolerance = 0.02', 'tolerance = 0', "tolerance"),
    ('provenance = "book_stated_fact"', 'provenance = "vibes"', "provenance"),
    ('target = "tpu_v5e.bf16_flops_per_s / tpu_v5e.hbm_bytes_per_s_as_in_ch1"', 'target = "float(\'nan\')"', "target"),
    ('target = "tpu_v5e.bf16_flops_per_s / tpu_v5e.hbm_bytes_per_s_as_in_ch1"', 'target = "1e308 * 10"', "target"),
    ('unit = "FLOPs/byte"', 'unit = "FLOPs/byte"\ncolour = "red"', "colour"),
    ('unit = "FLOPs/byte"', 'unit = "FLOPs/bogounit"', "unit"),   # not in the grading unit registry
    ('unit = "FLOPs/byte"', 'unit = "flops per Byte"', "unit"),   # case matters: Byte is not byte
])
def test_bad_field_is_reported_by_name(seed: Path, replace: str, by: str, field: str) -> None:
    _write(seed, GOOD_NUMERIC.replace(replace, by))
    messages = _issues(seed)
    assert any(m.startswith(f"ch01_roofline.toml, item ch01-intensity, field {field}:") for m in messages), messages


def test_mcq_answer_outside_choices_is_reported(seed: Path) -> None:
    _write(seed, '''
[[item]]
id = "ch01-which"
section = "Matrix multiplication"
provenance = "book_stated_fact"
grader = "mcq"
method_stated = false
question = "Which?"
choices = { A = "one", B = "two" }
answer = "C"
''')
    [message] = _issues(seed)
    assert message.startswith("ch01_roofline.toml, item ch01-which, field answer:")


def test_duplicate_id_across_files_is_reported(seed: Path) -> None:
    _write(seed, GOOD_NUMERIC)
    _write(seed, GOOD_NUMERIC, name="ch01_roofline_more.toml")
    messages = _issues(seed)
    assert any("ch01-intensity, field id: duplicate id" in m for m in messages)


def test_chapter_9_file_is_refused(seed: Path) -> None:
    _write(seed, GOOD_NUMERIC.replace("ch01-", "ch09-"), name="ch09_profiling.toml", chapter=9)
    [message] = _issues(seed)
    assert message.startswith("ch09_profiling.toml, field chapter: chapter 9 is not an item source")


def test_malformed_toml_names_the_file(seed: Path) -> None:
    (seed / "ch02_tpus.toml").write_text("chapter = 2\n[[item]\nid = ")
    [message] = _issues(seed)
    assert message.startswith("ch02_tpus.toml: not valid TOML")


def test_code_item_needs_three_tests_and_a_reference(seed: Path) -> None:
    _write(seed, '''
[[item]]
id = "ch01-code"
section = "Matrix multiplication"
provenance = "book_stated_fact"
grader = "code"
method_stated = false
question = "Write it."
function = "f"
signature = "def f(x: float) -> float:"
docstring = "x in bytes; returns seconds."
reference = "f_ref"
compare = "exact"
[[item.test]]
args = [1]
expected = 2
''')
    messages = _issues(seed)
    assert any(m.startswith("ch01_roofline.toml, item ch01-code, field reference: no module") for m in messages)
    assert any(m.startswith("ch01_roofline.toml, item ch01-code, field test: needs at least 3") for m in messages)


def test_heldout_item_needs_a_train_counterpart(seed: Path) -> None:
    _write(seed, GOOD_NUMERIC.replace("ch01-", "ch12-"), name="ch12_gpus.toml", chapter=12)
    messages = _issues(seed)
    assert any(m.startswith("ch12_gpus.toml, item ch12-intensity, field counterpart:") for m in messages)


def test_method_stated_is_required_and_boolean(seed: Path) -> None:
    _write(seed, GOOD_NUMERIC.replace("method_stated = false\n", ""))
    assert any(m.startswith("ch01_roofline.toml, item ch01-intensity, field method_stated:") for m in _issues(seed))
    _write(seed, GOOD_NUMERIC.replace("method_stated = false", 'method_stated = "no"'))
    assert any("field method_stated" in m for m in _issues(seed))
    _write(seed, GOOD_NUMERIC.replace("method_stated = false", "method_stated = true"))
    [item] = load_seed(seed)
    assert item.method_stated is True


def _hashes(seed_dir: Path) -> dict[str, tuple[str, str]]:
    return {spec.id: (spec.grader, spec.content_hash()) for spec in load_seed(seed_dir)}


def _changed(before: dict, after: dict) -> set[str]:
    assert set(before) == set(after)
    return {item_id for item_id in before if before[item_id] != after[item_id]}


def test_a_code_items_hash_covers_its_hidden_test_domain(tmp_path: Path) -> None:
    seed_dir = tmp_path / "seed"
    shutil.copytree(SEED_DIR, seed_dir)
    domains = seed_dir / "code_domains.toml"
    text = domains.read_text()
    before = _hashes(seed_dir)
    # one item's domain: a narrower batch range changes the hidden cases of ch01-matmul-time-bounds only
    old = "[ch01-matmul-time-bounds]\nbatch = { log_int = [1, 65536] }\n"
    assert old in text
    domains.write_text(text.replace(old, old.replace("[1, 65536]", "[2, 65536]")))
    assert _changed(before, _hashes(seed_dir)) == {"ch01-matmul-time-bounds"}
    # draw order matters (the draws consume one random stream): swapping two keys changes it too
    swapped = "[ch01-matmul-time-bounds]\nd_model = { pow2 = [128, 32768] }\nbatch = { log_int = [1, 65536] }\n"
    domains.write_text(text.replace(old + "d_model = { pow2 = [128, 32768] }\n", swapped))
    assert _changed(before, _hashes(seed_dir)) == {"ch01-matmul-time-bounds"}
    # the case count is every code item's: all of them change, no question-answer item does
    assert "\ncases = 50 " in text
    domains.write_text(text.replace("\ncases = 50 ", "\ncases = 49 "))
    code_ids = {item_id for item_id, (grader, _) in before.items() if grader == "code"}
    assert len(code_ids) == 24 and _changed(before, _hashes(seed_dir)) == code_ids


def test_a_code_items_hash_covers_its_reference_module(tmp_path: Path) -> None:
    # The hidden tests' expected values are what the reference computes: editing the module (here
    # only a comment, which a hash cannot tell from a change of behaviour) changes the hash of every
    # code item whose reference lives in it, and of no other item.
    seed_dir = tmp_path / "seed"
    shutil.copytree(SEED_DIR, seed_dir)
    before = _hashes(seed_dir)
    module = seed_dir / "reference_solutions" / "ch01.py"
    module.write_text(module.read_text() + "\n# edited\n")
    ch01_code = {i for i, (grader, _) in before.items() if grader == "code" and i.startswith("ch01-")}
    assert ch01_code and _changed(before, _hashes(seed_dir)) == ch01_code
