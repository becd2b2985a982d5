"""The text the policy reads next turn: short, specific, pointing at its own lines.

make_feedback(result, kernel_code) -> str of at most ~40 lines: the verdict,
the error with the traceback trimmed to frames in the candidate's file
(line numbers and the source lines themselves), mismatch statistics, the
speedup, coverage and the top kernels by time.
"""

from __future__ import annotations

from typing import Any

MAX_LINES = 40
MAX_CANDIDATE_FRAMES = 4
MAX_MESSAGE_LINES = 8
MAX_KERNEL_ROWS = 5


def _clip(text: str, n: int) -> str:
    text = text.replace("\t", " ")
    return text if len(text) <= n else text[:n - 3] + "..."


def _source_line(kernel_code: str, line: int) -> str:
    lines = kernel_code.splitlines()
    if 1 <= line <= len(lines):
        return lines[line - 1].strip()
    return ""


def _error_lines(result: dict, kernel_code: str) -> list[str]:
    err = result.get("error") or {}
    out = [f"Error during {err.get('phase') or 'evaluation'}: {err.get('type') or 'Error'}"]
    msg_lines = [ln for ln in str(err.get("message") or "").splitlines() if ln.strip()]
    out += ["  " + _clip(ln.strip(), 160) for ln in msg_lines[:MAX_MESSAGE_LINES]]
    if len(msg_lines) > MAX_MESSAGE_LINES:
        out.append(f"  ... ({len(msg_lines) - MAX_MESSAGE_LINES} more lines)")
    frames = [f for f in err.get("frames") or [] if f.get("candidate")]
    if frames:
        out.append("Where, in your code (kernel.py):")
        for f in frames[-MAX_CANDIDATE_FRAMES:]:
            line = int(f.get("line") or 0)
            src = _source_line(kernel_code, line) or str(f.get("source") or "")
            out.append(f"  line {line}, in {f.get('name') or '?'}: {_clip(src, 120)}")
    return out


def _mismatch_lines(m: dict) -> list[str]:
    parts = []
    if m.get("max_abs_err") is not None:
        parts.append(f"max abs err {m['max_abs_err']:.3g}")
    if m.get("max_rel_err") is not None:
        parts.append(f"max rel err {m['max_rel_err']:.3g}")
    if m.get("bad_fraction") is not None:
        parts.append(f"{100.0 * m['bad_fraction']:.2f}% of elements wrong")
    return [f"Mismatch details: {', '.join(parts)}"] if parts else []


def _perf_lines(result: dict) -> list[str]:
    out = []
    if result.get("speedup") is not None:
        out.append(f"Speedup: {result['speedup']:.3f}x (your kernel {result['kernel_runtime']:.4f} ms"
                   f", reference {result['reference_runtime']:.4f} ms, median)")
    prof = result.get("profile")
    if isinstance(prof, dict):
        out.append(f"Profile: {prof.get('summary', '')}")
        rows = prof.get("kernels") or []
        if rows:
            out.append("Top kernels by time:")
            for r in rows[:MAX_KERNEL_ROWS]:
                kind = "yours" if r.get("custom") else \
                    "yours, not counted: its results did not reach the output" \
                    if r.get("unreached") else "library"
                out.append(f"  {_clip(str(r.get('name')), 70)} ({kind}): "
                           f"{float(r.get('device_us', 0.0)):.2f} us, {r.get('calls', 0)} calls")
    return out


def make_feedback(result: dict, kernel_code: str) -> str:
    verdict = result.get("verdict", "?")
    code = result.get("error_code")
    lines = [f"Verdict: {verdict}" + (f" ({code})" if code else "")]
    if verdict == "pass":
        lines.append("Your kernel is correct on every trial.")
    elif verdict == "hacked":
        lines.append(f"Hacking check failed: {', '.join(result.get('hack_reasons') or [])}")
        lines.append("  " + _clip(str(result.get("error_message") or ""), 300))
    elif verdict == "problem_error":
        lines.append("The problem's reference failed, not your kernel: this attempt is not "
                     "scored.")
        lines += _error_lines(result, kernel_code)
    elif verdict == "mismatch":
        lines.append("  " + _clip(str(result.get("error_message") or ""), 300))
        if isinstance(result.get("mismatch"), dict):
            lines += _mismatch_lines(result["mismatch"])
    elif result.get("error"):
        lines += _error_lines(result, kernel_code)
    lines += _perf_lines(result)
    for w in (result.get("warnings") or [])[:2]:
        lines.append(f"Note: {_clip(str(w), 200)}")
    if len(lines) > MAX_LINES:
        lines = lines[:MAX_LINES - 1] + ["..."]
    return "\n".join(lines)
