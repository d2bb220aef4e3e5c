"""Store -> Hugging Face datasets on disk, one per config, with a dataset card.

Layout of the export folder (default `build/export`):

    README.md                     dataset card; its YAML header declares the configs
    manifest.json                 per-config item count and dataset hash (sha256 of item content hashes)
    <config>/items.parquet        one file per config

so that `datasets.load_dataset("build/export", "<config>", split="train")` loads a config. (The
Hugging Face split name is always `train`, the library's default; this project's own train/held-out
split is the config and each row's `info["split"]`.) The export is reproducible: the same seed gives
byte-identical files. It is written to a temporary folder and moved into place only when complete.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from scaling_book.store.items import all_items
from scaling_book.store.models import Item

CONFIGS: dict[str, str] = {
    "qa": "chapters 1-8, question-answer",
    "code": "chapters 1-8, implementation",
    "train": "qa + code: the whole in-distribution half",
    "heldout_qa": "chapter 12, question-answer, GPU hardware",
    "heldout_code": "chapter 12, implementation, GPU hardware",
    "heldout": "both held-out configs",
    "all": "everything",
    "train_variants": "chapters 1-8, K counterfactual variants of every parametric item (fresh numbers, same method)",
    "heldout_variants": "chapter 12, K counterfactual variants of every parametric item",
}
VARIANT_CONFIGS = ("train_variants", "heldout_variants")


def config_members(config: str, split: str, kind: str) -> bool:
    """Whether an item of `split` ("train"|"heldout") and `kind` ("qa"|"code") belongs to `config`."""
    return {
        "qa": split == "train" and kind == "qa",
        "code": split == "train" and kind == "code",
        "train": split == "train",
        "heldout_qa": split == "heldout" and kind == "qa",
        "heldout_code": split == "heldout" and kind == "code",
        "heldout": split == "heldout",
        "all": True,
        "train_variants": False,
        "heldout_variants": False,
    }[config]


def variant_config_members(config: str, split: str) -> bool:
    """Whether a variant of an item of `split` belongs to `config` (only the *_variants configs hold variants)."""
    return {"train_variants": split == "train", "heldout_variants": split == "heldout"}.get(config, False)


def _features():
    from datasets import Features, Sequence, Value

    return Features({
        "id": Value("string"),
        "prompt": [{"role": Value("string"), "content": Value("string")}],
        "question": Value("string"),
        "answer": Value("string"),
        "info": {
            "item_id": Value("string"),
            "chapter": Value("int32"),
            "section": Value("string"),
            "provenance": Value("string"),
            "grader": Value("string"),
            "split": Value("string"),
            "kind": Value("string"),
            "content_hash": Value("string"),
            "tolerance": Value("float64"),
            "targets": Sequence(Value("float64")),
            "units": Sequence(Value("string")),
            "choices": Value("string"),
            "answer_letter": Value("string"),
            "formula_answer": Value("string"),
            "formula_symbols": Sequence(Value("string")),
            "formula_equivalents": Sequence(Value("string")),
            "code_function": Value("string"),
            "code_signature": Value("string"),
            "code_compare": Value("string"),
            "code_tests": Value("string"),
            "code_baseline": Value("float64"),
            "counterpart": Value("string"),
            "parent_id": Value("string"),
            "variant_seed": Value("int64"),
            "variant_inputs": Value("string"),
        },
    })


def render_question(item: Item) -> str:
    """The user message of an item: the question plus what its grader needs the model to know."""
    text = item.question
    if item.grader == "mcq":
        text += "\n\n" + "\n".join(f"{c.letter}. {c.text}" for c in item.choices)
    elif item.grader == "formula":
        names = ", ".join(s.name for s in item.formula_symbols)
        text += f"\n\nWrite the answer as an expression using only these symbols: {names}."
    elif item.grader == "code":
        task = item.code_task
        doc = "\n".join(("    " + line) if line.strip() else "" for line in task.docstring.strip().splitlines())
        text += f"\n\n```python\n{task.signature}\n    \"\"\"\n{doc}\n    \"\"\"\n```"
    return text


def render_answer(item: Item) -> str:
    """The canonical answer as text (what a correct response puts in its answer block)."""
    if item.grader in ("numeric", "numeric_multi"):
        return ", ".join(f"{t.value:.6g}" for t in item.targets)
    if item.grader == "mcq":
        return item.mcq_answer.letter
    if item.grader == "formula":
        return item.formula.expression
    return f"{item.code_task.reference_function} (reference solution in seed/{item.code_task.reference_module})"


def item_record(item: Item, system_prompt: str, variant: dict[str, Any] | None = None) -> dict[str, Any]:
    """One exported row: id, prompt messages, question, answer and the grader's `info`. `variant`
    (`Variant.info()`: parent id, seed, drawn inputs) marks a variant row; originals carry
    parent_id "" and variant_seed -1."""
    task = item.code_task
    question = render_question(item)
    return {
        "id": item.id,
        "prompt": [{"role": "system", "content": system_prompt}, {"role": "user", "content": question}],
        "question": question,
        "answer": render_answer(item),
        "info": {
            "item_id": item.id,
            "chapter": item.chapter,
            "section": item.section,
            "provenance": item.provenance,
            "grader": item.grader,
            "split": item.split,
            "kind": "code" if item.grader == "code" else "qa",
            "content_hash": item.content_hash,
            "tolerance": task.tolerance if task is not None else item.tolerance,
            "targets": [t.value for t in item.targets],
            "units": [t.unit for t in item.targets],
            "choices": json.dumps({c.letter: c.text for c in item.choices}) if item.choices else "",
            "answer_letter": item.mcq_answer.letter if item.mcq_answer else "",
            "formula_answer": item.formula.expression if item.formula else "",
            "formula_symbols": [s.name for s in item.formula_symbols],
            "formula_equivalents": [e.expression for e in item.formula_equivalents],
            "code_function": task.function_name if task else "",
            "code_signature": task.signature if task else "",
            "code_compare": task.compare if task else "",
            "code_tests": json.dumps(
                [{"args": json.loads(t.args_json), "expected": json.loads(t.expected_json)}
                 for t in task.tests if not t.hidden]
            ) if task else "",
            "code_baseline": task.baseline.best_fraction if task and task.baseline else 0.0,
            "counterpart": item.counterpart_id or "",
            **(variant or {"parent_id": "", "variant_seed": -1, "variant_inputs": ""}),
        },
    }


def variant_record(variant: Any, system_prompt: str) -> dict[str, Any]:
    """The exported row of a rendered `scaling_book.content.variants.Variant`; a code variant's
    knowledge-free baseline is measured on its own test cases, as the gate does for the original."""
    from scaling_book.grading.code import knowledge_free_baseline
    from scaling_book.store.items import item_row
    from scaling_book.store.models import Baseline

    item = item_row(variant.spec)
    if item.code_task is not None:
        tests = [{"args": t.args, "expected": t.expected} for t in variant.spec.tests]
        fraction, constant = knowledge_free_baseline(tests, item.code_task.compare, item.code_task.tolerance)
        item.code_task.baseline = Baseline(item_id=item.id, best_fraction=fraction, best_constant=constant)
    return item_record(item, system_prompt, variant.info())


def dataset_hash(content_hashes: list[str]) -> str:
    """sha256 over the sorted item content hashes: equal exactly when the items are equal."""
    return hashlib.sha256("\n".join(sorted(content_hashes)).encode()).hexdigest()


def _card(manifest: dict[str, Any], items: list[Item]) -> str:
    chapters = Counter(item.chapter for item in items)
    lines = [
        "---",
        "license: mit",
        "language:",
        "- en",
        "pretty_name: scaling-book",
        "configs:",
    ]
    for config in CONFIGS:
        lines += [f"- config_name: {config}", "  data_files:", "  - split: train", f"    path: {config}/*.parquet"]
    lines += [
        "---",
        "",
        "# scaling-book",
        "",
        "Questions and implementation tasks built from *How To Scale Your Model* (Google DeepMind, MIT",
        "license): rooflines, arithmetic intensity, collectives, sharding, transformer and inference",
        "arithmetic. Chapters 1-8 (TPUs) are the in-distribution half; chapter 12 (GPUs) is the held-out",
        "half: the same method on different hardware. Every item names its chapter, section and",
        "provenance; numeric targets were computed by the build from the book's stated inputs, and every",
        "implementation task's reference solution passed all its test cases before this export was written.",
        "",
        "| config | contents | items | dataset hash |",
        "|---|---|---|---|",
    ]
    for config, description in CONFIGS.items():
        entry = manifest["configs"][config]
        lines.append(f"| `{config}` | {description} | {entry['items']} | `{entry['dataset_hash'][:12]}` |")
    lines += ["", "Items per chapter: " + ", ".join(f"ch{c} {n}" for c, n in sorted(chapters.items())), "",
              "Load with `datasets.load_dataset(<this folder>, \"<config>\", split=\"train\")`.", ""]
    return "\n".join(lines)


def export(session: Session, out_dir: Path, variants: dict[str, list[Any]] | None = None) -> dict[str, Any]:
    """Write every config of the store's items to `out_dir` (replaced atomically); return the manifest.
    `variants` ({parent id: [Variant]}, as the variant gate rendered them) fill the *_variants configs."""
    from datasets import Dataset
    from datasets.utils.logging import disable_progress_bar

    from scaling_book.grading.prompt import SYSTEM_PROMPT

    disable_progress_bar()

    items = all_items(session)
    records = [(item, item_record(item, SYSTEM_PROMPT)) for item in items]
    variant_records = [(v.spec, variant_record(v, SYSTEM_PROMPT))
                       for parent in sorted(variants or {}) for v in (variants or {})[parent]]
    features = _features()
    manifest: dict[str, Any] = {"configs": {}}
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    # mkdtemp makes the folder 0700: only its owner reads the export (the store is 0600 likewise)
    staging = Path(tempfile.mkdtemp(prefix=".export-", dir=out_dir.parent))
    try:
        for config in CONFIGS:
            members = [(item, row) for item, row in records
                       if config_members(config, item.split, "code" if item.grader == "code" else "qa")]
            members += [(spec, row) for spec, row in variant_records if variant_config_members(config, spec.split)]
            rows = [row for _, row in members]
            (staging / config).mkdir()
            table = (Dataset.from_list(rows, features=features) if rows
                     else Dataset.from_dict({name: [] for name in features}, features=features))
            table.to_parquet(str(staging / config / "items.parquet"))
            manifest["configs"][config] = {
                "items": len(rows),
                "dataset_hash": dataset_hash([row["info"]["content_hash"] for _, row in members]),
            }
        manifest["hidden_tests"] = _write_hidden_tests(staging, items)
        (staging / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        (staging / "README.md").write_text(_card(manifest, items))
        if out_dir.exists():
            shutil.rmtree(out_dir)
        staging.rename(out_dir)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return manifest


#: The key file of the hidden code test cases, relative to the export folder (mode 0600, in a 0700 folder).
HIDDEN_TESTS_FILE = "keys/hidden_tests.json"
#: The `info` key under which `load_hidden_tests`'s caller attaches an item's hidden cases in memory.
HIDDEN_INFO_KEY = "code_hidden_tests"


def _write_hidden_tests(staging: Path, items: list[Item]) -> dict[str, Any]:
    """Write every code item's hidden test cases to `HIDDEN_TESTS_FILE` (owner-only: a submission
    running under another uid cannot read it); return the manifest entry (path, items, cases, sha256)."""
    keys = {item.id: [{"args": json.loads(t.args_json), "expected": json.loads(t.expected_json)}
                      for t in item.code_task.tests if t.hidden]
            for item in items if item.code_task is not None}
    keys = {item_id: cases for item_id, cases in keys.items() if cases}
    blob = (json.dumps(keys, sort_keys=True) + "\n").encode()
    folder = staging / Path(HIDDEN_TESTS_FILE).parent
    folder.mkdir(mode=0o700)
    os.chmod(folder, 0o700)
    fd = os.open(staging / HIDDEN_TESTS_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(blob)
    return {"path": HIDDEN_TESTS_FILE, "items": len(keys), "cases": sum(map(len, keys.values())),
            "sha256": hashlib.sha256(blob).hexdigest()}


def load_hidden_tests(out_dir: Path) -> dict[str, list[dict]]:
    """item id -> hidden test cases (``{"args": [...], "expected": ...}``) of the export at `out_dir`,
    checked against the manifest's sha256. An export without hidden tests gives {}. Raises
    `StaleExport` when the manifest lists a key file that is missing or differs."""
    entry = read_manifest(out_dir).get("hidden_tests")
    if not entry or not entry.get("items"):
        return {}
    path = Path(out_dir) / entry["path"]
    try:
        blob = path.read_bytes()
    except OSError as exc:
        raise StaleExport(f"{path}: the export's hidden test cases cannot be read ({exc}); rebuild") from None
    if hashlib.sha256(blob).hexdigest() != entry["sha256"]:
        raise StaleExport(f"{path}: hidden test cases do not match the manifest's sha256; rebuild")
    return json.loads(blob)


def with_hidden_tests(info: dict[str, Any], hidden: dict[str, list[dict]]) -> dict[str, Any]:
    """A copy of a row's `info` carrying its hidden cases (JSON, under `HIDDEN_INFO_KEY`) for the
    code grader; in memory only, never written back to an export."""
    cases = hidden.get(info.get("item_id", ""))
    return {**info, HIDDEN_INFO_KEY: json.dumps(cases)} if cases else dict(info)


def read_manifest(out_dir: Path) -> dict[str, Any]:
    """The manifest of an export folder (raises FileNotFoundError if there is no export)."""
    return json.loads((Path(out_dir) / "manifest.json").read_text())


class StaleExport(Exception):
    """The rows loaded for a config do not match the export's manifest (a stale cache or a half-copied export)."""


def load_config(out_dir: Path, config: str):
    """The rows of `config` in the export at `out_dir`, as a `datasets.Dataset`, verified fresh.

    Reads the config's parquet files directly into memory: `datasets.load_dataset` caches a local
    folder under its base name, so after a rebuild, or with two exports both named `export`, it can
    serve another build's rows. The rows' dataset hash is checked against `manifest.json`.
    Raises FileNotFoundError without an export and `StaleExport` on a mismatch.
    """
    from datasets import Dataset

    return Dataset.from_list(read_config_rows(out_dir, config), features=_features())


def read_config_rows(out_dir: Path, config: str, columns: list[str] | None = None) -> list[dict[str, Any]]:
    """The rows of `config` in the export at `out_dir` as plain dicts, read with pyarrow (no
    `datasets`, no pandas), verified against `manifest.json` like `load_config`. `columns` keeps
    only those top-level columns (`info` is always read: the check needs its `content_hash`).
    Raises FileNotFoundError without an export and `StaleExport` on a mismatch."""
    import pyarrow.parquet as pq

    expected = read_manifest(out_dir)["configs"][config]["dataset_hash"]
    wanted = None if columns is None else list(dict.fromkeys([*columns, "info"]))
    files = sorted((Path(out_dir) / config).glob("*.parquet"))
    rows = [row for file in files for row in pq.read_table(file, columns=wanted).to_pylist()]
    found = dataset_hash([row["info"]["content_hash"] for row in rows])
    if found != expected:
        raise StaleExport(f"config {config!r} at {out_dir}: rows hash {found[:12]}, manifest {expected[:12]}")
    return rows
