"""Live transcription of a stream of audio chunks (a microphone): Silero VAD finds where utterances end, the
buffered audio is re-transcribed with word timestamps as it grows, and a word is committed once two consecutive
transcriptions agree on it (LocalAgreement-2, as whisper_streaming does). Committed words never change; the rest
is the partial text. At an utterance's end (a pause the VAD hears) everything heard is committed and the buffer
starts afresh, so memory stays bounded however long the stream runs: at most MAX_BUFFER_S of audio (a longer
utterance without pauses commits and trims at its committed words), and the committed words themselves.

    live = LiveTranscriber(model, tokenizer)
    update = live.push(samples_16k)     # {"committed": [{word, start, end}], "partial", "t", "speech", "level"}
    update = live.close()               # the rest committed
"""
from __future__ import annotations

import re

import numpy as np

from ember.errors import EmberError

from . import vad as V
from .transcribe import transcribe

SAMPLE_RATE = 16000
STEP_S = 1.0            # re-transcribe after this much new audio
END_SILENCE_S = 0.6     # a pause this long after speech ends an utterance
TRIM_S = 15.0           # past this, the buffer is cut after its last committed word
MAX_BUFFER_S = 25.0     # past this, everything heard is committed and the buffer starts afresh
AGE_S = 8.0             # past TRIM_S, words this old are committed without agreement
MAX_PUSH_S = 30.0       # one push holds at most this much audio
SETTLE_S = 0.5          # a word is committed early only once this much audio follows it


class StreamError(EmberError, ValueError):
    """A push the stream cannot take: closed, a changed sample rate, samples that are not finite mono floats."""


def _norm(word: str) -> str:
    return re.sub(r"[^\w']", "", word.lower())


class LiveTranscriber:
    def __init__(self, model, tokenizer, vad: V.SileroVAD | None = None, sample_rate: int = SAMPLE_RATE,
                 language: str | None = None, step_s: float = STEP_S, trim_s: float = TRIM_S,
                 max_buffer_s: float = MAX_BUFFER_S, age_s: float = AGE_S):
        if sample_rate != SAMPLE_RATE:
            raise StreamError(f"ember: live transcription takes {SAMPLE_RATE} Hz audio, got {sample_rate} Hz; "
                              f"resample first (the page's AudioContext runs at {SAMPLE_RATE} Hz)")
        if not 0 < age_s < trim_s < max_buffer_s <= MAX_PUSH_S:
            raise StreamError(f"ember: live buffer limits need 0 < age_s < trim_s < max_buffer_s <= {MAX_PUSH_S:g}, "
                              f"got {age_s}, {trim_s}, {max_buffer_s}")
        self.model, self.tokenizer, self.language, self.step_s = model, tokenizer, language, step_s
        self.trim_s, self.max_buffer_s, self.age_s = trim_s, max_buffer_s, age_s
        self.rate = sample_rate
        self.vad = vad if vad is not None else V.SileroVAD()
        self.vad.reset()
        self.buffer = np.zeros(0, np.float32)   # audio since buffer_start
        self.buffer_start = 0.0                 # stream seconds
        self.total = 0                          # samples pushed
        self.pending = np.zeros(0, np.float32)  # samples not yet a whole VAD frame
        self.committed: list[dict] = []
        self.hypothesis: list[dict] = []        # the last transcription's words after the committed ones
        self.heard_speech = False               # speech in the buffer since the last utterance end
        self.silence_s = 0.0                    # non-speech since the last speech frame
        self.since_decode = 0
        self.closed = False

    # ------------------------------------------------------------------ input

    def push(self, samples, sample_rate: int | None = None) -> dict:
        if self.closed:
            raise StreamError("ember: the live stream is closed; start a new one")
        if sample_rate is not None and sample_rate != self.rate:
            raise StreamError(f"ember: the live stream's sample rate changed mid-stream from {self.rate} Hz "
                              f"to {sample_rate} Hz")
        x = np.asarray(samples)
        if x.dtype.kind != "f" or x.ndim != 1:
            raise StreamError(f"ember: live audio must be mono float samples (n,), got {x.dtype} {x.shape}")
        if x.size > MAX_PUSH_S * self.rate:
            raise StreamError(f"ember: one push holds at most {MAX_PUSH_S:g} s of audio, got {x.size / self.rate:.1f} s")
        x = x.astype(np.float32)
        if not np.isfinite(x).all():
            raise StreamError("ember: live audio samples contain NaN or infinity")
        self.total += x.size
        level = float(20 * np.log10(max(float(np.sqrt(np.mean(x * x))) if x.size else 0.0, 1e-5)))
        new = []
        used = 0  # samples of x already in the buffer
        for end in self._listen(x):  # each utterance that ends inside this chunk: finish it where it ends
            self._append(x[used:end])
            used = end
            new += self._finish_utterance()
        self._append(x[used:])
        if not self.heard_speech:  # nothing to transcribe yet: keep only a short lead-in
            keep = int(0.5 * self.rate)
            if self.buffer.size > keep:
                self.buffer_start += (self.buffer.size - keep) / self.rate
                self.buffer = self.buffer[-keep:]
            return self._update(new, level)
        if self.since_decode >= self.step_s * self.rate:
            new += self._agree(self._transcribe())
            new += self._bound()
        return self._update(new, level)

    def close(self) -> dict:
        """Commit what is left and end the stream (a push after it is an error)."""
        if self.closed:
            raise StreamError("ember: the live stream is already closed")
        new = self._finish_utterance() if self.heard_speech else []
        self.closed, self.heard_speech = True, False
        return dict(self._update(new, -100.0), final=True)

    # ------------------------------------------------------------------ internals

    def _append(self, x):
        self.buffer = np.concatenate([self.buffer, x])
        self.since_decode += x.size

    def _listen(self, x) -> list[int]:
        """Run the VAD over x's whole frames; -> the offsets in x where an utterance ended (a pause of
        END_SILENCE_S after speech), each at the end of the frame that completed the pause."""
        start = -self.pending.size  # x's offset of the first frame
        frames = np.concatenate([self.pending, x])
        n = frames.size // V.FRAME * V.FRAME
        self.pending = frames[n:]
        ends = []
        for i, p in enumerate(self.vad.stream(frames[:n]) if n else ()):
            if p >= 0.5:
                self.heard_speech, self.silence_s = True, 0.0
            elif p < 0.35:
                self.silence_s += V.FRAME / self.rate
                if self.heard_speech and self.silence_s >= END_SILENCE_S:
                    ends.append(max(0, start + (i + 1) * V.FRAME))
                    self.heard_speech = False  # the next speech frame starts the next utterance
        return ends

    def _transcribe(self) -> list[dict]:
        """The buffer's words in stream seconds."""
        self.since_decode = 0
        if self.buffer.size < V.FRAME:
            return []
        # (no prompt of committed text: on tiny models it pulled partial utterances towards the previous one)
        r = transcribe(self.model, self.tokenizer, self.buffer, language=self.language, word_timestamps=True,
                       temperature=0.0, compression_ratio_threshold=None, logprob_threshold=None,
                       no_speech_threshold=None)
        self.language = self.language or r["language"]
        return [{"word": w["word"], "start": round(self.buffer_start + w["start"], 2),
                 "end": round(self.buffer_start + w["end"], 2)} for s in r["segments"] for w in s["words"]]

    def _fresh(self, words: list[dict]) -> list[dict]:
        """Words of a transcription that follow the committed ones: those starting before the last committed
        word ended are dropped, then up to 5 words repeating the committed tail (whisper_streaming's rule)."""
        end = self.committed[-1]["end"] if self.committed else -1.0
        words = [w for w in words if w["start"] > end - 0.1]
        tail = [_norm(w["word"]) for w in self.committed[-5:]]
        for n in range(min(5, len(tail), len(words)), 0, -1):
            if [_norm(w["word"]) for w in words[:n]] == tail[-n:]:
                return words[n:]
        return words

    def _agree(self, words: list[dict]) -> list[dict]:
        """LocalAgreement-2: commit the longest prefix this transcription shares with the previous one, among the
        words that end at least SETTLE_S before the audio does (a word at the buffer's end may be cut mid-way)."""
        new = self._fresh(words)
        settled = self.buffer_start + self.buffer.size / self.rate - SETTLE_S
        k = 0
        while k < min(len(new), len(self.hypothesis)) and new[k]["end"] <= settled \
                and _norm(new[k]["word"]) == _norm(self.hypothesis[k]["word"]):
            k += 1
        done = new[:k]
        self.committed += done
        self.hypothesis = new[k:]
        return done

    def _finish_utterance(self) -> list[dict]:
        """A pause after speech: commit the whole transcription, keep only the audio after the last speech."""
        done = self._fresh(self._transcribe())
        self.committed += done
        self.hypothesis = []
        keep = min(self.buffer.size, int(END_SILENCE_S * self.rate))
        self.buffer_start += (self.buffer.size - keep) / self.rate
        self.buffer = self.buffer[self.buffer.size - keep:]  # (the VAD state is _listen's: it saw the chunk's rest)
        return done

    def _bound(self) -> list[dict]:
        """Keep the buffer short: past TRIM_S, words that ended more than AGE_S ago are committed even where two
        transcriptions disagree on them (a flaky word would hold everything after it back), and the buffer is cut
        after the last committed word; past MAX_BUFFER_S, everything heard is committed."""
        seconds = self.buffer.size / self.rate
        forced = []
        if seconds > self.trim_s:
            old = self.buffer_start + seconds - self.age_s
            while self.hypothesis and self.hypothesis[0]["end"] <= old:
                forced.append(self.hypothesis.pop(0))
            self.committed += forced
        if seconds > self.max_buffer_s:
            done = self.hypothesis
            self.committed += done
            self.hypothesis = []
            cut = self.buffer.size
            if done or self.committed:
                cut = min(cut, int((self.committed[-1]["end"] - self.buffer_start) * self.rate))
            self._cut(max(cut, self.buffer.size - int(self.trim_s * self.rate)))
            return forced + done
        if seconds > self.trim_s and self.committed and self.committed[-1]["end"] > self.buffer_start:
            self._cut(int((self.committed[-1]["end"] - self.buffer_start) * self.rate))
        return forced

    def _cut(self, n: int):
        n = max(0, min(n, self.buffer.size))
        self.buffer_start += n / self.rate
        self.buffer = self.buffer[n:]

    def _update(self, new: list[dict], level: float) -> dict:
        return {"committed": new, "partial": "".join(w["word"] for w in self.hypothesis),
                "t": round(self.total / self.rate, 3), "speech": bool(self.heard_speech and self.silence_s == 0),
                "level": round(level, 1), "buffer_s": round(self.buffer.size / self.rate, 2)}
