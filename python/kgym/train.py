"""kgym train: a small single-node trainer for `kgym rollout` rows and
`kgym collect` chats (docs/training.md).

RL (default): reads rollout rows (docs/agent.md, "Rows"), tokenizes each
turn's chat and reply with the model's tokenizer (or takes the reply's
token ids from the row with --token-ids rows), recomputes the reply's token
logprobs under the current policy, drops sequences that mismatch
rejection sampling (MRS, libkgym's kg_rl_mrs through kgym.rl) rejects when
the rows carry rollout logprobs, drops turns PRS did not keep or whose
loss_mask is false, and takes clipped-ratio policy-gradient steps weighted
by the rows' TRLOO or GRPO advantages (AdamW, gradient clipping).

SFT (--sft FILE): fine-tunes on chats, the loss on the assistant turns'
tokens only, with a held-out split whose loss is reported.

Several GPUs: run under torchrun; each rank takes every world-th row and
DistributedDataParallel averages the gradients. Checkpoints go to --out
(step-N/ with the model, tokenizer, optimizer and trainer state); --resume
continues from the latest one.

Bad input (a line that is not JSON, a missing or mistyped field, no rows)
ends the run with one line on stderr, `kgym train: FILE line N: ...`, and
exit status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Optional

PROG = "kgym train"


class TrainError(Exception):
    """Bad usage or input: one line, exit 2."""


def log(msg: str) -> None:
    if _rank() == 0:
        print(f"{PROG}: {msg}", file=sys.stderr, flush=True)


def _rank() -> int:
    return int(os.environ.get("RANK", "0"))


def _world() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


# ---- input ---------------------------------------------------------------


def read_jsonl(path: str) -> list[tuple[int, dict]]:
    """(line number, object) of each non-blank line; TrainError on a line
    that is not a JSON object, or on a file without any."""
    try:
        f = open(path, encoding="utf-8")
    except OSError as e:
        raise TrainError(f"{path}: {e.strerror}") from None
    out = []
    with f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise TrainError(f"{path} line {n}: not JSON ({e.msg}, column {e.colno})") from None
            if not isinstance(obj, dict):
                raise TrainError(f"{path} line {n}: not a JSON object")
            out.append((n, obj))
    if not out:
        raise TrainError(f"{path}: no rows")
    return out


def _need(obj: dict, key: str, types: Any, where: str, nullable: bool = False) -> Any:
    if key not in obj:
        raise TrainError(f'{where}: missing field "{key}"')
    v = obj[key]
    if v is None and nullable:
        return None
    if isinstance(v, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        raise TrainError(f'{where}: field "{key}" has the wrong type (bool)')
    if not isinstance(v, types):
        raise TrainError(f'{where}: field "{key}" has the wrong type ({type(v).__name__})')
    return v


def _messages(obj: dict, where: str) -> list[dict]:
    msgs = _need(obj, "messages", list, where)
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) \
                or not isinstance(m.get("content"), str):
            raise TrainError(f'{where}: field "messages[{i}]" is not a {{role, content}} '
                             "message with string values")
    return msgs


@dataclass
class Turn:
    """One rollout row, as the trainer uses it."""
    where: str
    problem: str
    sample: int
    turn: int
    messages: list
    reply: Optional[str]
    finish_reason: Optional[str]
    token_ids: Optional[list]
    logprobs: Optional[list]
    valid: bool
    reward: Optional[float]
    advantage: dict  # estimator -> value or None
    keep: bool
    loss_mask: bool


def read_rollout(path: str) -> list[Turn]:
    turns = []
    for n, r in read_jsonl(path):
        where = f"{path} line {n}"
        schema = _need(r, "schema", str, where)
        if not schema.startswith("kgym.rollout/"):
            raise TrainError(f'{where}: schema "{schema}" is not a kgym rollout row')
        num = (int, float)
        t = Turn(
            where=where,
            problem=_need(r, "problem", str, where),
            sample=_need(r, "sample", int, where),
            turn=_need(r, "turn", int, where),
            messages=_messages(r, where),
            reply=_need(r, "reply", str, where, nullable=True),
            finish_reason=r.get("finish_reason") if isinstance(r.get("finish_reason"), str) else None,
            token_ids=_need(r, "token_ids", list, where, nullable=True) if "token_ids" in r else None,
            logprobs=_need(r, "logprobs", list, where, nullable=True) if "logprobs" in r else None,
            valid=_need(r, "valid", bool, where),
            reward=_need(r, "reward", num, where, nullable=True),
            advantage={"trloo": _need(r, "advantage_trloo", num, where, nullable=True),
                       "grpo": _need(r, "advantage_grpo", num, where, nullable=True)},
            keep=_need(r, "keep", bool, where),
            loss_mask=_need(r, "loss_mask", bool, where),
        )
        if t.token_ids is not None and not all(isinstance(x, int) and not isinstance(x, bool)
                                               and x >= 0 for x in t.token_ids):
            raise TrainError(f'{where}: field "token_ids" must hold integers >= 0')
        if t.logprobs is not None:
            if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in t.logprobs):
                raise TrainError(f'{where}: field "logprobs" must hold numbers')
            if t.token_ids is not None and len(t.logprobs) != len(t.token_ids):
                raise TrainError(f'{where}: "logprobs" has {len(t.logprobs)} entries, '
                                 f'"token_ids" {len(t.token_ids)}')
        turns.append(t)
    return turns


def recompute_advantages(turns: list[Turn], estimator: str, gamma: float) -> None:
    """Rewrites each turn's advantage[estimator] from the rows' rewards
    through libkgym (kgym.rl.returns and advantages): per problem, a
    samples x turns matrix (a missing row is an invalid turn)."""
    from kgym import rl

    by_prob: dict[str, list[Turn]] = {}
    for t in turns:
        by_prob.setdefault(t.problem, []).append(t)
    for prob, ts in by_prob.items():
        samples = sorted({t.sample for t in ts})
        T = max(t.turn for t in ts) + 1
        si = {s: i for i, s in enumerate(samples)}
        R: list[list] = [[None] * T for _ in samples]
        for t in ts:
            R[si[t.sample]][t.turn] = t.reward if t.valid else None
        try:
            G = rl.returns(R, gamma=gamma)
            A = rl.advantages(G, estimator=estimator)
        except ValueError as e:
            raise TrainError(f"problem {prob}: {e}") from None
        for t in ts:
            t.advantage[estimator] = A[si[t.sample]][t.turn]


def read_sft(path: str) -> list[tuple[str, list[dict]]]:
    out = []
    for n, r in read_jsonl(path):
        where = f"{path} line {n}"
        msgs = _messages(r, where)
        if not any(m["role"] == "assistant" for m in msgs):
            raise TrainError(f"{where}: no assistant message")
        out.append((where, msgs))
    return out


# ---- tokenization ----------------------------------------------------------


def _render(tok, messages: list[dict], add_generation_prompt: bool) -> list[int]:
    """The chat's token ids: the tokenizer's chat template when it has one,
    else a plain "<|role|>\\ncontent\\n" rendering."""
    if getattr(tok, "chat_template", None):
        ids = tok.apply_chat_template(messages, tokenize=True,
                                      add_generation_prompt=add_generation_prompt)
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return list(ids)
    text = "".join(f"<|{m['role']}|>\n{m['content']}\n" for m in messages)
    if add_generation_prompt:
        text += "<|assistant|>\n"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    if tok.bos_token_id is not None:
        ids = [tok.bos_token_id] + ids
    return ids


def encode_turn(tok, t: Turn, use_row_ids: bool, max_len: int) -> Optional[dict]:
    """prompt + reply ids and the reply's span; rollout logprobs aligned to
    the reply's tokens when the ids are the row's (else None: retokenized
    text has no rollout logprobs). None when the row has no reply."""
    if t.reply is None:
        return None
    prompt = _render(tok, t.messages, add_generation_prompt=True)
    if use_row_ids:
        if t.token_ids is None:
            raise TrainError(f'{t.where}: --token-ids rows but the row has no "token_ids"')
        resp = list(t.token_ids)
        old = list(t.logprobs) if t.logprobs is not None else None
    else:
        resp = tok(t.reply, add_special_tokens=False)["input_ids"]
        if t.finish_reason == "stop" and tok.eos_token_id is not None:
            resp = resp + [tok.eos_token_id]
        old = None
    if not resp:
        return None
    if len(resp) >= max_len:
        resp = resp[:max_len - 1]
        old = old[:max_len - 1] if old is not None else None
    keep_prompt = max_len - len(resp)
    prompt = prompt[-keep_prompt:]
    if not prompt:
        raise TrainError(f"{t.where}: empty prompt")
    return {"ids": prompt + resp, "start": len(prompt), "rollout_lp": old}


def encode_chat(tok, msgs: list[dict], max_len: int) -> dict:
    """A chat's ids and the mask of the tokens of its assistant messages:
    each assistant message's tokens are those the rendering of the chat up
    to it adds to the rendering of the chat before it (with the generation
    prompt), so the mask is exact for any template that renders prefixes
    as prefixes (checked)."""
    ids: list[int] = []
    mask: list[int] = []
    for k, m in enumerate(msgs):
        if m["role"] != "assistant":
            continue
        before = _render(tok, msgs[:k], add_generation_prompt=True)
        upto = _render(tok, msgs[:k + 1], add_generation_prompt=False)
        if upto[:len(before)] != before or before[:len(ids)] != ids:
            raise TrainError("the tokenizer's chat template does not render a chat's prefix "
                             "as a prefix; the assistant tokens cannot be located")
        mask += [0] * (len(before) - len(ids))
        ids = list(before)
        add = upto[len(before):]
        ids += add
        mask += [1] * len(add)
    if tok.eos_token_id is not None and not getattr(tok, "chat_template", None):
        ids.append(tok.eos_token_id)
        mask.append(1)
    ids, mask = ids[:max_len], mask[:max_len]
    return {"ids": ids, "mask": mask}


# ---- the loss ------------------------------------------------------------


def token_logprobs(model, ids, attn):
    """logprob of ids[:, 1:] given the prefix: (B, L-1)."""
    import torch

    logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1]
    if logits.dtype in (torch.bfloat16, torch.float16):
        logits = logits.float()
    lp = torch.log_softmax(logits, dim=-1)
    return lp.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)


def pg_loss(lp, old_lp, adv, mask, clip_lo: float, clip_hi: float, denom):
    """The clipped policy-gradient loss, summed over masked tokens and
    divided by denom (the batch's token count, over all ranks):
    -min(r·A, clip(r, 1-clip_lo, 1+clip_hi)·A), r = exp(lp - old_lp).
    lp, old_lp, mask: (B, L); adv: (B,). Returns (loss, clipped fraction)."""
    import torch

    ratio = torch.exp(lp - old_lp)
    a = adv.unsqueeze(-1)
    un = ratio * a
    cl = torch.clamp(ratio, 1 - clip_lo, 1 + clip_hi) * a
    per = -torch.minimum(un, cl)
    m = mask.to(per.dtype)
    loss = (per * m).sum() / denom
    with torch.no_grad():
        frac = ((cl < un).to(per.dtype) * m).sum() / m.sum().clamp(min=1)
    return loss, frac


def sft_loss(lp, mask, denom):
    m = mask.to(lp.dtype)
    return -(lp * m).sum() / denom


# ---- batching ------------------------------------------------------------


def pad_batch(items: list[dict], pad_id: int, device):
    import torch

    L = max(len(it["ids"]) for it in items)
    B = len(items)
    ids = torch.full((B, L), pad_id, dtype=torch.long)
    attn = torch.zeros((B, L), dtype=torch.long)
    mask = torch.zeros((B, L - 1), dtype=torch.bool)  # over the targets ids[:, 1:]
    for i, it in enumerate(items):
        n = len(it["ids"])
        ids[i, :n] = torch.tensor(it["ids"])
        attn[i, :n] = 1
        if "start" in it:
            mask[i, it["start"] - 1:n - 1] = True
        else:
            mm = torch.tensor(it["mask"][1:n], dtype=torch.bool)
            mask[i, :n - 1] = mm
    return ids.to(device), attn.to(device), mask.to(device)


@dataclass
class Counts:
    rows: int = 0
    no_reply: int = 0
    invalid: int = 0
    not_kept: int = 0
    masked: int = 0
    zero_adv: int = 0
    used: int = 0
    extra: dict = field(default_factory=dict)


def select_turns(turns: list[Turn], estimator: str, use_prs: bool) -> tuple[list[Turn], Counts]:
    """The turns that can carry a gradient: a reply, valid, kept by PRS
    (unless --no-prs), loss_mask true, an advantage."""
    c = Counts(rows=len(turns))
    out = []
    for t in turns:
        if t.reply is None:
            c.no_reply += 1
        elif not t.valid or t.advantage.get(estimator) is None:
            c.invalid += 1
        elif use_prs and not t.keep:
            c.not_kept += 1
        elif not t.loss_mask:
            c.masked += 1
        else:
            out.append(t)
    c.used = len(out)
    return out, c


def mrs_keep(train_lp: list[list[float]], rollout_lp: list[list[float]], lo, hi, veto) -> list[bool]:
    """libkgym's MRS (kg_rl_mrs through kgym.rl): keep flags per sequence."""
    from kgym import rl

    if not train_lp:
        return []
    try:
        return rl.mrs(train_lp, rollout_lp, lo=lo, hi=hi, veto=veto)["keep"]
    except ValueError as e:
        raise TrainError(f"mrs: {e}") from None


# ---- checkpoints ---------------------------------------------------------


def latest_checkpoint(out: str) -> Optional[str]:
    best = None
    if os.path.isdir(out):
        for name in os.listdir(out):
            m = re.fullmatch(r"step-(\d+)", name)
            if m and os.path.exists(os.path.join(out, name, "trainer.json")):
                if best is None or int(m.group(1)) > best[0]:
                    best = (int(m.group(1)), os.path.join(out, name))
    return best[1] if best else None


def save_checkpoint(out: str, step: int, model, tok, opt, state: dict) -> str:
    import torch

    path = os.path.join(out, f"step-{step}")
    tmp = path + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    raw = model.module if hasattr(model, "module") else model
    raw.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    torch.save(opt.state_dict(), os.path.join(tmp, "optimizer.pt"))
    with open(os.path.join(tmp, "trainer.json"), "w") as f:
        json.dump(state, f)
    shutil.rmtree(path, ignore_errors=True)
    os.rename(tmp, path)
    return path


# ---- the run ---------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=PROG, description="policy-gradient steps on kgym rollout "
                                "rows, or SFT on kgym collect chats (docs/training.md)")
    p.add_argument("rows", nargs="?", help="kgym rollout JSONL (RL)")
    p.add_argument("--sft", metavar="FILE", help="kgym collect JSONL: supervised fine-tuning")
    p.add_argument("--model", required=True, help="a transformers model directory or name")
    p.add_argument("--tokenizer", help="default: --model")
    p.add_argument("--out", required=True, help="checkpoints and metrics.jsonl go here")
    p.add_argument("--resume", action="store_true", help="continue from --out's latest step-N")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=8, help="sequences per step and rank")
    p.add_argument("--ppo-epochs", type=int, default=1,
                   help="optimizer steps on each batch (old logprobs fixed at its first)")
    p.add_argument("--lr", type=float, default=1e-6)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--max-grad-norm", type=float, default=1.0)
    p.add_argument("--clip-eps", type=float, default=0.2)
    p.add_argument("--clip-eps-high", type=float, help="default: --clip-eps")
    p.add_argument("--estimator", choices=("trloo", "grpo"), default="trloo")
    p.add_argument("--advantages", choices=("rows", "recompute"), default="rows",
                   help="the rows' advantage fields, or recomputed from their rewards by libkgym")
    p.add_argument("--gamma", type=float, default=1.0, help="for --advantages recompute")
    p.add_argument("--token-ids", choices=("text", "rows"), default="text",
                   help="tokenize the reply (text) or use the row's token_ids (rows: the "
                   "policy's tokenizer must be this model's)")
    p.add_argument("--mrs", choices=("auto", "off"), default="auto",
                   help="auto: MRS wherever a sequence has rollout logprobs")
    p.add_argument("--mrs-lo", type=float, default=0.999)
    p.add_argument("--mrs-hi", type=float, default=1.001)
    p.add_argument("--mrs-veto", type=float, default=1e-4)
    p.add_argument("--no-prs", action="store_true", help="ignore the rows' PRS keep flags")
    p.add_argument("--val-frac", type=float, default=0.1, help="SFT: held-out share")
    p.add_argument("--eval-every", type=int, default=0, help="SFT: held-out loss every N steps")
    p.add_argument("--max-len", type=int, default=4096)
    p.add_argument("--save-every", type=int, default=0, help="0: only at the end")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default=None, help="default: cuda when present, else cpu")
    p.add_argument("--dtype", choices=("float32", "bfloat16", "float64"), default="float32")
    a = p.parse_args(argv)
    if (a.rows is None) == (a.sft is None):
        raise TrainError("give a rollout file or --sft FILE (one of them)")
    for k in ("steps", "batch_size", "ppo_epochs", "max_len"):
        if getattr(a, k) < 1:
            raise TrainError(f"--{k.replace('_', '-')} must be >= 1")
    if not 0 <= a.val_frac < 1:
        raise TrainError("--val-frac must be in [0, 1)")
    if a.clip_eps_high is None:
        a.clip_eps_high = a.clip_eps
    return a


def _setup_dist(device_arg: Optional[str]):
    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available() and (device_arg is None or device_arg.startswith("cuda"))
    if _world() > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if cuda else "gloo")
    if cuda:
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        return torch.device("cuda", local)
    return torch.device(device_arg or "cpu")


def _all_sum(x: float, device) -> float:
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return x
    t = torch.tensor([x], dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return float(t.item())


def _barrier() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def equal_reward_groups(turns: list[Turn]) -> tuple[int, int]:
    """(groups, groups whose scored rewards are all equal). A group is one
    problem's samples at one turn, what the advantages compare: equal
    rewards there give every sample an advantage of 0 (no gradient) when
    the turns after are equal too, as they are with one turn."""
    groups: dict[tuple[str, int], set] = {}
    for t in turns:
        if t.valid and t.reward is not None:
            groups.setdefault((t.problem, t.turn), set()).add(float(t.reward))
    return len(groups), sum(1 for r in groups.values() if len(r) == 1)


def _load(what: str, fn, name: str):
    """fn(name), or one TrainError line for a model or tokenizer that does
    not load (no such folder, not on the hub offline, a broken config)."""
    try:
        return fn(name)
    except Exception as e:  # transformers raises OSError, ValueError, ...
        first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), "")
        raise TrainError(f"cannot load the {what} {name!r}: {type(e).__name__}: "
                         f"{first[:300]}") from None


def run(a: argparse.Namespace) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()

    device = _setup_dist(a.device)
    rank, world = _rank(), _world()
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float64": torch.float64}[a.dtype]

    # input first: bad input fails before a model is loaded
    if a.sft:
        chats = read_sft(a.sft)
    else:
        turns = read_rollout(a.rows)
        if a.advantages == "recompute":
            recompute_advantages(turns, a.estimator, a.gamma)
        used, counts = select_turns(turns, a.estimator, not a.no_prs)

    ckpt = latest_checkpoint(a.out) if a.resume else None
    src = ckpt or a.model
    tok = _load("tokenizer", AutoTokenizer.from_pretrained, ckpt or a.tokenizer or a.model)
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)
    torch.manual_seed(a.seed)
    model = _load("model", lambda n: AutoModelForCausalLM.from_pretrained(n, dtype=dtype),
                  src).to(device)
    # RL: dropout off, so the logprobs are the policy's (the old ones and the
    # ratio's are one function); SFT trains with the model's dropout
    model.train(bool(a.sft))
    vocab = model.get_input_embeddings().num_embeddings

    if a.sft:
        data = [encode_chat(tok, m, a.max_len) for _, m in chats]
        data = [d for d in data if sum(d["mask"][1:]) > 0]
        if not data:
            raise TrainError(f"{a.sft}: no chat has assistant tokens within --max-len")
        order = list(range(len(data)))
        random.Random(a.seed).shuffle(order)
        nval = int(round(a.val_frac * len(data))) if len(data) > 1 else 0
        if a.val_frac > 0 and len(data) > 1:
            nval = max(1, nval)
        val = [data[i] for i in order[:nval]]
        train = [data[i] for i in order[nval:]]
        log(f"{len(data)} chats: {len(train)} train, {len(val)} held out")
    else:
        log(f"{counts.rows} rows: {counts.used} used; {counts.no_reply} without reply, "
            f"{counts.invalid} not scored, {counts.not_kept} dropped by PRS, "
            f"{counts.masked} loss_mask false")
        ngroups, equal = equal_reward_groups(turns)
        zero = sum(1 for t in used if t.advantage[a.estimator] == 0)
        log(f"{ngroups} groups (problem, turn): {equal} with all-equal rewards; "
            f"{zero} of {len(used)} used rows have advantage 0 (no gradient from them)")
        train = []
        for t in used:
            e = encode_turn(tok, t, a.token_ids == "rows", a.max_len)
            if e is None:
                continue
            if max(e["ids"]) >= vocab:
                raise TrainError(f"{t.where}: token id {max(e['ids'])} is outside the "
                                 f"model's vocabulary ({vocab})")
            e["adv"] = float(t.advantage[a.estimator])
            train.append(e)
        if not train:
            raise TrainError(f"{a.rows}: no row can carry a gradient (see the counts above)")
        val = []
    train = train[rank::world] if world > 1 else train
    if not train:
        raise TrainError(f"rank {rank} has no sequence: fewer sequences than ranks")

    raw = model
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.AdamW(raw.parameters(), lr=a.lr, weight_decay=a.weight_decay)
    step = 0
    if ckpt:
        with open(os.path.join(ckpt, "trainer.json")) as f:
            st = json.load(f)
        step = st["step"]
        opt.load_state_dict(torch.load(os.path.join(ckpt, "optimizer.pt"), map_location=device))
        log(f"resumed from {ckpt} at step {step}")
    os.makedirs(a.out, exist_ok=True)
    mpath = os.path.join(a.out, "metrics.jsonl")

    def batch_of(k: int) -> list[dict]:
        """The k-th batch: consecutive slices of a per-epoch shuffle, so a
        resumed run sees the batches an uninterrupted one would."""
        n = len(train)
        out = []
        pos = k * a.batch_size
        while len(out) < min(a.batch_size, n):
            epoch, i = divmod(pos, n)
            perm = list(range(n))
            random.Random(a.seed * 1000003 + epoch).shuffle(perm)
            out.append(train[perm[i]])
            pos += 1
        return out

    def val_loss() -> Optional[float]:
        if not val:
            return None
        model.eval()
        tot, ntok = 0.0, 0
        with torch.no_grad():
            for i in range(0, len(val), a.batch_size):
                ids, attn, mask = pad_batch(val[i:i + a.batch_size], pad_id, device)
                lp = token_logprobs(raw, ids, attn)
                tot += float(-(lp * mask).sum())
                ntok += int(mask.sum())
        model.train(bool(a.sft))
        return tot / max(ntok, 1)

    last: dict = {}
    # a step is one optimizer step; a batch gets E of them (--ppo-epochs),
    # its old logprobs (and MRS mask) fixed at its first: a checkpoint in
    # the middle of a batch keeps them (pending-RANK.pt) for the resume
    E = 1 if a.sft else a.ppo_epochs
    k_batch, first_epoch = divmod(step, E)
    pending = None
    if ckpt and first_epoch:
        pf = os.path.join(ckpt, f"pending-{rank}.pt")
        if not os.path.exists(pf):
            raise TrainError(f"{ckpt}: a checkpoint inside a batch without {os.path.basename(pf)}")
        pending = torch.load(pf, map_location=device)
    while step < a.steps:
        items = batch_of(k_batch)
        ids, attn, mask = pad_batch(items, pad_id, device)
        t0 = time.time()
        extra: dict = {}
        old = None
        if pending is not None:
            old, mask, extra = pending["old"], pending["mask"], pending["extra"]
            adv = pending["adv"]
            pending = None
        elif not a.sft:
            adv = torch.tensor([it["adv"] for it in items], dtype=torch.float64 if dtype == torch.float64
                               else torch.float32, device=device)
            with torch.no_grad():
                old = token_logprobs(raw, ids, attn)
            # MRS: sequences with rollout logprobs, against the recomputed ones
            seqs = [i for i, it in enumerate(items) if it["rollout_lp"] is not None]
            dropped = 0
            if a.mrs == "auto" and seqs:
                tr = [old[i, items[i]["start"] - 1:items[i]["start"] - 1 + len(items[i]["rollout_lp"])]
                      .double().tolist() for i in seqs]
                keep = mrs_keep(tr, [items[i]["rollout_lp"] for i in seqs],
                                a.mrs_lo, a.mrs_hi, a.mrs_veto)
                for i, k in zip(seqs, keep):
                    if not k:
                        mask[i] = False
                        dropped += 1
            extra = {"mrs_checked": len(seqs) if a.mrs == "auto" else 0, "mrs_dropped": dropped}
        for epoch in range(first_epoch, E):
            if step >= a.steps:
                break
            ntok = _all_sum(float(mask.sum()), device)
            denom = max(ntok, 1.0) / world  # DDP averages over ranks
            lp = token_logprobs(model, ids, attn)
            if a.sft:
                loss = sft_loss(lp, mask, denom)
                frac = None
            else:
                loss, frac = pg_loss(lp, old, adv, mask, a.clip_eps, a.clip_eps_high, denom)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            gnorm = torch.nn.utils.clip_grad_norm_(raw.parameters(), a.max_grad_norm)
            opt.step()
            step += 1
            # every sequence with advantage 0, or no token left by the masks:
            # the step leaves the model as it was (AdamW's decay aside)
            no_grad = float(gnorm) == 0.0
            if no_grad:
                why = ("every sequence of the batch has advantage 0"
                       if not a.sft and bool((adv == 0).all()) else
                       "no token of the batch is trained (masks)" if ntok == 0 else
                       "the loss has no gradient")
                log(f"step {step}: no gradient: {why}")
            lossv = _all_sum(float(loss.detach()), device) / world  # each rank's share is x world
            last = {"step": step, "loss": lossv, "grad_norm": float(gnorm), "tokens": int(ntok),
                    "seconds": time.time() - t0, **extra}
            if no_grad:
                last["no_gradient"] = True
            if frac is not None:
                last["clip_frac"] = float(frac)
            if a.sft and a.eval_every and step % a.eval_every == 0:
                last["val_loss"] = val_loss()
            if a.sft and step == a.steps:
                last["val_loss"] = val_loss()
            if rank == 0:
                with open(mpath, "a") as f:
                    f.write(json.dumps(last) + "\n")
            log(" ".join(f"{k} {v:.6g}" if isinstance(v, float) else f"{k} {v}"
                         for k, v in last.items() if v is not None))
            if (a.save_every and step % a.save_every == 0) or step == a.steps:
                path = os.path.join(a.out, f"step-{step}")
                if rank == 0:
                    save_checkpoint(a.out, step, model, tok, opt, {"step": step, "args": vars(a)})
                _barrier()
                if epoch + 1 < E:
                    torch.save({"old": old, "mask": mask, "adv": adv, "extra": extra},
                               os.path.join(path, f"pending-{rank}.pt"))
                _barrier()
            t0 = time.time()
        k_batch += 1
        first_epoch = 0
    _barrier()
    return last


def main(argv: Optional[list[str]] = None) -> int:
    try:
        a = parse_args(sys.argv[1:] if argv is None else argv)
        last = run(a)
        if _rank() == 0:
            print(json.dumps(last))
        return 0
    except TrainError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
