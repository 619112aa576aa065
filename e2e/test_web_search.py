"""The model zoo in the app on the CPU in Chromium, one page for both tools:

- the semantic-search tab with the real all-MiniLM-L6-v2 bundled by `build-web` as its demo: a pasted text is
  split into passages, embedded in the page, and a query ranks them; the page's vectors equal
  sentence-transformers' and native ember's (cosine >= 1 - 1e-5) and its ranking equals the native one;
- the text-generation tool loading a causal LM that is not Llama (a tiny random GPT-2 folder, sharded, with a
  byte-level BPE tokenizer.json, served in the hub layout): its greedy tokens equal transformers' and native
  ember's."""
from __future__ import annotations

import json

import numpy as np
import pytest
from web_app import RUN_S, App, Server

from expected_skips import missing

DOC = ("Cats are small domesticated felines. They purr when they are content and sleep most of the day.\n\n"
       "The stock market fell sharply on Tuesday after the central bank raised interest rates again.\n\n"
       "Python lists are mutable sequences; tuples are immutable and can be dictionary keys.\n\n"
       "The Amazon rainforest produces a large share of the world's oxygen and holds many species.\n\n"
       "To bake bread, mix flour, water, salt and yeast, let the dough rise, then bake it in a hot oven.")
QUERY = "which data structure can I change after creating it?"
PROMPT = "the cat sat on"
N = 8


@pytest.fixture(scope="module")
def minilm():
    from ember.wasm.tools.embed import minilm_demo
    demo = minilm_demo()
    if demo is None:
        missing("all-MiniLM-L6-v2 not fetched (ember.models.bert.fetch)")
    return demo


@pytest.fixture(scope="module")
def gpt2_folder(tmp_path_factory):
    """A seeded random GPT-2 (transformers) and a byte-level BPE tokenizer.json trained here on DOC."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    hub = tmp_path_factory.mktemp("hub")
    folder = hub / "ember-test" / "gpt2-tiny" / "resolve" / "main"
    folder.mkdir(parents=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([DOC, PROMPT], trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.save(str(folder / "tokenizer.json"))
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=tok.get_vocab_size(), n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                  bos_token_id=0, eos_token_id=0)
    ref = transformers.GPT2LMHeadModel(cfg).eval()
    ref.save_pretrained(folder, safe_serialization=True, max_shard_size="60KB")  # sharded: the page reads the index
    assert (folder / "model.safetensors.index.json").is_file() and not (folder / "model.safetensors").exists()
    return hub, folder, ref


@pytest.fixture(scope="module")
def zoo_server(minilm, gpt2_folder, tmp_path_factory):
    from ember.wasm.serve import build_site
    site = build_site(tmp_path_factory.mktemp("zoo-site"), models={"embed": minilm}, quiet=True)
    s = Server(site, gpt2_folder[0])
    yield s
    s.close()


@pytest.fixture(scope="module")
def app(playwright_session, zoo_server):
    a = App(playwright_session, f"{zoo_server.url}?device=cpu&hub={zoo_server.url}hub")
    yield a
    a.close()


def _search(app, query):
    app.page.eval_on_selector("#panel-search .search-results", "e => { delete e.dataset.json; }")
    app.page.fill("#panel-search .search-query", query)  # fires "input": the live search
    return app.wait_result("#panel-search .search-results")


def test_search_tab_ranks_passages_with_the_page_vectors_equal_to_native(app, minilm, zoo_server):
    st = pytest.importorskip("sentence_transformers")
    from ember.models.bert.sentence import SentenceEncoder
    from ember.wasm.tools.embed import split_passages
    app.page.click("#tab-search")
    assert not app.page.is_hidden("#panel-search") and app.page.is_hidden("#panel-whisper")
    app.page.fill("#panel-search .search-doc", DOC)
    app.page.click("#panel-search .search-index")
    app.page.wait_for_function("/5 passages embedded in/.test(document.querySelector('#panel-search .search-count')"
                               ".textContent) || !document.querySelector('#message').hidden", timeout=420_000)
    assert app.message() == ""
    got = _search(app, QUERY)
    assert got is not None, app.message()
    state = app.page.evaluate("() => ({ passages: window.emberSearch.state.passages, "
                              "vectors: window.emberSearch.state.vectors.map((v) => Array.from(v)), "
                              "query: Array.from(window.emberSearch.state.query) })")
    passages = split_passages(DOC)
    assert state["passages"] == passages and len(passages) == 5
    page_v = np.array(state["vectors"] + [state["query"]], np.float32)                     # (6, 384)
    folder = next(iter(minilm["files"].values())).parent
    for ref in (st.SentenceTransformer(str(folder), device="cpu").encode(passages + [QUERY]),
                SentenceEncoder(folder).encode(passages + [QUERY])):
        cos = (page_v * ref).sum(-1) / np.linalg.norm(page_v, axis=-1) / np.linalg.norm(ref, axis=-1)
        assert cos.min() >= 1 - 1e-5, cos
        want = np.argsort(-(ref[:5] @ ref[5]), kind="stable")
        assert [r["index"] for r in got["ranking"]] == want.tolist()
    assert got["ranking"][0]["index"] == 2  # the Python passage answers the question
    shown = app.page.inner_text("#panel-search .search-results li:first-child")
    assert "Python lists" in shown
    again = _search(app, "how do I make bread at home")  # live: a new query re-ranks the same vectors
    assert again["ranking"][0]["index"] == 4
    assert sum("all-MiniLM-L6-v2/model.safetensors" in r for r in zoo_server.requests) == 1
    assert any("all-MiniLM-L6-v2/1_Pooling/config.json" in r for r in zoo_server.requests)  # its pooling config too
    assert "M parameters" in app.page.inner_text("#panel-search .search-status")
    app.screenshot("search-cpu.png")
    assert not app.errors, app.errors


def test_a_sharded_gpt2_folder_loads_into_the_text_tool_and_generates_native_tokens(app, gpt2_folder, zoo_server):
    import torch

    from ember.models.auto import load_causal_lm
    from ember.models.common.generate import SamplingParams, generate
    _, folder, ref = gpt2_folder
    app.page.click("#tab-llama")
    app.load_hub("llama", "ember-test/gpt2-tiny")
    assert app.message() == "", app.message()
    app.page.eval_on_selector("#llama-output", "e => { delete e.dataset.json; }")
    app.generate(PROMPT, N)
    got = app.wait_result("#llama-output")
    assert got is not None, app.message()
    model, tok = load_causal_lm(folder)
    ids = tok.encode(PROMPT, bos=True)
    native = list(generate(model, ids, N, SamplingParams(0.0), tok.eos_ids))
    with torch.no_grad():
        want = ref.generate(torch.tensor([ids]), max_new_tokens=N, do_sample=False, pad_token_id=0,
                            eos_token_id=None)[0, len(ids):].tolist()
    assert got["prompt_tokens"] == ids
    assert got["tokens"] == native == want[:len(native)], (got["tokens"], native, want)
    assert json.loads(app.page.eval_on_selector("#llama-output", "e => e.dataset.json"))["tokens"] == got["tokens"]
    shards = sorted(p.name for p in folder.glob("model-*.safetensors"))
    assert len(shards) > 1 and all(any(s in r for r in zoo_server.requests) for s in shards)

    # the same files dropped on the model picker load as local files and generate the same tokens
    urls = [f"{zoo_server.url}hub/ember-test/gpt2-tiny/resolve/main/{p.name}" for p in sorted(folder.iterdir())]
    app.page.evaluate("""async (urls) => {
        const dt = new DataTransfer();
        for (const u of urls) dt.items.add(new File([await (await fetch(u)).blob()], u.split("/").pop()));
        document.querySelector("#picker-llama").dispatchEvent(new DragEvent("drop", { dataTransfer: dt, bubbles: true }));
    }""", urls)
    app.page.wait_for_function("/^Loaded .*tokenizer[.]json/.test(document.querySelector('#picker-llama .model-status')"
                               ".textContent) || !document.querySelector('#message').hidden", timeout=RUN_S * 1000)
    assert app.page.input_value("#picker-llama .kind") == "file", app.message()
    app.page.eval_on_selector("#llama-output", "e => { delete e.dataset.json; }")
    app.generate(PROMPT, N)
    again = app.wait_result("#llama-output")
    assert again is not None and again["tokens"] == native, app.message()
    assert not app.errors, app.errors
