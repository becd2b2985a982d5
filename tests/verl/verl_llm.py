"""A stand-in for the language model only, for the cases that run verl's
agent-loop machinery: it answers verl's server-manager generate() with
the token ids of replies written in the test (replies[priority][turn],
the turn being how many calls that priority made before), and records the
decoded prompt of each call. Picklable, so a Ray actor can hold it."""
from verl.workers.rollout.replica import TokenOutput


class ScriptedLLM:
    def __init__(self, tokenizer, replies):
        self.tok, self.replies = tokenizer, replies
        self.calls: dict[int, list[str]] = {}

    async def generate(self, request_id, *, prompt_ids, sampling_params, priority=0, **kw):
        seen = self.calls.setdefault(int(priority), [])
        seen.append(self.tok.decode(prompt_ids))
        text = self.replies[int(priority)][len(seen) - 1]
        ids = self.tok(text, add_special_tokens=False)["input_ids"] + [self.tok.eos_token_id]
        return TokenOutput(token_ids=ids, log_probs=[-0.25] * len(ids), stop_reason="completed")
