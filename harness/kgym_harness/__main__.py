"""python3 -m kgym_harness --task task.json [--out result.json]

Evaluates one task with the plain launcher and prints the result object.
Exit status: 0, or 2 when the verdict is infra_error (kgym's own failure).
"""

from __future__ import annotations

import argparse
import json
import sys

from .launcher import evaluate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m kgym_harness")
    parser.add_argument("--task", required=True, help="task JSON file, or - for stdin")
    parser.add_argument("--out", help="also write the result JSON here")
    args = parser.parse_args(argv)
    try:
        if args.task == "-":
            task = json.load(sys.stdin)
        else:
            with open(args.task, encoding="utf-8") as f:
                task = json.load(f)
    except (OSError, ValueError) as e:
        print(f"kgym_harness: cannot read task: {e}", file=sys.stderr)
        return 2
    result = evaluate(task)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    return 2 if result.get("verdict") == "infra_error" else 0


if __name__ == "__main__":
    sys.exit(main())
