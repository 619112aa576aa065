"""SmolLM2-135M-Instruct (Q4_1 GGUF from PyPI, ember.models.text.smollm2) as a chat model: decode and prefill speed,
ember vs llama.cpp (llama-cpp-python) on the same file and the same thread count in the same run (greedy, float32
KV cache on both sides; --sampling: temperature 0.8, top-p 0.9), and the time to first token of a second chat turn
against the first (the KV cache kept: only the new turn is prefilled).

    python bench/bench_chat.py [--tokens 32] [--repeats 3] [--threads 2] [--sampling] [--json]

Each engine runs `--repeats` times, interleaved, and the best run is reported; ratios are ember's best over
llama.cpp's best in this run. The chat prompt is the rendered conversation (its chat template), ~60 tokens.
"""
from __future__ import annotations

import ember
from ember.models.common.chat import ChatEngine, ChatSession
from ember.models.text import load_text_model
from ember.models.text.smollm2 import fetch_smollm2
from llamacpp_race import best_runs, llamacpp_model, parse_args, print_report, speed_report

SYSTEM = "You are a helpful assistant who answers in a few sentences."
TURNS = ["Tell me about the history of Paris, the capital of France.", "And what about its most famous museum?"]


def turns_ttft(engine, n):
    """(first turn's time to first token, second turn's, tokens prefilled in each) in a fresh session."""
    engine.prefix.reset()
    chat = ChatSession(engine, system=SYSTEM)
    out = []
    for q in TURNS:
        reply = chat.send(q, max_tokens=n)
        reply.text()
        out.append((chat.last.ttft_s, chat.last.prefill_tokens, chat.last.prompt_tokens))
    return out


def main():
    a = parse_args(__doc__, tokens=32)
    from ember.backends.cpu_matmul import native_kernels
    path = fetch_smollm2(progress=True)
    model, tok = load_text_model(path)
    if native_kernels() is not None:
        native_kernels().set_threads(a.threads)
    engine = ChatEngine(model, tok)
    prompt = engine.prompt_ids([{"role": "system", "content": SYSTEM}, {"role": "user", "content": TURNS[0]}])
    llm = llamacpp_model(path, 1024, a.threads)
    e, l = best_runs(model, llm, prompt, a.tokens, a.repeats, a.sampling)
    with ember.no_grad():
        ttft = [turns_ttft(engine, 8) for _ in range(a.repeats)]
    first = min(t[0][0] for t in ttft)
    second = min(t[1][0] for t in ttft)
    agree = next((i for i, (x, y) in enumerate(zip(e["tokens"], l["tokens"])) if x != y), len(e["tokens"]))
    res = {**speed_report(path, prompt, a.tokens, a.threads, e, l), "sampling": a.sampling,
           **({} if a.sampling else {"greedy_tokens_agree": agree}),
           "turn1_ttft_ms": round(first * 1000, 1), "turn2_ttft_ms": round(second * 1000, 1),
           "turn2_over_turn1": round(second / first, 3),
           "prefilled": [[t[1], t[2]] for t in ttft[0]]}
    print_report(res, a.json)


if __name__ == "__main__":
    main()
