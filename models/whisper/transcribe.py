"""Transcribe audio of any length: 30 s windows, seeking on predicted timestamps, temperature
fallback, segments with start/end times (openai/whisper transcribe.py v20240930, with the window
and segment rules of transformers' long-form Whisper generate so both give the same tokens).

Clips up to 30 s give 3000 frames of features padded to 30 s (transformers' short-form input);
longer audio one log-mel over the whole signal, computed a window at a time (audio.LongFormMel).
Either is decoded window by window: with timestamps, a window's decoding ends at its last complete
timestamp pair and the next window starts there (so a short clip can take more than one pass, as in
transformers).
"""
from __future__ import annotations

import os
from dataclasses import replace

import numpy as np

import ember

from . import audio as A
from .decoding import DecodingOptions, DecodingResult, WindowDecoder, detect_language

TIME_PRECISION = 0.02          # seconds per timestamp token
FRAME_SECONDS = A.HOP_LENGTH / A.SAMPLE_RATE  # 0.01 s per mel frame
INPUT_STRIDE = 2               # mel frames per encoder position (conv2 stride)


def load_input(source) -> np.ndarray:
    """A path / bytes of a WAV file, or 16 kHz mono float samples -> float32 (n_samples,)."""
    if isinstance(source, (str, os.PathLike, bytes, bytearray, memoryview)):
        samples = A.load_audio(bytes(source) if isinstance(source, (bytearray, memoryview)) else source)
    else:
        samples = np.asarray(source, np.float32)
    if samples.ndim != 1:
        raise ValueError(f"ember: transcribe expects mono samples (n_samples,), got shape {samples.shape}")
    if samples.size == 0:
        name = os.fspath(source) if isinstance(source, (str, os.PathLike)) else "the input"
        raise ValueError(f"ember: {name} holds no audio samples")
    return samples


def features(samples: np.ndarray, n_mels: int) -> tuple[np.ndarray | A.LongFormMel, bool]:
    """-> (log-mel (n_mels, frames), long_form). Short clips: padded to 30 s (3000 frames). Longer audio:
    the whole signal's log-mel, computed window by window as the seek loop asks for it (LongFormMel)."""
    if samples.size <= A.N_SAMPLES:
        return A.log_mel_spectrogram(samples, n_mels), False
    return A.LongFormMel(samples, n_mels), True


def decode_with_fallback(decoder: WindowDecoder, audio_features, language, temperatures,
                         compression_ratio_threshold, logprob_threshold, no_speech_threshold):
    """openai's rule: retry at the next temperature while the text is too repetitive (gzip
    ratio) or too unlikely (mean log-prob), unless the window looks silent."""
    result = None
    for t in temperatures:
        result = decoder.run(audio_features, language, t)
        retry = ((compression_ratio_threshold is not None and result.compression_ratio > compression_ratio_threshold)
                 or (logprob_threshold is not None and result.avg_logprob < logprob_threshold))
        if (no_speech_threshold is not None and logprob_threshold is not None
                and result.no_speech_prob > no_speech_threshold and result.avg_logprob < logprob_threshold):
            retry = False  # silence: the window will be skipped, sampling won't help
        if not retry:
            break
    return result


def split_segments(tokens, time_offset, window_frames, timestamp_begin):
    """Generated tokens of one window -> ([(start, end, tokens)], frames to advance); transformers'
    _retrieve_segment: cut after each consecutive timestamp pair; an unfinished last segment is
    dropped and decoding resumes at its start."""
    is_ts = [t >= timestamp_begin for t in tokens]
    single_ending = is_ts[-2:] == [False, True]
    cuts = [i + 1 for i in range(len(tokens) - 1) if is_ts[i] and is_ts[i + 1]]
    if not cuts:
        end_pos = int(window_frames * FRAME_SECONDS / TIME_PRECISION)
        stamps = [t for t in tokens if t >= timestamp_begin]
        if stamps and stamps[-1] != timestamp_begin:
            end_pos = stamps[-1] - timestamp_begin
        return [(time_offset, time_offset + end_pos * TIME_PRECISION, list(tokens))], window_frames
    if single_ending:
        cuts.append(len(tokens))
    else:
        cuts[-1] += 1  # keep the closing timestamp in the last complete segment
    segments, last = [], 0
    for i, cut in enumerate(cuts):
        piece = list(tokens[last:cut])
        end_idx = -1 if (i < len(cuts) - 1 or single_ending) else -2
        segments.append((time_offset + (piece[0] - timestamp_begin) * TIME_PRECISION,
                         time_offset + (piece[end_idx] - timestamp_begin) * TIME_PRECISION, piece))
        last = cut
    if single_ending:
        return segments, window_frames
    return segments, (tokens[last - 2] - timestamp_begin) * INPUT_STRIDE


def transcribe(model, tokenizer, source, *, on_segment=None, **options) -> dict:
    """Audio (WAV path/bytes or 16 kHz samples) -> {"text", "language", "segments": [{"id", "seek",
    "start", "end", "text", "tokens", "avg_logprob", "compression_ratio", "no_speech_prob",
    "temperature"}]}. Audio over 30 s is decoded with timestamps (seeking needs them). Options (language,
    task, timestamps, beam_size, temperature, thresholds, ...) as transcribe_steps.
    on_segment(segment) is called as each segment is finished."""
    return _drive(transcribe_steps(model, tokenizer, source, **options), on_segment)


def transcribe_steps(model, tokenizer, source, *, language: str | None = None, task: str = "transcribe",
                     timestamps: bool = False, beam_size: int | None = None,
                     temperature=(0.0, 0.2, 0.4, 0.6, 0.8, 1.0), compression_ratio_threshold: float | None = 2.4,
                     logprob_threshold: float | None = -1.0, no_speech_threshold: float | None = 0.6,
                     condition_on_previous_text: bool = False, initial_prompt=None, word_timestamps: bool = False,
                     vad=False, seed: int | None = 0):
    """transcribe() as a generator, so a caller can show progress and stop between steps (the page's
    worker awaits between them; closing the generator cancels the rest). Yields
    ("window", seek_seconds, duration_seconds) before each 30 s window and ("segment", segment) as each
    segment is finished; returns transcribe()'s result.

    initial_prompt (text or token ids) is the first window's previous text; condition_on_previous_text keeps
    feeding each window's text to the next (openai's rules: reset after a window decoded above temperature 0.5).
    word_timestamps adds "words" [{word, start, end, probability}] to each segment (timing.py). vad (True, a
    vad.VadOptions or a vad.SileroVAD) transcribes only the speech regions Silero VAD finds, in pieces of at most
    30 s cut at pauses, with every time mapped back to the input's timeline."""
    samples = load_input(source)
    duration = samples.size / A.SAMPLE_RATE
    yield ("window", 0.0, duration)
    opts = dict(language=language, task=task, beam_size=beam_size, temperature=temperature,
                compression_ratio_threshold=compression_ratio_threshold, logprob_threshold=logprob_threshold,
                no_speech_threshold=no_speech_threshold, condition_on_previous_text=condition_on_previous_text,
                initial_prompt=initial_prompt, word_timestamps=word_timestamps, seed=seed)
    if vad is not False and vad is not None:
        return (yield from _vad_steps(model, tokenizer, samples, vad, timestamps, opts))
    mel, long_form = features(samples, tokenizer.config.dims.n_mels)
    return (yield from seek_loop(model, tokenizer, mel, duration, timestamps=timestamps or long_form, **opts))


def _vad_steps(model, tokenizer, samples, vad, timestamps, opts):
    """Speech regions (Silero VAD, split at pauses to at most 30 s), joined into pieces of at most 30 s, each
    transcribed as a clip; segment and word times mapped from the speech-only signal back to the input."""
    from . import vad as V
    detector = vad if isinstance(vad, V.SileroVAD) else V.SileroVAD()
    options = vad if isinstance(vad, V.VadOptions) else V.VadOptions(max_speech_s=A.CHUNK_LENGTH)
    regions = V.speech_regions(detector.probs(samples), samples.size, options)
    tmap = V.TimelineMap(regions)
    total_s, segments, language, offset = samples.size / A.SAMPLE_RATE, [], opts["language"], 0
    chunks = V.pieces(regions, A.N_SAMPLES)
    for piece in chunks:
        clip = np.concatenate([samples[r["start"]:r["end"]] for r in piece])
        mel, _ = features(clip, tokenizer.config.dims.n_mels)
        steps = seek_loop(model, tokenizer, mel, clip.size / A.SAMPLE_RATE, timestamps=timestamps,
                          **{**opts, "language": language})
        while True:
            try:
                step = next(steps)
            except StopIteration as done:
                language = done.value["language"]
                break
            if step[0] == "window":
                yield ("window", tmap.original(offset / A.SAMPLE_RATE + step[1]), total_s)
                continue
            seg = dict(step[1], id=len(segments), seek=step[1]["seek"] + offset // A.HOP_LENGTH)
            seg["start"] = tmap.original(offset / A.SAMPLE_RATE + seg["start"])
            seg["end"] = tmap.original(offset / A.SAMPLE_RATE + seg["end"], is_end=True)
            if "words" in seg:
                seg["words"] = [dict(w, start=tmap.original(offset / A.SAMPLE_RATE + w["start"]),
                                     end=tmap.original(offset / A.SAMPLE_RATE + w["end"], is_end=True))
                                for w in seg["words"]]
            segments.append(seg)
            yield ("segment", seg)
        offset += clip.size
    yield ("window", total_s, total_s)
    return {"text": "".join(s["text"] for s in segments), "language": language or "en", "segments": segments,
            "speech": [{"start": r["start"] / A.SAMPLE_RATE, "end": r["end"] / A.SAMPLE_RATE} for r in regions],
            "pieces": [{"start": p[0]["start"] / A.SAMPLE_RATE, "end": p[-1]["end"] / A.SAMPLE_RATE} for p in chunks]}


def _drive(steps, on_segment=None) -> dict:
    while True:
        try:
            step = next(steps)
        except StopIteration as done:
            return done.value
        if step[0] == "segment" and on_segment:
            on_segment(step[1])


def transcribe_features(model, tokenizer, mel, duration: float | None = None, *, on_segment=None, **options) -> dict:
    """The seek loop over a log-mel (n_mels, frames): 3000 frames (a clip padded to 30 s) or the
    whole signal's; `duration` (s) caps the end of segments without timestamps. Options as seek_loop."""
    return _drive(seek_loop(model, tokenizer, mel, duration, **options), on_segment)


def seek_loop(model, tokenizer, mel, duration: float | None = None, *, language=None, task="transcribe",
              timestamps=False, beam_size=None, temperature=0.0, compression_ratio_threshold=None,
              logprob_threshold=None, no_speech_threshold=None, condition_on_previous_text=False,
              initial_prompt=None, word_timestamps=False, seed=0):
    """transcribe_features as a generator of ("window", seek_s, total_s) / ("segment", seg) steps."""
    cfg = tokenizer.config
    temps = (float(temperature),) if np.isscalar(temperature) else tuple(float(t) for t in temperature)
    # word timestamps re-read a window's tokens in one pass of the decoder's 448 positions: at most n_ctx // 2 new
    # tokens per window then, as openai-whisper always decodes (transformers' default allows 448)
    options = DecodingOptions(task=task, language=language, beam_size=beam_size, timestamps=timestamps, seed=seed,
                              sample_len=model.decoder.n_ctx // 2 if word_timestamps else None)
    device = model.encoder.conv1.weight.device
    max_frames = mel.shape[1]
    total_s = duration if duration is not None else max_frames * FRAME_SECONDS
    history = prompt_tokens(tokenizer, initial_prompt)
    seek, segments, reset_since, language_probs, last_speech = 0, [], 0, None, 0.0
    with ember.no_grad():
        while seek < max_frames:
            window_frames = min(max_frames - seek, A.N_FRAMES)
            time_offset = seek * FRAME_SECONDS
            yield ("window", min(time_offset, total_s), total_s)
            window = A.pad_or_trim(mel[:, seek:seek + window_frames], A.N_FRAMES)  # (n_mels, 3000)
            audio_features = model.encoder(ember.tensor(window[None], device=device))  # (1, 1500, d)
            if language is None:
                if cfg.multilingual:
                    language, language_probs = detect_language(model, tokenizer, audio_features)
                else:
                    language = "en"
            prompt = tuple(history[reset_since:][-(model.decoder.n_ctx // 2 - 1):])
            decoder = WindowDecoder(model, tokenizer, replace(options, language=language, prompt=prompt))
            result: DecodingResult = decode_with_fallback(decoder, audio_features, language, temps,
                                                          compression_ratio_threshold, logprob_threshold,
                                                          no_speech_threshold)
            if (no_speech_threshold is not None and result.no_speech_prob > no_speech_threshold
                    and (logprob_threshold is None or result.avg_logprob < logprob_threshold)):
                seek += window_frames  # silence
                continue
            if timestamps:
                pieces, advance = split_segments(result.tokens, time_offset, window_frames, cfg.special.timestamp_begin)
            else:
                end = time_offset + window_frames * FRAME_SECONDS
                pieces, advance = [(time_offset, min(end, duration or end), result.tokens)], window_frames
            new = []
            for start, end, toks in pieces:
                if not toks:
                    continue
                new.append({"id": len(segments) + len(new), "seek": seek, "start": round(float(start), 3),
                            "end": round(float(end), 3), "text": tokenizer.decode(toks), "tokens": [int(t) for t in toks],
                            "avg_logprob": result.avg_logprob, "compression_ratio": result.compression_ratio,
                            "no_speech_prob": result.no_speech_prob, "temperature": result.temperature})
            if word_timestamps and new:
                from .timing import add_word_timestamps
                content = window_frames if duration is None else \
                    max(1, min(window_frames, int(round(duration * A.SAMPLE_RATE)) // A.HOP_LENGTH - seek))  # audio, not padding
                last_speech = add_word_timestamps(new, model, tokenizer, audio_features, content, time_offset,
                                                  language if cfg.multilingual else None, last_speech)
            for seg in new:
                segments.append(seg)
                history.extend(seg["tokens"])
                yield ("segment", seg)
            if not condition_on_previous_text or result.temperature > 0.5:
                reset_since = len(history)  # openai: a sampled window's text would mislead the next one
            seek += max(int(advance), 1)
    yield ("window", total_s, total_s)
    out = {"text": "".join(s["text"] for s in segments), "language": language, "segments": segments}
    if language_probs is not None:
        out["language_probs"] = language_probs
    return out


def prompt_tokens(tokenizer, initial_prompt) -> list:
    """openai's initial prompt: text encoded after a space, or token ids as they are."""
    if initial_prompt is None or initial_prompt == "":
        return []
    if isinstance(initial_prompt, str):
        return tokenizer.encode(" " + initial_prompt.strip())
    ids = [int(t) for t in initial_prompt]
    if any(t < 0 or t >= tokenizer.eot for t in ids):
        raise ValueError(f"ember: initial_prompt token ids must be text tokens below {tokenizer.eot}")
    return ids
