"""Chat with the real SmolLM2-135M-Instruct GGUF (Q4_1 + Q8_0), references computed here:

- the rendered prompt's ids equal transformers' apply_chat_template + tokenizer on the same GGUF (transformers loads
  GGUF tokenizers) and llama-cpp-python's chat rendering (its Jinja2ChatFormatter + Llama.tokenize), on multi-turn
  conversations with and without a system message;
- with float32 activations, greedy tokens equal transformers' generate on the same GGUF dequantized, 32 tokens on
  three conversations, logits within 1e-4 relative at every step;
- with the default q8 activations, how far greedy tokens follow llama.cpp (float32 and float16 KV caches) is
  printed (not asserted: see the report);
- the KV cache across turns: the second turn prefills only its own tokens, and its reply equals a fresh engine's;
- stop strings, max_tokens, the context policy (oldest turns dropped, a clear error when even the last message
  does not fit), and structured output on 24 JSON schemas x 2 prompts validated with jsonschema."""
from __future__ import annotations

import json

import numpy as np
import pytest

import ember
from ember.models.common.chat import ChatEngine, ChatSession, ContextFullError
from ember.models.common.generate import SamplingParams
from ember.models.text import load_text_model
from json_schemas import SCHEMAS
from smollm2_assets import smollm2_gguf

CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "You are a pirate."}, {"role": "user", "content": "Tell me about the sea."}],
    [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4."},
     {"role": "user", "content": "And 3+3? Answer in words."}],
    [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Name a fruit."},
     {"role": "assistant", "content": "An apple."}, {"role": "user", "content": "Another one, please."}],
]


@pytest.fixture(scope="module")
def path():
    return smollm2_gguf()


@pytest.fixture(scope="module")
def q8(path):
    model, tok = load_text_model(path)
    return model, tok


@pytest.fixture(scope="module")
def hf(path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    folder, name = str(path.parent), path.name
    tok = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32).eval()
    return model, tok


def test_prompt_ids_equal_transformers_and_llamacpp(q8, hf, path):
    llama_cpp = pytest.importorskip("llama_cpp")
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter
    model, tok = q8
    engine = ChatEngine(model, tok)
    ll = llama_cpp.Llama(str(path), vocab_only=True, verbose=False)
    fmt = Jinja2ChatFormatter(template=ll.metadata["tokenizer.chat_template"], eos_token="<|im_end|>",
                              bos_token="<|im_start|>")
    for messages in CONVERSATIONS:
        ids = engine.prompt_ids(messages)
        want = hf[1].apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
        want = list(want["input_ids"] if hasattr(want, "keys") else want)
        assert ids == want, messages
        rendered = fmt(messages=messages)
        assert ids == ll.tokenize(rendered.prompt.encode("utf-8"), add_bos=not rendered.added_special, special=True)


def _greedy(step, first, n):
    """Greedy tokens and the logits of each step: first = logits after the prompt, step(token) -> next logits."""
    logits, toks = [first], []
    for _ in range(n):
        toks.append(int(np.argmax(logits[-1])))
        logits.append(step(toks[-1]))
    return toks, logits


def test_float32_activations_follow_transformers(path, hf):
    torch = pytest.importorskip("torch")
    model, tok = load_text_model(path, activations="float32")
    engine, (hm, _) = ChatEngine(model, tok), hf
    for messages in CONVERSATIONS[:3]:
        ids = engine.prompt_ids(messages)
        with torch.no_grad():
            out = hm(torch.tensor([ids]), use_cache=True)
            state = {"past": out.past_key_values}

            def hf_step(t):
                o = hm(torch.tensor([[t]]), past_key_values=state["past"], use_cache=True)
                state["past"] = o.past_key_values
                return o.logits[0, -1].numpy()
            want, want_logits = _greedy(hf_step, out.logits[0, -1].numpy(), 32)
        cache = model.new_cache()
        with ember.no_grad():
            first = model(ember.tensor([ids]), cache, last_only=True).numpy()[0, -1]
            got, got_logits = _greedy(lambda t: model(ember.tensor([[t]]), cache).numpy()[0, -1], first, 32)
        assert got == want, (messages, tok.decode(got), tok.decode(want))
        err = max(float(np.abs(a - b).max() / np.abs(b).max()) for a, b in zip(got_logits, want_logits))
        assert err < 1e-4, err
        print(f"float32 activations: 32 greedy tokens equal transformers', logits within {err:.1e} relative")


def test_q8_activations_against_llamacpp(q8, path):
    """The default q8 path against llama.cpp on the same file: printed, for the report (how many greedy tokens
    agree with a float32 and with llama.cpp's default float16 KV cache)."""
    llama_cpp = pytest.importorskip("llama_cpp")
    model, tok = q8
    engine = ChatEngine(model, tok)
    for kv, name in ((0, "f32"), (1, "f16")):
        ll = llama_cpp.Llama(str(path), n_ctx=512, n_threads=2, logits_all=True, verbose=False, type_k=kv, type_v=kv)
        agree = []
        for messages in CONVERSATIONS[:3]:
            ids = engine.prompt_ids(messages)
            ll.reset()
            ll.eval(ids)

            def ll_step(t):
                ll.eval([t])
                return np.asarray(ll.scores[ll.n_tokens - 1]).copy()
            want, _ = _greedy(ll_step, np.asarray(ll.scores[ll.n_tokens - 1]).copy(), 32)
            cache = model.new_cache()
            with ember.no_grad():
                first = model(ember.tensor([ids]), cache, last_only=True).numpy()[0, -1]
                got, _ = _greedy(lambda t: model(ember.tensor([[t]]), cache).numpy()[0, -1], first, 32)
            agree.append(next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), 32))
        print(f"q8 activations vs llama.cpp ({name} KV cache): greedy tokens agree for {agree} of 32")
        assert min(agree) >= 0


def _second_turn(model, tok):
    chat = ChatSession(ChatEngine(model, tok), system="Answer briefly.")
    first = chat.send("What is the capital of France?", max_tokens=24)
    first.text()
    r1 = chat.last
    second = chat.send("And of Germany?", max_tokens=24)
    second.text()
    r2 = chat.last
    # each greedy token of the second reply against the logits of one fresh forward over the prompt and that reply
    ids = chat.engine.prompt_ids(chat.messages[:-1]) + list(r2.tokens)
    assert len(ids) == r2.prompt_tokens + len(r2.tokens)
    with ember.no_grad():
        logits = model(ember.tensor([ids])).logits.numpy()[0, r2.prompt_tokens - 1:-1]   # (reply, vocab)
    return r1, r2, logits.max(-1) - logits[np.arange(len(r2.tokens)), r2.tokens]


@pytest.mark.parametrize("activations", ["q8", "float32"])
def test_second_turn_prefills_only_the_new_tokens(q8, path, activations):
    model, tok = q8 if activations == "q8" else load_text_model(path, activations="float32")
    r1, r2, gaps = _second_turn(model, tok)
    assert r1.cached_tokens == 0 and r1.prefill_tokens == r1.prompt_tokens
    # the cache held the first prompt and the reply it generated; the second prompt re-renders both
    assert r2.cached_tokens >= r1.prompt_tokens + len(r1.tokens) - 1
    assert r2.prefill_tokens == r2.prompt_tokens - r2.cached_tokens < 20
    # the reused cache holds the first reply's keys and values as the one-token decode steps computed them
    # (another summation order than one prefill of the whole text): each greedy token is the fresh forward's argmax
    # or within a near-tie of it, where a stale or misplaced cache row moves logits by whole units. With float32
    # activations the orders differ in the last bits only; with 8-bit ones an activation of a cached row that
    # rounds the other way moves a logit by ~0.1-0.2 (0.15 and 0.17 seen on an AVX2-VNNI host: float32's gaps there
    # were 0)
    assert gaps.max() < (0.05 if activations == "float32" else 0.5), gaps
    print(f"turn 1: {r1.prefill_tokens} tokens prefilled, first token after {r1.ttft_s * 1000:.0f} ms; turn 2: "
          f"{r2.prefill_tokens} of {r2.prompt_tokens} prefilled, first token after {r2.ttft_s * 1000:.0f} ms")


def test_stop_strings_max_tokens_and_the_context_policy(q8):
    model, tok = q8
    engine = ChatEngine(model, tok)
    msgs = [{"role": "user", "content": "Count from 1 to 20, separated by commas."}]
    full = engine.reply(msgs, max_tokens=60)
    text = full.text()
    assert "5" in text
    stopped = engine.reply(msgs, max_tokens=60, stop=["5"])
    assert stopped.text() == text[:text.index("5")] and stopped.result.finish_reason == "stop"
    assert stopped.result.stopped == "stop"
    short = engine.reply(msgs, max_tokens=5)
    short.text()
    assert len(short.result.tokens) == 5 and short.result.finish_reason == "length"
    # a small context: the oldest turns go, the system message stays
    small = ChatEngine(model, tok, context=160)
    chat = ChatSession(small, system="Be brief.")
    for q in ["Tell me a long story about a dragon.", "And another about a knight.", "Now one about a wizard."]:
        r = chat.send(q, max_tokens=48)
        r.text()
        assert chat.last.prompt_tokens + 48 <= 160 or chat.last.finish_reason == "length"
    assert chat.messages[0]["role"] == "system" and chat.last.dropped_messages > 0
    with pytest.raises(ContextFullError, match="context is 160 tokens"):
        chat.send("word " * 200, max_tokens=48)
    with pytest.raises(ContextFullError):
        small.reply([{"role": "user", "content": "word " * 400}])


def test_structured_output_validates(q8):
    jsonschema = pytest.importorskip("jsonschema")
    from ember.grammar import compile_json_schema
    model, tok = q8
    engine = ChatEngine(model, tok)
    done, total = 0, 0
    for name, schema, prompt in SCHEMAS:
        g = compile_json_schema(schema)
        for p in (prompt + " Answer in JSON.", "Give me an example."):
            # a light repetition penalty, as a user sets it: greedy 135M output can loop on an open map's keys
            # until max_tokens (what the grammar allows), and the check here is that what ends validates
            reply = engine.reply([{"role": "user", "content": p}], max_tokens=160,
                                 params=SamplingParams(temperature=0.0, repetition_penalty=1.1),
                                 constraint=g.constraint(tok))
            text = reply.text()
            total += 1
            assert reply.result.finish_reason == "stop", (name, p, text)
            jsonschema.validate(json.loads(text), schema)
            done += 1
    assert done == total == 2 * len(SCHEMAS) >= 40
