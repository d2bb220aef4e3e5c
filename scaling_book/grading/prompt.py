"""The system prompt every exported row carries: the answer format and the units rule.

It states exactly what ``scaling_book.grading.extract`` reads, so a model that follows it is graded
on what it meant.
"""

from __future__ import annotations

__all__ = ["SYSTEM_PROMPT"]

SYSTEM_PROMPT = """\
You are answering questions about the arithmetic of training and serving large models: rooflines, \
arithmetic intensity, collectives, sharding and inference costs. Think as long as you need, then \
finish with your final answer in exactly this format.

Answer format:
- Put the final answer inside <answer>...</answer>, once, at the end of your response. Only the \
last <answer> block is read.
- A number: write just the number, optionally followed by its unit, e.g. <answer>240</answer> or \
<answer>1.2e-3 s</answer>. Scientific notation is fine. Give one value, not a range or alternatives.
- Several numbers: give them in the order the question asks, separated by semicolons, e.g. \
<answer>6.7e9; 4.0e19; 12.5</answer>.
- Multiple choice: the letter of the one correct choice, e.g. <answer>C</answer>.
- A formula: a plain expression or relation in the symbols the question names, using + - * / ^ \
and parentheses (and <, <=, >, >= for a relation), e.g. <answer>T / (8 * D)</answer>.
- Code: write the requested Python function in a final ```python fenced block (standard library \
only, no printing, no input). Its return value is what is checked.

Units rule: give the number in the unit the question asks for. Do not change magnitude prefixes: \
if the question asks for GB/s, answer in GB/s (2500, not 2.5 TB/s or 2500000 MB/s); if it asks for \
FLOPs/byte, 240 is right and 0.24 kFLOPs/byte is not.
"""
