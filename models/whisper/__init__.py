"""Whisper (openai/whisper, MIT) in ember: audio front end (wav, resample, audio), model, decoding,
transcribe, loading (HF folder / URL / hub id / CTranslate2), `ember whisper` CLI. Import the
submodules you need; this package imports nothing on its own."""
