"""Subtitles from a transcription: SRT and WebVTT, a cue per segment or (words=True, after word timestamps) a cue
per word with that word underlined in its segment's line, as openai-whisper's --highlight_words writes them."""
from __future__ import annotations


def _stamp(seconds: float, sep: str) -> str:
    ms = max(0, int(round(seconds * 1000)))
    h, ms = divmod(ms, 3_600_000)
    m, ms = divmod(ms, 60_000)
    s, ms = divmod(ms, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"


def _clean(text: str) -> str:
    # a cue's text must not hold the arrow that separates its times, nor a blank line that ends the cue
    return " ".join(text.replace("-->", "->").split())


def cues(result: dict, words: bool = False):
    """(start, end, text) per segment, or per word of each segment (words=True) with the word in <u>...</u>."""
    for seg in result["segments"]:
        ws = seg.get("words")
        if not words or not ws:
            yield seg["start"], seg["end"], _clean(seg["text"])
            continue
        for i, w in enumerate(ws):
            line = "".join((f" <u>{x['word'].strip()}</u>" if j == i else x["word"]) for j, x in enumerate(ws))
            yield w["start"], w["end"], _clean(line)


def srt(result: dict, words: bool = False) -> str:
    return "".join(f"{i}\n{_stamp(a, ',')} --> {_stamp(b, ',')}\n{t}\n\n"
                   for i, (a, b, t) in enumerate(cues(result, words), 1))


def vtt(result: dict, words: bool = False) -> str:
    return "WEBVTT\n\n" + "".join(f"{_stamp(a, '.')} --> {_stamp(b, '.')}\n{t}\n\n" for a, b, t in cues(result, words))
