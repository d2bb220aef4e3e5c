"""The wrong-hardware check: a numeric target that another chip's constants reproduce within the item's
tolerance is refused; the shipped seed passes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from scaling_book.content.loader import load_seed
from scaling_book.content.namespace import load_derive, load_hardware
from scaling_book.content.wrong_hardware import check_wrong_hardware
from scaling_book.paths import SEED_DIR

TRAIN_ITEM = '''chapter = 5

[[item]]
id = "ch05-dp-batch"
section = "Data Parallelism"
provenance = "book_stated_fact"
grader = "numeric"
method_stated = false
question = "Per-chip batch for pure data parallelism on one v5p axis? Give tokens."
target = "tpu_v5p.bf16_flops_per_s / tpu_v5p.ici_bytes_per_s_per_link_bidi"
tolerance = 0.02
unit = "tokens"
'''

HELDOUT_ITEM = '''chapter = 12

[[item]]
id = "ch12-nvl72-batch"
section = "Appendix A: How does this change with GB200?"
provenance = "synthesized_from_book"
grader = "numeric"
method_stated = false
counterpart = "ch05-dp-batch"
question = "Per-GPU batch for pure data parallelism over GB200 NVL72 domains? Give tokens."
target = "c / min(w_gpu, w_node)"
tolerance = 0.02
unit = "tokens"

[item.given]
c = "gpu_b200.bf16_flops_per_s_as_in_text"
w_gpu = "gpu_gb200_nvl72.nvlink_gpu_egress_bytes_per_s"
w_node = "gpu_gb200_nvl72.node_egress_bytes_per_s"
'''


def _check(seed_dir: Path):
    specs = load_seed(seed_dir)
    return check_wrong_hardware(specs, load_hardware(seed_dir / "hardware.toml"), load_derive(seed_dir / "derive.py"))


@pytest.fixture
def seed(tmp_path: Path) -> Path:
    shutil.copy(SEED_DIR / "hardware.toml", tmp_path / "hardware.toml")
    shutil.copy(SEED_DIR / "derive.py", tmp_path / "derive.py")
    (tmp_path / "reference_solutions").mkdir()
    (tmp_path / "ch05_training.toml").write_text(TRAIN_ITEM)
    return tmp_path


def test_a_target_that_h100_and_v5p_constants_reproduce_is_refused(seed: Path) -> None:
    # 2250e12 / 900e9 = 2500 tokens; H100: 990e12 / 400e9 = 2475 (1% off), v5p: 4.59e14 / 1.8e11 = 2550 (2% off).
    (seed / "ch12_gpus.toml").write_text(HELDOUT_ITEM)
    report = _check(seed)
    messages = [str(f) for f in report.failures if f.item_id == "ch12-nvl72-batch"]
    assert any("gpu_h100's constants give 2475" in m for m in messages), messages
    assert any("tpu_v5p's constants give 2550" in m for m in messages), messages


def test_a_target_no_other_chip_reproduces_passes(seed: Path) -> None:
    # Asking the cross-domain bound instead: 2250e12 / 3.6e12 = 625 tokens, far from every other chip's C / W.
    (seed / "ch12_gpus.toml").write_text(HELDOUT_ITEM.replace('target = "c / min(w_gpu, w_node)"', 'target = "c / w_node"'))
    report = _check(seed)
    assert [f for f in report.failures if f.item_id == "ch12-nvl72-batch"] == []
    assert report.closest["ch12-nvl72-batch"][0] > 0.02


def test_a_train_coincidence_fails_only_when_a_heldout_item_asks_that_value(seed: Path) -> None:
    # v5p's 2550 is reproduced by a B200's spec-table C / W_NVLink = 2.3e15 / 900e9 = 2556 (0.2% off).
    (seed / "ch12_gpus.toml").write_text(HELDOUT_ITEM.replace('target = "c / min(w_gpu, w_node)"', 'target = "c / w_node"'))
    report = _check(seed)
    assert any(c.item_id == "ch05-dp-batch" and "gpu_b200" in c.message for c in report.train_coincidences)
    assert not any(f.item_id == "ch05-dp-batch" for f in report.failures)
    asks_it = HELDOUT_ITEM.replace('target = "c / min(w_gpu, w_node)"', 'target = "gpu_b200.bf16_flops_per_s / w_gpu"')
    (seed / "ch12_gpus.toml").write_text(asks_it)
    report = _check(seed)
    assert any(f.item_id == "ch05-dp-batch" and "ch12-nvl72-batch asks it" in f.message for f in report.failures)


def test_the_shipped_seed_passes() -> None:
    report = _check(SEED_DIR)
    assert report.failures == []
    assert report.items_checked >= 40
